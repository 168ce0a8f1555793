"""Fixtures for the mount tests: real FUSE mounts in temporary directories.

Test modules import what they use from here (`from conftest_mount import mount, Mount`).
Every mount is unmounted when its test ends, also when the test failed or killed the
daemon: umount, then fusermount3 -uz, then SIGKILL of a daemon still running.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# Small segments and blocks: tests stay light on disk; ENOSPC tests need them small.
DEFAULT_OPTIONS = ("--segment-size", "16M", "--block-size", "1M")


def cli(
    verb: str,
    *args: str,
    check: bool = True,
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs `walfs <verb> ...` as a separate process (module form: no install needed)."""
    return subprocess.run(
        [PYTHON, "-m", f"walfs.cli.{verb}", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env=env,
        cwd=str(REPO),
    )


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def daemon_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def rss_kib(pid: int) -> int:
    """A process's resident memory (KiB), for tests that bound a daemon's memory."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def wait_until(predicate: object, timeout: float = 10.0, what: str = "condition") -> None:
    """Polls a predicate (no timing assertion: the timeout only bounds a hang)."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Mount:
    """One walfs mount of `data` on `path`, driven through the CLI like a user would."""

    def __init__(self, base: Path, name: str = "m", target: str | None = None) -> None:
        # A data directory, or an engine URL (kafka://...) for the mount on a cluster.
        self.data: Path | str = target if target is not None else base / f"{name}-data"
        self.path = base / f"{name}-mnt"
        self.log = base / f"{name}.log"
        self.path.mkdir(parents=True, exist_ok=True)
        self.options: tuple[str, ...] = DEFAULT_OPTIONS
        self.pid: int | None = None

    def start(self, *options: str) -> None:
        if options:
            self.options = DEFAULT_OPTIONS + options
        res = cli(
            "mount",
            str(self.data),
            str(self.path),
            "--log-file",
            str(self.log),
            "--log-level",
            "info",
            *self.options,
            check=False,
        )
        assert res.returncode == 0, f"mount failed: {res.stderr}\n{self.read_log()}"
        assert is_mounted(self.path)
        self.pid = int(os.getxattr(self.path, "user.walfs.pid"))

    def stop(self) -> None:
        res = cli("umount", str(self.path), check=False)
        assert res.returncode == 0, f"umount failed: {res.stderr}\n{self.read_log()}"
        assert not is_mounted(self.path)
        if self.pid is not None:
            assert not daemon_alive(self.pid)
        self.pid = None

    def kill(self) -> None:
        """SIGKILL, like a crash: leaves a dead mount behind."""
        assert self.pid is not None
        os.kill(self.pid, signal.SIGKILL)
        wait_until(lambda: not daemon_alive(self.pid or 0), what="daemon death")
        self.pid = None

    def cleanup(self) -> None:
        if is_mounted(self.path) and self.pid is not None and daemon_alive(self.pid):
            cli("umount", str(self.path), "--timeout", "20", check=False)
        if is_mounted(self.path):
            subprocess.run(["fusermount3", "-uz", str(self.path)], check=False, capture_output=True)
        if self.pid is not None and daemon_alive(self.pid):
            os.kill(self.pid, signal.SIGKILL)
        self.pid = None

    def read_log(self) -> str:
        try:
            return self.log.read_text()[-4000:]
        except FileNotFoundError:
            return ""

    def sh(
        self, script: str, check: bool = True, timeout: float = 120, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Runs a bash script with the mount as working directory."""
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.path,
            capture_output=True,
            timeout=timeout,
            input=input,
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"script failed ({res.returncode}): {script}\nstdout: {res.stdout[-2000:]!r}\n"
                f"stderr: {res.stderr[-2000:]!r}\nlog:\n{self.read_log()}"
            )
        return res

    def out(self, script: str) -> str:
        return self.sh(script).stdout.decode()


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    m = Mount(tmp_path)
    try:
        m.start()
        yield m
    finally:
        m.cleanup()


@pytest.fixture
def make_mount(tmp_path: Path) -> Iterator[object]:
    """A factory for tests that start mounts themselves (options, remounts)."""
    made: list[Mount] = []

    def factory(name: str = "m") -> Mount:
        m = Mount(tmp_path, name)
        made.append(m)
        return m

    try:
        yield factory
    finally:
        for m in made:
            m.cleanup()


class LineReader:
    """Reads lines from a child's stdout with a deadline, so a missing line fails the test
    instead of hanging the suite (the timeout bounds a hang; it is not a timing check)."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.timeout = timeout
        self.buf = b""

    def readline(self) -> bytes:
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise AssertionError(f"no line within {self.timeout}s (have {self.buf!r})")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise AssertionError(f"output ended (have {self.buf!r})")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"
