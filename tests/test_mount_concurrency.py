"""Several writers, long lines, and readers that follow (tail -f)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path

from conftest_mount import LineReader, Mount

pytest_plugins = ["conftest_mount"]


def test_concurrent_appenders_never_tear_lines(mount: Mount) -> None:
    # Four processes, each writing 2000 lines in pieces (partial writes per line) and in
    # whole-buffer writes, all O_APPEND on one topic.
    writer = r"""
import os, sys
w = sys.argv[1]
fd = os.open("t", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for i in range(2000):
    line = ("%s-%05d-" % (w, i)).encode() + b"x" * (i % 300) + b"\n"
    if i % 3 == 0:
        os.write(fd, line[:5]); os.write(fd, line[5:])
    else:
        os.write(fd, line)
os.close(fd)
"""
    procs = [subprocess.Popen(["python3", "-c", writer, f"w{n}"], cwd=mount.path) for n in range(4)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    lines = (mount.path / "t").read_bytes().split(b"\n")
    assert lines[-1] == b""
    lines = lines[:-1]
    assert len(lines) == 8000
    seen: dict[str, list[int]] = {}
    for line in lines:
        w, i, rest = line.decode().split("-", 2)
        assert rest == "x" * (int(i) % 300), line
        seen.setdefault(w, []).append(int(i))
    # Each writer's lines arrive whole and in its own order.
    assert all(v == list(range(2000)) for v in seen.values()) and len(seen) == 4


def test_six_mib_lines_from_concurrent_writers(mount: Mount) -> None:
    # One write() of a 6 MiB line arrives as six 1 MiB WRITE requests; two such writers
    # at once must still give two whole records.
    writer = r"""
import os, sys
c = sys.argv[1].encode()
fd = os.open("big", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for _ in range(2):
    assert os.write(fd, c * (6 << 20) + b"\n") == (6 << 20) + 1
os.close(fd)
"""
    procs = [subprocess.Popen(["python3", "-c", writer, c], cwd=mount.path) for c in "ab"]
    for p in procs:
        assert p.wait(timeout=120) == 0
    data = (mount.path / "big").read_bytes()
    records = data.split(b"\n")[:-1]
    assert len(records) == 4
    assert sorted(r[:1] for r in records) == [b"a", b"a", b"b", b"b"]
    assert all(r == r[:1] * (6 << 20) for r in records)
    assert os.getxattr(mount.path / "big", "user.walfs.high_watermark") == b"4"
    assert mount.out("wc -l < big").strip() == "4"


def test_tail_follows_appends(mount: Mount) -> None:
    mount.sh("echo first >> t")
    tail = subprocess.Popen(
        ["tail", "-n", "+1", "-s", "0.1", "-f", "t"], cwd=mount.path, stdout=subprocess.PIPE
    )
    try:
        lines = LineReader(tail)
        assert lines.readline() == b"first\n"
        for n in range(5):
            mount.sh(f"echo line{n} >> t")
            assert lines.readline() == f"line{n}\n".encode()
        # Growth through the other name and a partial line committed at close.
        mount.sh("printf partial >> partition=0/t")
        assert lines.readline() == b"partial\n"
    finally:
        tail.kill()
        tail.wait()


def test_readers_flow_while_writer_waits_for_fsync(make_mount) -> None:
    m: Mount = make_mount()
    m.start("--fsync", "always")
    m.sh("seq 1 1000 >> nums")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            fd = os.open(m.path / "w", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            while not stop.is_set():
                os.write(fd, b"durable\n")
            os.close(fd)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(50):
            assert m.out("wc -l < nums").strip() == "1000"
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert set(m.out("cat w").split()) == {"durable"}


def test_concurrent_readers_of_different_topics_get_their_own_bytes(mount: Mount) -> None:
    # READ replies are built in one buffer the daemon reuses: many readers at once, on
    # different topics and a consumer file, with the kernel's cache dropped between
    # passes, must each get exactly their own topic's bytes.
    topics = {}
    for n in range(3):
        line = b"topic%d-" % n
        data = b"".join(line + b"%07d" % i + b"y" * (i % 200) + b"\n" for i in range(20_000))
        with open(mount.path / f"r{n}", "ab") as f:
            f.write(data)
        topics[f"r{n}"] = data
    reader = r"""
import os, sys, hashlib
path, rounds = sys.argv[1], int(sys.argv[2])
for _ in range(rounds):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # through the daemon every time
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    print(hashlib.sha256(b"".join(chunks)).hexdigest(), flush=True)
"""
    # A consumer file is read once: closing it commits what it returned.
    os.mkdir(mount.path / ".consumers/g")
    jobs = [(f"r{n}", 4) for n in range(3)] * 2 + [(".consumers/g/r1", 1)]
    procs = [
        subprocess.Popen(["python3", "-c", reader, p, str(k)], cwd=mount.path, stdout=subprocess.PIPE)
        for p, k in jobs
    ]
    for (p, k), proc in zip(jobs, procs, strict=True):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        want = hashlib.sha256(topics[p.rsplit("/", 1)[-1]]).hexdigest()
        assert out.decode().split() == [want] * k, p


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_cold_reads_go_to_a_thread_and_return_the_same_bytes(mount: Mount) -> None:
    data = b"".join(b"cold-%07d-" % i + b"z" * (i % 150) + b"\n" for i in range(40_000))
    topic = mount.path / "old"
    with open(topic, "ab") as f:
        f.write(data)
        os.fsync(f.fileno())  # durable, so the segments' pages are clean and can be dropped
    # A fresh daemon: the one that took the writes read them back to put them into the
    # kernel's page cache (walfs/fuse/page_push.py), which maps the segments.
    mount.stop()
    mount.start()

    def cold_reads() -> int:
        return int(os.getxattr(mount.path, "user.walfs.cold_reads"))

    # Cold: the segments' pages are dropped (they are clean and not yet mapped by the
    # daemon, whose reads go through mmap), and so is the kernel's copy of the topic.
    for seg in mount.data.rglob("seg-*.wal"):
        _evict(seg)
    _evict(topic)
    before = cold_reads()
    assert topic.read_bytes() == data
    cold = cold_reads()
    assert cold > before
    # Warm: the segments are in memory now; with the topic's kernel pages dropped again,
    # every byte is read through the daemon, on its loop.
    _evict(topic)
    assert topic.read_bytes() == data
    assert cold_reads() == cold
