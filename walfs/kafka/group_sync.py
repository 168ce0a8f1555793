"""One sync for every answer that waits on durability at the same time.

Produce with acks=all must answer after a ``wal.sync()``. The WAL already shares one
fsync among threads that call sync() together (group commit in the core), but each
caller used to need its own worker thread to wait in: one thread hop per request,
which on a busy two-core machine costs more CPU than the produce itself (waking a
thread, handing the GIL back and forth). Here the waiting is done in trio: the first
caller starts a round (one ``wal.sync()`` in a worker thread), and every caller that
arrives while it runs waits for the round after it, which then starts once and covers
them all. A round covers every append that returned before the round started.
"""

from __future__ import annotations

from collections.abc import Callable

import trio


class GroupSync:
    def __init__(self, sync: Callable[[], None], limiter: trio.CapacityLimiter | None = None) -> None:
        self._sync = sync
        self._limiter = limiter
        self._started = 0  # rounds started
        self._finished = 0  # rounds finished (successfully or not)
        self._running = False
        self._round_done = trio.Event()
        # The first failed round and its error. A failed sync fails the WAL for good (it
        # refuses appends until reopened), so every later round fails as well.
        self._failed_round = 0
        self._error: Exception | None = None
        self.rounds = 0  # wal.sync() calls made (a figure for tests)
        self.callers = 0  # sync() calls they served

    def covering_round(self) -> int:
        """The first round that covers every append that has returned by now: a round
        already running may have started before them, so the one after it."""
        return self._started + 1

    async def sync(self, need: int | None = None) -> None:
        """Returns once round ``need`` (default: the covering round of this call) is done,
        that is, once every append that returned before ``covering_round()`` was asked is
        durable; raises what the WAL's sync raised for that round. Take the round right
        after the appends and wait later: waiting in order (the answers of a connection)
        then does not start a round per answer."""
        self.callers += 1
        if need is None:
            need = self.covering_round()
        while self._finished < need:
            if self._running:
                await self._round_done.wait()
                continue
            self._running = True
            self._started += 1
            this_round = self._started
            try:
                self.rounds += 1
                await trio.to_thread.run_sync(self._sync, limiter=self._limiter)
            except Exception as e:
                if self._error is None:
                    self._failed_round, self._error = this_round, e
            finally:
                self._running = False
                self._finished = this_round
                done, self._round_done = self._round_done, trio.Event()
                done.set()
        if self._error is not None and need >= self._failed_round:
            raise self._error
