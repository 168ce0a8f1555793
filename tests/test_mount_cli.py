"""`walfs mount` / `walfs umount` edge cases: failures are clean, permissions hold."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_mount import Mount, cli, daemon_alive, is_mounted, wait_until

pytest_plugins = ["conftest_mount"]

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_second_mount_of_a_locked_data_dir_fails_cleanly(mount: Mount, tmp_path: Path) -> None:
    other = tmp_path / "other-mnt"
    other.mkdir()
    res = cli("mount", str(mount.data), str(other), check=False)
    assert res.returncode == 1
    assert "walfs mount:" in res.stderr
    assert not is_mounted(other)
    mount.sh("echo still >> t")  # the first mount is unharmed
    assert mount.out("cat t") == "still\n"


def test_mount_on_missing_directory_fails(tmp_path: Path) -> None:
    res = cli("mount", str(tmp_path / "d"), str(tmp_path / "missing"), check=False)
    assert res.returncode == 1 and "not a directory" in res.stderr


def test_umount_of_something_else_fails(tmp_path: Path) -> None:
    res = cli("umount", str(tmp_path), check=False)
    assert res.returncode == 1 and "not a walfs mount" in res.stderr


def test_umount_clears_a_dead_mount(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    m.sh("echo x >> t")
    m.kill()
    res = cli("umount", str(m.path), check=False)
    assert res.returncode == 0, res.stderr
    assert not is_mounted(m.path)


def test_a_native_crash_leaves_every_threads_stack_in_the_log(make_mount) -> None:
    # A segfault in a C extension kills the daemon with no log record; its Python stacks
    # (faulthandler, on stderr) are the only clue, so a daemon in the background keeps its
    # stderr on the log file.
    m: Mount = make_mount()
    m.start()
    m.sh("echo x >> t")
    assert m.pid is not None
    os.kill(m.pid, signal.SIGSEGV)
    wait_until(lambda: not daemon_alive(m.pid or 0), what="daemon death")
    m.pid = None
    log = m.log.read_text()
    assert "Fatal Python error: Segmentation fault" in log, log[-2000:]
    assert "Current thread" in log and 'File "' in log and "trio" in log, log[-2000:]
    res = cli("umount", str(m.path), check=False)
    assert res.returncode == 0, res.stderr


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory every user may traverse (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="walfs-perm-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("allow_other", [False, True])
def test_permissions_for_other_users(open_base: Path, allow_other: bool) -> None:
    m = Mount(open_base)
    try:
        m.start(*(["--allow-other"] if allow_other else []))
        m.sh("echo shared >> t")
        assert subprocess.run([*NOBODY, "ls", str(open_base)], capture_output=True).returncode == 0
        read = subprocess.run([*NOBODY, "cat", str(m.path / "t")], capture_output=True)
        write = subprocess.run([*NOBODY, "bash", "-c", f"echo nope >> {m.path / 't'}"], capture_output=True)
        if allow_other:
            assert read.returncode == 0 and read.stdout == b"shared\n", read.stderr
        else:
            assert read.returncode != 0 and b"Permission denied" in read.stderr
        assert write.returncode != 0 and b"Permission denied" in write.stderr
        assert m.out("cat t") == "shared\n"
    finally:
        m.cleanup()


def test_mount_on_a_live_mount_is_refused(mount: Mount) -> None:
    res = cli("mount", str(mount.data) + "-2", str(mount.path), check=False)
    assert res.returncode == 1 and "already a mount point" in res.stderr
    mount.sh("echo ok >> t")
    assert mount.out("cat t") == "ok\n"


def _read_ahead_kb(path: Path) -> int:
    dev = path.stat().st_dev
    return int(Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb").read_text())


def test_read_ahead_default_and_option(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    assert _read_ahead_kb(m.path) == 1024
    m.stop()
    m.start("-o", "read_ahead_kb=256")
    assert _read_ahead_kb(m.path) == 256
    m.sh("seq 1 100000 >> t")
    assert m.out("cat t | wc -l").strip() == "100000"
    m.stop()
