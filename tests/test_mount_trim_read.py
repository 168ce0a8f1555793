"""A trimmed topic reads from its first kept record (issue 33): after a trim by any face
(setfattr, `walfs trim`, a background retention pass, Kafka's DeleteRecords) every
plain tool (cat, head, wc -l, grep -c, sort, cp, Spark's text reader and its splits)
sees exactly the kept records; a file opened before the trim keeps its positions, so a
`tail -f` following the topic across trims prints every line once, in order; `tail -F`
sees a new file (a new inode, as after logrotate) and prints it from its start. The
rule: docs/mount.md "Trimming and retention"."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest_mount import LineReader, Mount, cli, wait_until
from pyspark.sql import SparkSession
from test_mount_kafka import free_port

pytest_plugins = ["conftest_mount", "spark_fixtures"]


def xattr(m: Mount, name: str, path: str = "t") -> str:
    return m.out(f"getfattr --only-values -n user.walfs.{name} {path}")


def record(i: int) -> str:
    return f"order {i:06d} {'paid' if i % 3 else 'open'} {'x' * (i % 50)}"


def text(lo: int, hi: int) -> str:
    return "".join(record(i) + "\n" for i in range(lo, hi))


def append(m: Mount, lo: int, hi: int, path: str = "t") -> None:
    with open(m.path / path, "a") as f:
        f.write(text(lo, hi))


def tools_see(m: Mount, lo: int, hi: int, path: str = "t", *, copy: Path) -> None:
    """Every tool reads records lo..hi-1 of `path` (and nothing else) from its start."""
    want = text(lo, hi)
    assert m.out(f"cat {path}") == want
    assert m.out(f"head -n 2 {path}") == text(lo, lo + 2)
    assert m.out(f"head -c 13 {path}") == want[:13]
    assert m.out(f"wc -l < {path}").strip() == str(hi - lo)
    paid = sum(1 for i in range(lo, hi) if i % 3)
    assert m.out(f"grep -c ' paid ' {path}").strip() == str(paid)
    assert m.out(f"sort -r {path} | tail -n 1") == record(lo) + "\n"
    assert m.out(f"tail -n 1 {path}") == record(hi - 1) + "\n"
    m.sh(f"cp {path} {copy}")
    assert copy.read_text() == want
    assert os.stat(m.path / path).st_size == len(want.encode())
    assert int(xattr(m, "low_watermark", path)) == lo  # offsets never change
    assert int(xattr(m, "high_watermark", path)) == hi


def test_every_tool_reads_the_kept_records_after_each_kind_of_trim(
    make_mount, monkeypatch, tmp_path
) -> None:
    # The daemon's retention pass reads its clock from this file (retention.now_ms):
    # "0" keeps every record young until the test moves it.
    clock = tmp_path / "clock"
    clock.write_text("0")
    monkeypatch.setenv("WALFS_TEST_CLOCK_FILE", str(clock))
    copy = tmp_path / "copy"
    port = free_port()
    m: Mount = make_mount()
    m.start("--kafka-listen", f"127.0.0.1:{port}")
    try:
        m.sh("mkdir .consumers/g partition=3")
        append(m, 0, 3000)
        append(m, 0, 100, "partition=3/p")
        assert m.out("cat t") == text(0, 3000)  # its pages are in the kernel's cache now
        with open(m.path / "t", "rb") as before:  # an inode of the first generation
            ino = os.fstat(before.fileno()).st_ino

            m.sh("setfattr -n user.walfs.low_watermark -v 500 t")  # the mount's own face
            tools_see(m, 500, 3000, copy=copy)
            tools_see(m, 500, 3000, "partition=0/t", copy=copy)  # the other name
            assert os.stat(m.path / "t").st_ino == os.stat(m.path / "partition=0/t").st_ino != ino
            # The file opened before keeps its positions; its trimmed range is gone.
            before.seek(len(text(0, 600).encode()))
            assert before.read() == text(600, 3000).encode()
            before.seek(0)
            with pytest.raises(OSError) as e:
                before.read(100)
            assert e.value.errno == errno.ENODATA

        assert cli("trim", str(m.path), "t", "900").returncode == 0  # `walfs trim`
        tools_see(m, 900, 3000, copy=copy)
        m.sh("setfattr -n user.walfs.low_watermark -v 40 partition=3/p")  # partition 3
        tools_see(m, 40, 100, "partition=3/p", copy=copy)
        # The group had read nothing: its consumer file starts at the first kept record.
        assert m.out("cat .consumers/g/t") == text(900, 3000)
        assert m.out("cat .consumers/g/t") == ""

        # Kafka's DeleteRecords through the same daemon.
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        [fut] = admin.delete_records([TopicPartition("t", 0, 1200)]).values()
        assert fut.result(30).low_watermark == 1200
        # The daemon hears of it right after (the engine calls it back): bounded wait.
        wait_until(lambda: m.out("head -n 1 t") == record(1200) + "\n", timeout=30, what="the new start")
        tools_see(m, 1200, 3000, copy=copy)

        # A background retention pass, by age: the records appended before `cut` expire.
        m.sh("setfattr -n user.walfs.retention_ms -v 60000 t")
        time.sleep(0.01)
        cut = int(time.time() * 1000)
        time.sleep(0.01)
        append(m, 3000, 3500)
        assert m.out("cat t") == text(1200, 3500)
        clock.write_text(str(cut + 60_000))
        wait_until(lambda: xattr(m, "low_watermark") == "3000", timeout=60, what="the retention pass")
        wait_until(lambda: m.out("head -n 1 t") == record(3000) + "\n", timeout=30, what="the new start")
        tools_see(m, 3000, 3500, copy=copy)
        append(m, 3500, 3510)  # appends go on
        tools_see(m, 3000, 3510, copy=copy)
    finally:
        m.stop()
    m.start()  # after a restart too: the first inode starts at the low watermark
    try:
        tools_see(m, 3000, 3510, copy=copy)
        tools_see(m, 40, 100, "partition=3/p", copy=copy)
    finally:
        m.stop()


def test_a_trimmed_topic_reads_from_its_first_kept_record(mount: Mount, tmp_path: Path) -> None:
    """The short form (also run on the Kafka cluster engine, tests/test_mount_on_kafka.py):
    a trim, a trim of everything, appends after it."""
    m = mount
    append(m, 0, 300)
    m.sh("setfattr -n user.walfs.low_watermark -v 120 t")
    tools_see(m, 120, 300, copy=tmp_path / "copy")
    m.sh("setfattr -n user.walfs.low_watermark -v 300 t")
    assert m.out("cat t; stat -c %s t") == "0\n"
    append(m, 300, 302)
    tools_see(m, 300, 302, copy=tmp_path / "copy")


def test_a_file_opened_before_a_trim_keeps_its_positions(make_mount) -> None:
    """Its trimmed pages give ENODATA; in the page that holds the first kept record (the
    kernel reads whole pages), the trimmed bytes read as NULs ending in a newline."""
    m: Mount = make_mount()
    m.start()
    try:
        append(m, 0, 1000)
        full = text(0, 1000).encode()
        fd = os.open(m.path / "t", os.O_RDONLY)
        try:
            assert os.pread(fd, len(full), 0) == full  # cached by the kernel now
            m.sh("setfattr -n user.walfs.low_watermark -v 700 t")
            low = len(text(0, 700).encode())
            page = low - low % 4096
            assert page < low - 1  # the trim cuts inside a page
            assert os.pread(fd, 4096, page) == (
                b"\0" * (low - page - 1) + b"\n" + full[low : page + 4096]
            )
            for pos in (0, page - 4096, page - 1):
                with pytest.raises(OSError) as e:
                    os.pread(fd, 10, pos)
                assert e.value.errno == errno.ENODATA
            assert os.pread(fd, len(full), low) == full[low:]
            append(m, 1000, 1010)  # grows at its end, at its positions
            wait_until(lambda: os.fstat(fd).st_size == len(text(0, 1010).encode()), what="the new size")
            assert os.pread(fd, 10_000, len(full)) == text(1000, 1010).encode()
            assert m.out("cat t") == text(700, 1010)  # a new open: the new file
        finally:
            os.close(fd)
    finally:
        m.stop()


class Appender(threading.Thread):
    """Appends record(i) for i = written, written + 1, ... in batches of ten short writes
    (a new open each batch) until stopped; holding `lock` pauses it between batches."""

    def __init__(self, m: Mount, written: int) -> None:
        super().__init__(daemon=True)
        self.m = m
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.written = written
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                with self.lock, open(self.m.path / "t", "a") as f:
                    for _ in range(10):
                        f.write(record(self.written) + "\n")
                        f.flush()
                        self.written += 1
                time.sleep(0.002)
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_tail_f_follows_across_trims_and_prints_every_line_once(make_mount, monkeypatch, tmp_path) -> None:
    """GNU tail follows the descriptor it opened (and polls fstat): across trims by setfattr
    while appends go on, and by retention passes, it prints every line once, in order. The
    trims go up to the last line tail printed, so that they cut inside the page tail
    reads (the kernel reads whole pages)."""
    clock = tmp_path / "clock"  # the retention pass's clock (retention.now_ms)
    clock.write_text("0")
    monkeypatch.setenv("WALFS_TEST_CLOCK_FILE", str(clock))
    m: Mount = make_mount()
    m.start()
    append(m, 0, 1)
    m.sh("setfattr -n user.walfs.retention_ms -v 60000 t")
    tail = subprocess.Popen(
        ["tail", "-n", "+1", "-s", "0.1", "-f", "t"],
        cwd=m.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # an error ("file truncated", ENODATA) is a wrong line
    )
    writer = Appender(m, written=1)
    printed = 0
    reader = LineReader(tail, timeout=60)

    def read_to(n: int) -> None:
        nonlocal printed
        while printed < n:
            line = reader.readline().decode()
            assert line == record(printed) + "\n", (printed, line)
            printed += 1

    try:
        writer.start()
        for round_ in range(12):
            wait_until(lambda: writer.written > printed + 300, timeout=60, what="appends")
            read_to(writer.written - 5)
            if round_ % 3 == 2:
                # A background retention pass (by age) while tail is at the end: it trims
                # everything appended so far, up to where tail is.
                with writer.lock:
                    read_to(writer.written)
                    time.sleep(0.01)
                    clock.write_text(str(int(time.time() * 1000) + 60_000))
                    wait_until(
                        lambda: xattr(m, "low_watermark") == str(writer.written), timeout=60, what="retention"
                    )
            else:
                m.sh(f"setfattr -n user.walfs.low_watermark -v {printed} t")  # appends go on
            low = int(xattr(m, "low_watermark"))
            assert m.out("head -n 1 t") in (record(low) + "\n", "")
        writer.stop.set()
        writer.join(timeout=60)
        assert writer.error is None, writer.error
        read_to(writer.written)  # every line, once, in order, up to the last one appended
        assert m.out("tail -n 1 t") == record(writer.written - 1) + "\n"
    finally:
        writer.stop.set()
        tail.kill()
        tail.wait()
        m.stop()
    assert reader.buf == b""  # nothing after the last line


def test_tail_F_sees_a_new_file_after_a_trim_and_prints_it_from_its_start(make_mount) -> None:
    """`tail -F` follows the name: after a trim the name is a new inode, and GNU tail says
    the file was replaced and prints the new file from its start (the kept records again),
    then follows it."""
    m: Mount = make_mount()
    m.start()
    append(m, 0, 100)
    tail = subprocess.Popen(
        ["tail", "-n", "+1", "-s", "0.1", "-F", "t"],
        cwd=m.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        reader = LineReader(tail, timeout=60)
        for i in range(100):
            assert reader.readline().decode() == record(i) + "\n"
        m.sh("setfattr -n user.walfs.low_watermark -v 50 t")
        assert reader.readline() == b"tail: 't' has been replaced;  following new file\n"
        for i in range(50, 100):  # the new file from its start
            assert reader.readline().decode() == record(i) + "\n"
        append(m, 100, 110)
        for i in range(100, 110):
            assert reader.readline().decode() == record(i) + "\n"
    finally:
        tail.kill()
        tail.wait()
        m.stop()
    assert reader.buf == b""


def test_spark_reads_the_kept_records_of_a_trimmed_topic_in_several_splits(
    spark: SparkSession, make_mount
) -> None:
    m: Mount = make_mount()
    m.start()
    try:
        append(m, 0, 20_000)  # ~0.9 MB
        m.sh("setfattr -n user.walfs.low_watermark -v 7001 t")
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(128 << 10))
        try:
            df = spark.read.text(str(m.path / "t"))
            assert df.rdd.getNumPartitions() > 4  # the file is read in several splits
            got = [r["value"] for r in df.collect()]
        finally:
            spark.conf.unset("spark.sql.files.maxPartitionBytes")
        assert got == [record(i) for i in range(7001, 20_000)]
    finally:
        m.stop()
