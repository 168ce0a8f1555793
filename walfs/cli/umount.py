"""`walfs umount MOUNTPOINT`: durable, unmounted, and the daemon gone when it returns.

The daemon's pid comes from the root's `user.walfs.pid` xattr. SIGTERM makes the daemon
commit held partial lines, unmount (lazily, so open readers do not block it) and close
the Wal (which syncs); this command then waits for the process to end. A dead mount (its
daemon was killed) is detached with fusermount3 -uz: there is nothing left to sync.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time


def daemon_pid(mountpoint: str) -> int:
    return int(os.getxattr(mountpoint, "user.walfs.pid"))


def process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # A zombie has finished; nobody may reap it soon (it was re-parented).
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def is_mounted(mountpoint: str) -> bool:
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].encode().decode("unicode_escape") == target:
                return True
    return False


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not process_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def main(argv: list[str]) -> int:
    from walfs.cli.common import Parser

    p = Parser(prog="walfs umount", description="Unmount a walfs mount.")
    p.add_argument("mountpoint", help="the walfs mount point")
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the daemon to finish (default 120)",
    )
    args = p.parse_args(argv)
    mp = os.path.abspath(args.mountpoint)
    from walfs.service.daemon import lazy_unmount

    try:
        pid = daemon_pid(mp)
    except OSError as exc:
        if exc.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            lazy_unmount(mp)
            print(f"walfs umount: {mp}: the daemon was gone; detached the dead mount", file=sys.stderr)
            return 0
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.ENOENT):
            print(f"walfs umount: {mp} is not a walfs mount", file=sys.stderr)
            return 1
        raise
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        # Not ours to signal: unmounting ends the daemon's loop just the same.
        lazy_unmount(mp)
    if not wait_gone(pid, args.timeout):
        print(f"walfs umount: daemon {pid} still running after {args.timeout:g}s", file=sys.stderr)
        return 1
    if is_mounted(mp):  # the daemon died without unmounting
        lazy_unmount(mp)
    return 0


if __name__ == "__main__":
    from walfs.cli.common import module_main

    module_main("umount", main)
