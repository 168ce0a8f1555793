"""The caller's rights that the kernel's default_permissions cannot check for us: whether
it may write a directory of the tree (the right to create groups and move their
cursors), by uid, gid and supplementary groups."""

from __future__ import annotations

import pyfuse3


def caller_groups(pid: int) -> set[int]:
    """The supplementary groups of the calling process (for group permission checks)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return {int(g) for g in line.split()[1:]}
    except (OSError, ValueError):
        pass
    return set()


def may_write_dir(ctx: pyfuse3.RequestContext, uid: int, gid: int, dir_mode: int) -> bool:
    """Whether the caller has write permission on a directory owned by uid:gid with
    dir_mode (every directory of the tree shares them)."""
    if ctx.uid == 0:
        return True
    if ctx.uid == uid:
        return bool(dir_mode & 0o200)
    if gid == ctx.gid or gid in caller_groups(ctx.pid):
        return bool(dir_mode & 0o020)
    return bool(dir_mode & 0o002)
