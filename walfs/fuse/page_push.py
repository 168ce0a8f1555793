"""The kernel's page cache of topic files: bytes just appended are put there before anyone
reads them, and whatever could make cached pages wrong drops them.

Why: the mount's writers bypass the page cache (direct_io, walfs.fuse.operations.open), so
without this the first `cat` (or grep, or Spark job) after an ingest reads every byte
through the daemon, request by request; only a second read is served by the kernel.

How (checked on kernel 6.x, libfuse 3.14, pyfuse3 3.5; see docs/mount.md "Caching"):
- pyfuse3.notify_store copies bytes into the kernel's cache for an inode. The kernel
  marks a page valid only when the store covers it from its start (to its end, or to the
  end of the file), so every store here starts on a page boundary and re-sends the head
  of the last, partial page.
- A store is sent from a worker thread, never from the event loop: the kernel locks each
  page it fills, and a reader's read-ahead may hold that lock while it waits for a READ
  that only the event loop can answer (a store on the loop deadlocked the mount). The
  copy out of the engine runs in that thread too: on the loop it held up every request
  (~0.3-0.5 ms per MiB with the engine's checksums), and the push fell behind a fast
  writer.
- Bytes written through the mount are handed over when the writer's write() that made
  them has ended (walfs.fuse.operations: at its FLUSH, FSYNC or RELEASE, or with the WRITE after
  next), not when their WRITE is answered: the kernel drops the cached pages of a
  direct_io write()'s whole range when it ends, and one write() may arrive as two
  WRITEs; a store made meanwhile was seen lost (ftrace). Stores are batched over PUSH_COALESCE,
  and over SMALL_COALESCE while every stream grew by less than SMALL_BYTES (small writes).
- The kernel keeps the pages only while what it learns about the file does not change
  under them: any new size learned from GETATTR/LOOKUP drops them, so the sizes the
  kernel learns from stores and from its own writes are the sizes the daemon reports
  (whole records). libfuse also turns on FUSE_AUTO_INVAL_DATA, which drops them on a
  new mtime: walfs.fuse.kernel_flags turns it off, and where it cannot the mount
  reports mtimes in steps of MTIME_STEP_NS (`mtime_ns`) for growth.
- A topic inode's file starts at its generation's base in the stream's byte view
  (walfs.fuse.tree, "Generations": after a trim a new inode starts at the low
  watermark): `base_of(ino)` gives it, and pages are stored at file positions.
- Each chunk is stored twice: FUSE caches 4 KiB pages, and the kernel moves each page
  to its active list on the second access; the second store makes that access here,
  not in the first reader's read() (perf: a quarter of a first `cat`'s time).
- Bytes that change meaning (a trim makes the head of older generations ENODATA; a
  deleted topic's old generations end) are dropped with a full invalidation
  (`drop`), run in a worker thread: it may wait for page locks held by READs that this
  very loop has to answer.

Bounded: one round sends at most `cap` bytes of a stream (the most recent; older ones are
read through the daemon as before), only bytes the engine holds in memory (a store never
waits for a disk), in CHUNK-sized stores with other requests served between them. A
request handler only records that its stream grew: nothing here delays an append.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyfuse3
import trio

from walfs.engine.contract import LogEngine
from walfs.engine.rules import resident
from walfs.errors import OffsetOutOfRangeError
from walfs.fuse import kernel_flags

log = logging.getLogger("walfs.fuse.page_push")

PAGE = 4096
# The most recent bytes of one stream sent per round.
DEFAULT_CAP = 64 << 20
# One notify_store call; other requests run between two.
CHUNK = 1 << 20
# Growth is batched over this long before it is sent,
PUSH_COALESCE = 0.01
# and over this much longer while every stream grew by less than SMALL_BYTES.
SMALL_COALESCE = 0.1
SMALL_BYTES = 64 << 10
# Growth moves a topic's mtime in whole steps of this: each mtime the kernel has not seen
# drops the file's cached pages (FUSE_AUTO_INVAL_DATA), so per-append mtimes would undo
# every push. A minute is what `ls -l` shows; trims and new topics get exact times.
MTIME_STEP_NS = 60 * 10**9


def mtime_ns(now_ns: int | None = None) -> int:
    """The mtime a topic shows after growing at `now_ns` (default: now): exact when the
    kernel keeps cached pages across mtime changes (walfs.fuse.kernel_flags), else in
    steps of MTIME_STEP_NS."""
    t = time.time_ns() if now_ns is None else now_ns
    if kernel_flags.active():
        return t
    return t - t % MTIME_STEP_NS


@dataclass
class _Pending:
    topic: str
    partition: int
    grown: int  # bytes at the stream's end not sent yet
    held: int  # of which the most recent ones, not to be sent yet (a WRITE in flight)


class PagePusher:
    """Sends the recent bytes of streams into the kernel's cache for their inodes.

    `grew(ino, topic, partition, nbytes, held=...)` (any trio task, a request handler
    too): the stream shown by inode `ino` grew by `nbytes` at its end; `held`: keep them
    until `release(ino, nbytes)`. No positions: a round takes the stream's end once and
    sends the bytes before it that grew and are not held (with several writers of one
    stream this is approximate: a byte sent early or late only costs a READ, never a
    wrong byte, since bytes are read from the engine at their true positions). `run()`
    is the task that sends them. `drop(ino)` forgets pending work, stops a store under way and empties the
    kernel's cache of the inode. Counters for metrics and tests: `pushed_bytes`,
    `skipped_bytes` (cut by the cap, not in memory, or refused by the kernel)."""

    def __init__(
        self,
        engine: LogEngine,
        *,
        cap: int = DEFAULT_CAP,
        coalesce: float = PUSH_COALESCE,
        base_of: Callable[[int], int | None] = lambda ino: 0,
    ) -> None:
        if cap < PAGE:
            raise ValueError(f"cap must be at least {PAGE} bytes")
        self.engine = engine
        # Where an inode's file starts in its stream's byte view (None: send it nothing).
        self.base_of = base_of
        self.cap = cap
        self.coalesce = coalesce
        self.enabled = True
        self._pending: dict[int, _Pending] = {}
        self._dropped: set[int] = set()  # drop() during a round: stop sending
        self._wakeup = trio.Event()
        self._buf = bytearray(CHUNK)
        self.pushed_bytes = 0
        self.skipped_bytes = 0

    def grew(self, ino: int, topic: str, partition: int, nbytes: int, *, held: bool = False) -> None:
        if not self.enabled or nbytes <= 0:
            return
        pending = self._pending.get(ino)
        if pending is None:
            pending = self._pending[ino] = _Pending(topic, partition, 0, 0)
        pending.grown += nbytes
        if held:
            pending.held += nbytes
        else:
            self._wakeup.set()

    def release(self, ino: int, nbytes: int) -> None:
        """Held bytes may go now."""
        pending = self._pending.get(ino)
        if pending is not None and nbytes > 0:
            pending.held = max(0, pending.held - nbytes)
            self._wakeup.set()

    async def drop(self, ino: int) -> None:
        """Empties the kernel's cache of `ino` (a trim or a delete changed its bytes)."""
        self._pending.pop(ino, None)
        self._dropped.add(ino)
        try:
            await trio.to_thread.run_sync(pyfuse3.invalidate_inode, ino)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # ENOENT: the kernel holds nothing of it
                log.warning("invalidate_inode(%d): %s", ino, exc)

    async def run(self) -> None:
        while self.enabled:
            await self._wakeup.wait()
            await trio.sleep(self.coalesce)
            if not any(p.grown - p.held >= SMALL_BYTES for p in self._pending.values()):
                # Only small growth (an `echo >> t` loop): wait longer for more. Each
                # round costs a thread hop and re-sends the stream's last page, which
                # per 10 ms was a sixth of the daemon's CPU in an echo loop.
                await trio.sleep(SMALL_COALESCE)
            self._wakeup = trio.Event()
            # Rounds follow each other while a chunk or more is ready: a writer faster
            # than one round must not leave the rounds behind (the cap would cut); less
            # waits for the next batch (small writes: one store per round).
            least = 1
            while ready := [i for i, p in self._pending.items() if p.grown - p.held >= least]:
                least = CHUNK
                for ino in ready:
                    pending = self._pending.pop(ino)
                    self._dropped.discard(ino)
                    try:
                        await self._push(ino, pending)
                    except Exception:
                        log.exception("pushing pages of %r failed", pending.topic)

    def _copy_and_store(
        self, ino: int, topic: str, partition: int, pos: int, want: int, base: int
    ) -> tuple[int, OSError | None]:
        """(bytes stored, the kernel's refusal or None). One round at a time uses _buf."""
        with memoryview(self._buf) as view:
            n = self.engine.read_bytes(topic, partition, pos, view[:want])
            if n <= 0:
                return n, None
            try:
                pyfuse3.notify_store(ino, pos - base, view[:n])  # type: ignore[arg-type]  # any buffer
                # Twice: the second store finds the pages the first made and marks them
                # accessed again, which moves them to the kernel's active list here
                # instead of in the first reader's read() (FUSE caches 4 KiB pages, one
                # LRU move each: a quarter of a first `cat`'s time when left to it).
                pyfuse3.notify_store(ino, pos - base, view[:n])  # type: ignore[arg-type]
            except OSError as exc:
                return n, exc
        return n, None

    async def _push(self, ino: int, pending: _Pending) -> None:
        topic, partition = pending.topic, pending.partition
        base = self.base_of(ino)
        if base is None:
            return
        info = self.engine.info(topic, partition)
        size = info.byte_size
        if pending.held:
            # Still held: they stay pending (with what grows meanwhile).
            rest = self._pending.setdefault(ino, _Pending(topic, partition, 0, 0))
            rest.grown += pending.held
            rest.held += pending.held
        end = size - pending.held
        wanted = max(0, size - pending.grown)
        start = max(wanted, end - self.cap, base)  # the most recent bytes, at most `cap`
        start -= (start - base) % PAGE  # a page is only valid when stored from its start
        low = info.low_byte
        if start < low:  # trimmed bytes are never cached (a READ answers ENODATA)
            start = low + (-(low - base) % PAGE)
        self.skipped_bytes += max(0, start - wanted)
        pos = start
        while pos < end:
            if ino in self._dropped:
                return
            want = min(CHUNK, end - pos)
            if not resident(self.engine, topic, partition, pos, want):
                self.skipped_bytes += end - pos
                return
            try:
                # In a worker thread, copy and store alike: the kernel locks each page it
                # fills, and a page may be locked by a reader waiting for a READ that this
                # loop answers; and the copy (with the engine's checksums) would hold up
                # every request the loop has to answer meanwhile.
                n, err = await trio.to_thread.run_sync(
                    self._copy_and_store, ino, topic, partition, pos, want, base
                )
            except OffsetOutOfRangeError:
                return  # trimmed meanwhile: drop() follows
            if err is not None:
                if err.errno == errno.ENOSYS:
                    log.warning("the kernel cannot take pages (notify_store): pushing off")
                    self.enabled = False
                elif err.errno != errno.ENOENT:  # ENOENT: the kernel forgot the inode
                    log.warning("notify_store(%d, %d, %d): %s", ino, pos, n, err)
                self.skipped_bytes += end - pos
                return
            if n <= 0:
                return
            self.pushed_bytes += n
            pos += n
