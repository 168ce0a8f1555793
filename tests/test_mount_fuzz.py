"""The mount fuzzer (issue 11): random sequences of system calls (tests/mount_fuzz_ops.py)
on a real mount, as uid 65534 (setpriv) and as root, while another writer appends records.
The daemon never dies, every refused call changes nothing (topics, groups, watermarks,
retention, committed offsets), the other user changes nothing at all, and every record
appended meanwhile is there afterwards.

WALFS_FUZZ_OPS (default 300 per run) and WALFS_FUZZ_SEED (default: a new one, printed)
scale and replay it; `make fuzz-mount` runs a long one."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest_mount import Mount, daemon_alive

pytest_plugins = ["conftest_mount"]

WORKER = Path(__file__).with_name("mount_fuzz_ops.py")
# The worker runs on the system's python3 (standard library only): the venv's interpreter
# may sit under a directory uid 65534 cannot enter.
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
OPS = int(os.environ.get("WALFS_FUZZ_OPS", "300"))
EXCLUDED = "bg"  # the background writer's topic


@pytest.fixture
def shared_base() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="walfs-fuzz-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_worker(m: Mount, seed: int, ops: int, as_nobody: bool) -> dict[str, Any]:
    # uid 65534 may change nothing at all: the state before and after its run must be equal
    # (which covers each refused call); root's refused calls are checked one by one.
    each = [] if as_nobody else ["--each"]
    cmd = [
        *(NOBODY if as_nobody else []),
        PYTHON,
        str(WORKER),
        str(m.path),
        str(seed),
        str(ops),
        EXCLUDED,
        *each,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + ops, cwd="/", check=False)
    assert r.returncode == 0, f"worker failed: {r.stderr[-3000:]}\n{m.read_log()}"
    report: dict[str, Any] = json.loads(r.stdout.splitlines()[-1])
    return report


class Appender(threading.Thread):
    """Appends numbered records to the excluded topic through the mount until stopped."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                while not self.stop.is_set():
                    os.write(fd, b"bg-%d\n" % self.written)
                    self.written += 1
                    self.stop.wait(0.005)
            finally:
                os.close(fd)
        except BaseException as e:  # reported by the test
            self.error = e


def _refused(report: dict[str, Any]) -> int:
    return sum(n for counts in report["outcomes"].values() for k, n in counts.items() if k != "ok")


def _ok(report: dict[str, Any]) -> int:
    return sum(counts.get("ok", 0) for counts in report["outcomes"].values())


def test_random_syscalls_as_another_user_and_as_root(shared_base: Path) -> None:
    seed = int(os.environ.get("WALFS_FUZZ_SEED", random.randrange(1 << 30)))
    print(f"WALFS_FUZZ_SEED={seed}")
    m = Mount(shared_base)
    m.start("--allow-other", "--max-line-bytes", "1M")
    try:
        m.sh(
            "printf 'a1\\na2\\na3\\n' >> a; printf 'b1\\n' >> b; mkdir .consumers/g; mkdir partition=1;"
            "echo p1 >> partition=1/a; head -c 3 .consumers/g/a > /dev/null; cat .consumers/g/b > /dev/null"
        )
        pid = m.pid
        assert pid is not None
        bg = Appender(m.path / EXCLUDED)
        bg.start()
        try:
            start = run_worker(m, seed, 0, as_nobody=True)["state"]
            assert start["a"]["high_watermark"] == "3" and start[".consumers"] == ["g"]
            assert start[".consumers/g/b"]["committed_offset"] == "1"

            # Another user: nothing it does changes anything.
            other = run_worker(m, seed, OPS, as_nobody=True)
            assert other["violations"] == [], json.dumps(other["violations"], indent=1)[:5000]
            assert other["state"] == start
            assert _refused(other) > 0 and _ok(other) > 0, other["outcomes"]

            # Root: may change state, but never through a call that was refused.
            own = run_worker(m, seed + 1, OPS, as_nobody=False)
            assert own["violations"] == [], json.dumps(own["violations"], indent=1)[:5000]
            assert _refused(own) > 0 and _ok(own) > 0, own["outcomes"]

            # The other user again, on whatever root made.
            before = run_worker(m, seed + 2, 0, as_nobody=True)["state"]
            again = run_worker(m, seed + 2, OPS // 2, as_nobody=True)
            assert again["violations"] == [] and again["state"] == before
        finally:
            bg.stop.set()
            bg.join(timeout=60)
        assert bg.error is None, bg.error
        assert daemon_alive(pid) and m.pid == pid

        # Every record the background writer appended is there, in order (the fuzzer's
        # own writes to the same topic may sit between them).
        lines = m.sh(f"cat {EXCLUDED}").stdout.split(b"\n")
        expected = iter(b"bg-%d" % i for i in range(bg.written))
        want = next(expected, None)
        for line in lines:
            if line == want:
                want = next(expected, None)
        assert want is None, f"record {want!r} of {bg.written} missing"
        assert bg.written > 0
        print(json.dumps({"other": other["outcomes"], "root": own["outcomes"]}, sort_keys=True))
        # No handler failed with an unexpected exception (the daemon logs those).
        log = m.log.read_text()
        assert "Traceback" not in log, log[max(log.find("Traceback") - 500, 0) :][:6000]
        # And the mount still serves.
        # (A topic of its own: the fuzzer may have trimmed `a`.)
        m.sh("echo after >> fuzz-end-check")
        assert m.out("tail -n 1 fuzz-end-check") == "after\n"
    finally:
        m.stop()
