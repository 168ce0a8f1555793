"""What the kernel must forget, told from tasks outside the request handlers (cache
notifications sent from a handler of a related request deadlock). The watcher that finds
growth, trims, deletes and topics that did not come through this mount's handlers is
walfs/fuse/watcher.py.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterable

import pyfuse3
import trio

log = logging.getLogger("walfs.fuse")

# Invalidations are batched over this long: one per append would cost a kernel round trip
# per write, and tail -f polls once a second anyway.
INVALIDATE_COALESCE = 0.02

class Invalidator:
    """Sizes (attributes) and names the kernel must look up again: recorded by anyone on
    the event loop, sent by `run()`."""

    def __init__(self) -> None:
        self._dirty_inodes: set[int] = set()
        self._dirty_entries: set[tuple[int, bytes]] = set()
        self._wakeup = trio.Event()  # sizes changed (batched)
        self._entries_wakeup = trio.Event()  # names appeared (at once)

    def sizes(self, inodes: Iterable[int]) -> None:
        # Dirty inodes always have their wakeup set (run() swaps both at once): only the
        # first of a batch sets it (every WRITE calls this).
        dirty = self._dirty_inodes
        first = not dirty
        dirty.update(inodes)
        if first:
            self._wakeup.set()

    def names(self, entries: Iterable[tuple[int, bytes]], keep: tuple[int, bytes] | None = None) -> None:
        """Entries to drop; `keep`: one not to drop after all (the entry a CREATE made)."""
        self._dirty_entries.update(entries)
        if keep is not None:
            self._dirty_entries.discard(keep)
        self._entries_wakeup.set()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._invalidate_sizes)
            nursery.start_soon(self._invalidate_names)

    async def _invalidate_sizes(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            inodes, self._dirty_inodes = self._dirty_inodes, set()
            for ino in inodes:
                try:
                    pyfuse3.invalidate_inode(ino, attr_only=True)
                except OSError as exc:
                    # ENOENT: the kernel has forgotten the inode; nothing to do.
                    if exc.errno != errno.ENOENT:
                        log.warning("invalidate_inode(%d): %s", ino, exc)
            await trio.sleep(INVALIDATE_COALESCE)

    async def _invalidate_names(self) -> None:
        # Not batched: a name created under one path (partition=0/t) must stop being a
        # cached negative entry under its other path (t) before the next command runs.
        # invalidate_entry_async queues to pyfuse3's own thread, which waits out any
        # request that holds the directory.
        while True:
            await self._entries_wakeup.wait()
            self._entries_wakeup = trio.Event()
            entries, self._dirty_entries = self._dirty_entries, set()
            for parent, name in entries:
                pyfuse3.invalidate_entry_async(parent, name, ignore_enoent=True)
