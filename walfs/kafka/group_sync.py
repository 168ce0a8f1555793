"""One sync for every answer that waits on durability at the same time.

Produce with acks=all must answer after a ``wal.sync()``. The WAL already shares one
fsync among threads that call sync() together (group commit in the core), but each
caller used to need its own worker thread to wait in: one thread hop per request. Here
the waiting is done in trio, and the syncs run in one chain: a worker thread calls
``wal.sync()``, and when it returns calls it again at once if anything was appended (and
marked) meanwhile, and so on until nothing is left to sync; then it ends, and the next
mark starts a new chain. Each ``wal.sync()`` covers every append that returned before it
was called (walfs/wal.py), so a mark is covered by the first sync called after it.

A mark (``mark()``) is taken right after a request's appends have returned, on the event
loop, and ``wait(mark)`` later returns once a sync called after that mark has succeeded.
The chain reads the latest mark just before each call, so an answer appended while a
sync runs waits for the rest of that sync and the next one: no hop back to the event
loop and out to a new thread between the two, and no round started early that covers
less (before h/kprod4 two ``wal.sync()`` calls could be under way, the second parked in
the core beside the running fsync; it had been called before the appends made while
that fsync ran, so those waited for a third). The core decides what each fsync covers
(csrc/sync.c); a sync that the fsync before it covered returns without one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import trio


class GroupSync:
    def __init__(self, sync: Callable[[], None], limiter: trio.CapacityLimiter | None = None) -> None:
        self._sync = sync
        self._limiter = limiter
        # Where chains run ahead of their answers (the listener's nursery, set by
        # walfs/kafka/tenants.py). Without one, a chain runs in the task that waits for it.
        self.nursery: trio.Nursery | None = None
        self._lock = threading.Lock()  # _chain and _synced, shared with the chain's thread
        self._marked = 0  # marks handed out
        # The latest mark a successful sync was called after: every mark up to it is durable
        # (set by the chain's thread before it posts the wake-up).
        self._synced = 0
        self._chain = False  # a chain is under way or about to start
        self._error: Exception | None = None  # (event loop) a failed sync: the WAL refuses appends
        self._round_done = trio.Event()
        self.rounds = 0  # wal.sync() calls made (a figure for tests and benches)
        self.chains = 0  # chains run (each one hop to a worker thread and back)
        self.callers = 0  # wait() calls they served

    def mark(self) -> int:
        """A mark for every append that has returned by now; has a chain of syncs run
        (in the nursery) if none is under way. ``wait(mark)`` waits for it later."""
        self._marked += 1
        if self.nursery is not None:
            self._start_chain()
        return self._marked

    async def wait(self, mark: int) -> None:
        """Returns once a ``wal.sync()`` called after ``mark`` was taken has succeeded, that is,
        once every append that returned before the mark is durable; raises what the WAL's
        sync raised where none did."""
        self.callers += 1
        while self._synced < mark:
            if self._error is not None:
                raise self._error
            if self.nursery is None and self._claim():
                await self._run()
                continue
            if self.nursery is not None:
                self._start_chain()
            await self._round_done.wait()

    async def sync(self) -> None:
        """Every append that has returned by now made durable."""
        await self.wait(self.mark())

    def _claim(self) -> bool:
        """Whether a new chain is to start (none is under way and something is unsynced)."""
        with self._lock:
            if self._chain or self._synced >= self._marked:
                return False
            self._chain = True
            return True

    def _start_chain(self) -> None:
        if self._error is not None or not self._claim():
            return
        assert self.nursery is not None
        try:
            self.nursery.start_soon(self._run)
        except RuntimeError:  # the nursery is closing: waiters run their own chains
            self.nursery = None
            with self._lock:
                self._chain = False

    async def _run(self) -> None:
        self.chains += 1
        token = trio.lowlevel.current_trio_token()
        try:
            await trio.to_thread.run_sync(self._rounds, token, limiter=self._limiter)
        except BaseException:
            # Cancelled while waiting for a thread (the limiter), before the chain ran (once
            # it runs it is not cancellable), or something other than an Exception left the
            # chain's thread: either way no chain is under way, and the waiters look again.
            # (A chain that ends by itself clears _chain under the lock.)
            with self._lock:
                self._chain = False
            self._wake()
            raise

    def _rounds(self, token: trio.lowlevel.TrioToken) -> None:
        """(In a worker thread) wal.sync() while anything is marked and not synced. Each
        round's outcome goes to the event loop in order (run_sync_soon is first in, first out)."""
        while True:
            with self._lock:
                mark = self._marked
                if self._synced >= mark:
                    self._chain = False
                    return
            self.rounds += 1
            try:
                self._sync()
            except Exception as e:
                _post(token, self._failed, e)
                with self._lock:
                    self._chain = False
                return
            with self._lock:
                self._synced = mark
            _post(token, self._wake)

    def _failed(self, error: Exception) -> None:
        """(On the event loop) the WAL failed: every mark not synced yet fails (a failed
        sync is final)."""
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        done, self._round_done = self._round_done, trio.Event()
        done.set()


def _post(token: trio.lowlevel.TrioToken, fn: Callable[..., None], *args: object) -> None:
    try:
        token.run_sync_soon(fn, *args)
    except trio.RunFinishedError:  # the listener has stopped: nobody waits any more
        pass
