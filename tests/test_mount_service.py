"""systemd and mount(8): the unit verifies, the notify protocol, the mount helper, fstab."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from conftest_mount import PYTHON, REPO, daemon_alive, is_mounted, wait_until


def test_unit_verifies() -> None:
    res = subprocess.run(
        ["systemd-analyze", "verify", str(REPO / "systemd/walfs@.service")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    text = (REPO / "systemd/walfs@.service").read_text()
    for line in (
        "Type=notify",
        "NotifyAccess=main",
        "Restart=on-failure",
        "--foreground",
        "fusermount3 -u -z",
    ):
        assert line in text
    for sandbox in ("PrivateTmp", "ProtectSystem", "ProtectHome", "PrivateMounts"):
        assert f"\n{sandbox}=" not in text


def test_plays_systemd_notify(tmp_path: Path) -> None:
    data, mnt = tmp_path / "data", tmp_path / "mnt"
    mnt.mkdir()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock_path = str(tmp_path / "notify.sock")
    sock.bind(sock_path)
    sock.settimeout(30)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path)
    daemon = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "walfs.cli.mount",
            "--foreground",
            str(data),
            str(mnt),
            "--segment-size",
            "16M",
            "--block-size",
            "1M",
        ],
        env=env,
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    try:
        messages = sock.recv(4096).decode().split("\n")
        assert "READY=1" in messages
        assert is_mounted(mnt)
        subprocess.run(["bash", "-c", "seq 1 100 >> t; printf tail >> t"], cwd=mnt, check=True)
        holder = open(mnt / "t", "ab", buffering=0)  # still open at SIGTERM
        holder.write(b"held partial")
        daemon.send_signal(signal.SIGTERM)
        assert "STOPPING=1" in sock.recv(4096).decode().split("\n")
        assert daemon.wait(timeout=60) == 0, daemon.stderr.read() if daemon.stderr else ""
        assert not is_mounted(mnt)
        try:
            holder.close()
        except OSError:
            pass  # the mount is gone under it
    finally:
        if daemon.poll() is None:
            daemon.kill()
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        sock.close()
    # The partial line held by the open file was committed on the way down.
    res = subprocess.run(
        [
            PYTHON,
            "-c",
            (
                "import walfs, sys\n"
                f"with walfs.Wal({str(data)!r}, read_only=True) as w:\n"
                "    sys.stdout.buffer.write(w.read_bytes('t', 0, 1 << 20))\n"
            ),
        ],
        capture_output=True,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.endswith(b"100\ntail\nheld partial\n")


def test_abstract_notify_socket(tmp_path: Path) -> None:
    from walfs.service.daemon import sd_notify

    name = f"walfs-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    old = os.environ.get("NOTIFY_SOCKET")
    os.environ["NOTIFY_SOCKET"] = "@" + name
    try:
        assert sd_notify("READY=1")
        assert sock.recv(100) == b"READY=1"
    finally:
        sock.close()
        if old is None:
            del os.environ["NOTIFY_SOCKET"]
        else:
            os.environ["NOTIFY_SOCKET"] = old


def test_mount_helper_and_fstab(tmp_path: Path) -> None:
    """mount -t fuse.walfs and an fstab line, in a private mount namespace whose /sbin
    holds our helper (so the host's /sbin stays untouched)."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    helper = sbin / "mount.fuse.walfs"
    helper.write_bytes((REPO / "mount/mount.fuse.walfs").read_bytes())
    helper.chmod(0o755)
    shim = tmp_path / "walfs"  # `walfs VERB ...` without an installed entry point
    shim.write_text(f'#!/bin/sh\nverb=$1; shift\nexec {PYTHON} -m walfs.cli.$verb "$@"\n')
    shim.chmod(0o755)
    data, mnt = tmp_path / "data", tmp_path / "mnt"
    mnt.mkdir()
    fstab = tmp_path / "fstab"
    fstab.write_text(
        f"{data} {mnt} fuse.walfs fsync=always,org_id=7,noatime,nofail,segment_size=16M,block_size=1M 0 0\n"
    )
    script = f"""
set -eu
trap 'fusermount3 -uz {mnt} 2>/dev/null || true' EXIT
mount --bind {sbin} /usr/sbin
export WALFS_BIN={shim} PYTHONPATH={os.environ.get("PYTHONPATH", "")}
mount -t fuse.walfs {data} {mnt} -o fsync=never,segment_size=16M,block_size=1M
echo one >> {mnt}/t
grep -q "fuse.walfs" /proc/self/mounts
cat {mnt}/t
{shim} umount {mnt}
mount -T {fstab} {mnt}
echo two >> {mnt}/t
getfattr --only-values -n user.walfs.fsync {mnt}; echo
cat {mnt}/t
{shim} umount {mnt}
"""
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    # org 7 has its own topics: `t` of org 1 is not there, so only "two" shows.
    assert res.stdout.split() == ["one", "always", "two"], res.stdout
    wait_until(
        lambda: not any(daemon_alive(int(p)) for p in _walfs_daemons(data)),
        what="helper daemons to exit",
    )


def _walfs_daemons(data: Path) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"walfs.cli.mount" in cmd and str(data).encode() in cmd:
                out.append(pid)
    return out
