"""What reading a consumer file commits (docs/mount.md "Consumer files"), shown with the
plain tools, and the documented at-least-once loop (peek, process, commit) under random
SIGKILLs of its reader, its processor and the loop itself."""

from __future__ import annotations

import errno
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest_mount import REPO, LineReader, Mount, wait_until

pytest_plugins = ["conftest_mount"]


def cursor(m: Mount, group: str = "g", topic: str = "t") -> int:
    return int(os.getxattr(m.path / ".consumers" / group / topic, "user.walfs.committed_offset"))


def test_reading_is_consuming_with_plain_tools(mount: Mount) -> None:
    """Every close commits what was read, also a killed reader's; tools read ahead of
    what they print."""
    m = mount
    m.sh("seq 1 5 >> t; mkdir .consumers/g .consumers/h .consumers/k")
    # head -n 1 prints one line but read (and so consumed) all five records.
    assert m.out("head -n 1 .consumers/g/t") == "1\n"
    assert cursor(m, "g") == 5
    assert m.out("cat .consumers/g/t") == ""
    # cat | head -n 1: cat read everything before head exited.
    assert m.out("cat .consumers/h/t | head -n 1") == "1\n"
    assert cursor(m, "h") == 5
    # The peek view shows the same records and commits nothing.
    assert m.out("head -n 1 .consumers/k/.peek/t") == "1\n"
    assert m.out("cat .consumers/k/.peek/t") == "1\n2\n3\n4\n5\n"
    assert cursor(m, "k") == 0
    assert "user.walfs.cursor" not in m.out("getfattr -d .consumers/k/t")  # never committed

    # A tail -f killed by SIGKILL or SIGTERM: the kernel closes its file, which commits
    # everything tail read (here: all it printed).
    m.sh("seq 6 8 >> t")
    for sig, group in ((signal.SIGKILL, "k"), (signal.SIGTERM, "h")):
        argv = ["tail", "-n", "+1", "-s", "0.1", "-f", f".consumers/{group}/t"]
        tail = subprocess.Popen(argv, cwd=m.path, stdout=subprocess.PIPE)
        try:
            lines = LineReader(tail)
            first = 1 if group == "k" else 6
            for n in range(first, 9):
                assert lines.readline() == f"{n}\n".encode()
        finally:
            tail.send_signal(sig)
            tail.wait()
        wait_until(lambda g=group: cursor(m, g) == 8, what=f"the killed tail's commit ({sig.name})")
    # A killed downstream process: `cat F | slow` where slow is killed after one line;
    # cat had read everything, so everything is consumed, processed or not.
    m.sh("seq 9 12 >> t")
    pipe = subprocess.Popen(
        ["bash", "-c", "cat .consumers/k/t | (read -r l; echo $l; sleep 30)"],
        cwd=m.path,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert LineReader(pipe).readline() == b"9\n"
    finally:
        for pid in _session(pipe.pid):  # the processor, and cat if it still runs
            os.kill(pid, signal.SIGKILL)
        pipe.wait()
    wait_until(lambda: cursor(m, "k") == 12, what="cat's commit")
    # Only whole records, contiguous from the start, count.
    m.sh("printf 'one\\ntwo\\n' >> t")
    with open(m.path / ".consumers/k/t", "rb", buffering=0) as f:
        assert f.read(6) == b"one\ntw"
    assert cursor(m, "k") == 13
    assert m.out("cat .consumers/k/t") == "two\n"


def test_explicit_commit_reset_and_delete(mount: Mount) -> None:
    m = mount
    m.sh("seq 0 9 >> t; mkdir .consumers/g")
    f = m.path / ".consumers/g/t"
    peek = m.path / ".consumers/g/.peek/t"
    assert m.out("ls -a .consumers/g").split() == [".peek", "partition=0", "t"]
    assert m.out("ls .consumers/g/.peek").split() == ["partition=0", "t"]
    os.setxattr(peek, "user.walfs.committed_offset", b"4")  # on the peek file or the file
    assert m.out("cat .consumers/g/.peek/t").split() == [str(i) for i in range(4, 10)]
    assert os.getxattr(f, "user.walfs.cursor") == b"4"
    os.setxattr(f, "user.walfs.committed_offset", b"4")  # the same again: a no-op
    for bad in (b"3", b"11", b"-1", b"x", b""):  # backwards, past the end, not a number
        try:
            os.setxattr(f, "user.walfs.committed_offset", bad)
        except OSError as e:
            assert e.errno == errno.EINVAL, bad
        else:
            raise AssertionError(f"commit {bad!r} accepted")
    assert cursor(m) == 4
    assert "below the committed offset 4" in m.read_log()
    # A reset moves back; it is refused while the group's consumer file is open here.
    with open(f, "rb") as reader:
        try:
            os.setxattr(f, "user.walfs.reset_offset", b"1")
        except OSError as e:
            assert e.errno == errno.EBUSY
        else:
            raise AssertionError("reset accepted while a reader is open")
        del reader
    os.setxattr(f, "user.walfs.reset_offset", b"1")
    assert cursor(m) == 1
    with open(peek, "rb"):  # a peek reader does not block a reset
        os.setxattr(f, "user.walfs.reset_offset", b"2")
    assert m.out("cat .consumers/g/t").split() == [str(i) for i in range(2, 10)]
    # The offset for a time: 0 for the epoch, the high watermark for the future.
    assert m.out("getfattr --only-values -n user.walfs.offset_for_timestamp.0 t") == "0"
    future = str((int(time.time()) + 3600) * 1000)
    assert m.out(f"getfattr --only-values -n user.walfs.offset_for_timestamp.{future} t") == "10"
    # rmdir deletes the group (EBUSY while a committing reader is open).
    with open(f, "rb"):
        r = m.sh("rmdir .consumers/g", check=False)
        assert r.returncode != 0 and b"busy" in r.stderr
    m.sh("rmdir .consumers/g")
    assert m.out("ls .consumers") == ""
    assert m.sh("cat .consumers/g/t", check=False).returncode != 0
    m.sh("mkdir .consumers/g")
    assert m.out("cat .consumers/g/t").split() == [str(i) for i in range(10)]
    r = m.sh("rmdir .consumers/g/.peek", check=False)
    assert r.returncode != 0 and b"not permitted" in r.stderr


def documented_loop() -> str:
    """The at-least-once loop exactly as docs/mount.md gives it."""
    doc = (REPO / "docs/mount.md").read_text()
    section = doc[doc.index("### At least once") :]
    found = re.search(r"```sh\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


PROCESSOR = """#!/bin/bash
# The test's ./process: appends each record it processed to `processed`, slowly enough
# that kills land in the middle of a batch.
while IFS= read -r line; do
  printf '%s\\n' "$line" >> processed
  sleep 0.002
done
"""


def _member(pid: int, sid: int) -> str | None:
    """The command name of a live process of session `sid`, else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if int(fields[3]) != sid or fields[0] in ("Z", "X"):
        return None
    return stat[stat.index("(") + 1 : stat.rindex(")")]


def _session(sid: int) -> dict[int, str]:
    """pid -> command name of the processes in a session (the loop and its children)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            comm = _member(int(entry), sid)
            if comm is not None:
                out[int(entry)] = comm
    return out


def _catch(sid: int, comm: str, timeout: float) -> int | None:
    """A process named `comm` of the session, caught as soon as it runs: a short-lived one
    (head reads a batch in a few ms) is looked for among the next pids to be handed out,
    which a scan of all of /proc is too slow for."""
    deadline = time.monotonic() + timeout
    procs = _session(sid)
    found = [p for p, c in procs.items() if c == comm]
    if found:
        return found[0]
    base = max(procs, default=sid)
    while time.monotonic() < deadline:
        for pid in range(base + 1, base + 64):
            name = _member(pid, sid)
            if name == comm:
                return pid
            if name is not None:
                base = max(base, pid - 1)
    return None


def test_at_least_once_loop_under_random_kills(mount: Mount, tmp_path: Path) -> None:
    """The documented loop, restarted after each SIGKILL of head (the reader), ./process
    (the processor) or the loop: after every kill the committed offset is never past
    what was processed, and in the end every record was processed at least once."""
    m = mount
    n_records = 1500
    m.sh(f"seq 0 {n_records - 1} >> orders; mkdir .consumers/billing")
    group = m.path / ".consumers/billing"
    work = tmp_path / "work"
    work.mkdir()
    script = documented_loop().replace("/mnt/wal/.consumers/billing", str(group))
    assert script.count(str(group)) == 1
    (work / "loop.sh").write_text(script)
    (work / "process").write_text(PROCESSOR)
    (work / "process").chmod(0o755)
    processed_file = work / "processed"
    rng = random.Random(int(os.environ.get("WALFS_KILL_SEED", "0")) or None)

    def committed() -> int:
        return int(os.getxattr(group / "orders", "user.walfs.committed_offset"))

    def check() -> int:
        # The committed offset first: what was processed only grows after it.
        c = committed()
        done = processed_file.read_text().split() if processed_file.exists() else []
        missing = set(range(c)) - {int(x) for x in done}
        assert not missing, f"committed {c} but never processed {sorted(missing)[:10]}"
        return c

    kills = {"head": 0, "process": 0, "bash": 0}
    loop: subprocess.Popen[bytes] | None = None
    deadline = time.monotonic() + 240  # bounds a hang only
    total = n_records
    try:
        while check() < total or sum(kills.values()) < 30:
            assert time.monotonic() < deadline, f"stuck at {committed()} of {total} after {kills}"
            if loop is None or loop.poll() is not None:
                loop = subprocess.Popen(["bash", str(work / "loop.sh")], cwd=work, start_new_session=True)
            if sum(kills.values()) >= 30:
                time.sleep(0.05)  # enough kills: let it finish
                continue
            if committed() > total - 300:
                # A fast machine: keep work in front of the loop until the kills are done
                # (the kills, not the clock, decide when the test has seen enough).
                m.sh(f"seq {total} {total + 499} >> orders")
                total += 500
            want = rng.choice(["head", "process", "process", "bash"])
            # A random point: a random time; the short-lived reader as soon as it runs
            # (after a random number of its batches).
            time.sleep(rng.uniform(0.0, 0.4))
            if want == "bash":
                victim: int | None = loop.pid
            else:
                victim = _catch(loop.pid, want, timeout=2.0)
                if victim is None:
                    continue
                time.sleep(rng.uniform(0.0, 0.001))
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                continue
            kills[want] += 1
            if victim == loop.pid:
                loop.wait()
            check()
    finally:
        if loop is not None:
            for pid in _session(loop.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            loop.wait()
    final = check()
    assert final == total
    done = [int(x) for x in processed_file.read_text().split()]
    assert set(done) == set(range(total))
    assert sum(kills.values()) >= 20 and kills["process"] >= 5, kills
    assert kills["head"] >= 1 and kills["bash"] >= 1, kills
    print(f"kills {kills}; {len(done) - total} records processed twice")
