"""Remounts, crashes of the daemon, fsync, and a full disk."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from conftest_mount import Mount, is_mounted

pytest_plugins = ["conftest_mount"]


def test_remount_keeps_everything(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    m.sh("seq 1 500 >> nums; mkdir partition=2; echo two >> partition=2/t; printf half >> h")
    m.stop()
    assert not any(m.path.iterdir())  # the bare mount point again
    m.start()
    assert m.out("wc -l < nums").strip() == "500"
    assert m.out("cat partition=2/t h") == "two\nhalf\n"
    assert m.out("ls").split() == ["h", "nums", "partition=0", "partition=2"]
    m.stop()


@pytest.mark.parametrize("fsync", ["interval", "never", "always"])
def test_sigkill_keeps_returned_writes(make_mount, fsync: str) -> None:
    m: Mount = make_mount()
    m.start("--fsync", fsync)
    # Each line's write() has returned when the shell moves on.
    m.sh('for i in $(seq 1 300); do echo "rec $i" >> t; done')
    m.kill()
    with pytest.raises(OSError) as info:
        os.stat(m.path / "t")
    assert info.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    m.start()  # clears the dead mount by itself
    assert m.out("tail -1 t") == "rec 300\n"
    assert m.out("wc -l < t").strip() == "300"
    m.sh("echo after >> t")
    assert m.out("tail -1 t") == "after\n"
    m.stop()


def test_fsync_returns_when_durable(make_mount) -> None:
    m: Mount = make_mount()
    m.start("--fsync", "never")
    fd = os.open(m.path / "t", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, b"synced\nand a partial")
    os.fsync(fd)
    os.close(fd)
    m.sh("python3 -c 'import os; fd = os.open(\"t\", os.O_RDONLY); os.fsync(fd)'")
    m.kill()
    m.start()
    assert m.out("cat t") == "synced\nand a partial\n"
    m.stop()


def test_umount_while_reader_holds_a_file(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    m.sh("echo x >> t")
    holder = subprocess.Popen(["tail", "-f", "t"], cwd=m.path, stdout=subprocess.DEVNULL)
    try:
        m.stop()  # lazy: a held file does not keep the mount or the daemon alive
    finally:
        holder.kill()
        holder.wait()
    assert not is_mounted(m.path)


def test_enospc_then_recovers(make_mount, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small)], check=True)
    m: Mount = make_mount("full")
    try:
        filler = small / "filler"
        filler.write_bytes(b"\0" * (6 << 20))  # room to give back later
        m.data = small / "data"
        m.start("--segment-size", "2M", "--block-size", "256K")
        chunk = b"y" * 1023 + b"\n"
        with pytest.raises(OSError) as info:
            with open(m.path / "t", "ab", buffering=0) as f:
                for _ in range(100_000):
                    f.write(chunk * 64)
        assert info.value.errno == errno.ENOSPC
        size = os.stat(m.path / "t").st_size
        assert size > 0 and size % 1024 == 0  # whole records only
        assert os.statvfs(m.path).f_blocks == os.statvfs(small).f_blocks
        assert os.statvfs(m.path).f_bavail == os.statvfs(small).f_bavail
        # Space comes back: the same mount appends again.
        filler.unlink()
        m.sh("echo more >> t")
        assert m.out("tail -1 t") == "more\n"
        assert os.stat(m.path / "t").st_size == size + 5
        m.stop()
        m.start("--segment-size", "2M", "--block-size", "256K")
        assert os.stat(m.path / "t").st_size == size + 5
        m.stop()
    finally:
        m.cleanup()
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_daemon_exits_non_zero_after_an_fsync_failure(tmp_path: Path) -> None:
    """A failed fsync fails the WAL; the daemon unmounts and exits with status 75 so that
    systemd's Restart=on-failure reopens it, instead of answering EIO forever."""
    import sys
    import time

    from conftest_mount import wait_until

    data, mnt = tmp_path / "data", tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, WALFS_TEST_FAULT=f"sync:{errno.EIO}:3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "walfs.cli.mount", str(data), str(mnt), "-f", "--fsync", "always"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: is_mounted(mnt), timeout=30, what="mount")
        refused = None
        for i in range(20):
            try:
                with open(mnt / "t", "ab") as f:
                    f.write(b"line %d\n" % i)
            except OSError as e:
                refused = e.errno
                break
        assert refused == errno.EIO
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.returncode == 75, proc.stderr.read().decode() if proc.stderr else ""
        assert not is_mounted(mnt)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=False, capture_output=True)
    # Reopened (what the service restart does), the WAL holds the lines that were durable.
    import walfs

    with walfs.Wal(data, read_only=True) as w:
        assert all(v.startswith(b"line ") for v in w.read("t", 0))
