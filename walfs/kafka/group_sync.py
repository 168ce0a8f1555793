"""One sync for every answer that waits on durability at the same time.

Produce with acks=all must answer after a ``wal.sync()``. The WAL already shares one
fsync among threads that call sync() together (group commit in the core), but each
caller used to need its own worker thread to wait in: one thread hop per request,
which on a busy two-core machine costs more CPU than the produce itself (waking a
thread, handing the GIL back and forth). Here the waiting is done in trio: a round is one
``wal.sync()`` in a worker thread, and every answer waits for a round started after its
appends. A round covers every append that returned before the round started.

Rounds start when the answers' appends are done (``start``), not when their turn to be
sent comes: a connection's answers leave in request order, so a request appended while
the answer before it waits would otherwise start its round only after that answer's
round ended. And two rounds may be under way at once: while one round's fsync runs, the
next one is already started, its thread waiting inside the core's group commit, which
leads it the moment the running fsync ends (or returns at once if that fsync covered it).
So an answer appended during a round waits for the rest of that round and one more
fsync, without hops back to the event loop and out to a new thread in between. The core
decides what each fsync covers (csrc/sync.c); this class keeps at most two callers of
``wal.sync()`` at once, so that every answer pending on a listener shares them.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

# wal.sync() calls under way at once: the one whose fsync runs and the next one, parked in
# the core until it ends. A third could only start after the second's, with nothing more
# to cover.
ROUNDS_IN_FLIGHT = 2


class GroupSync:
    def __init__(self, sync: Callable[[], None], limiter: trio.CapacityLimiter | None = None) -> None:
        self._sync = sync
        self._limiter = limiter
        # Where rounds run ahead of their answers (the listener's nursery, set by
        # walfs/kafka/tenants.py). Without one, a round runs in the task that waits for it.
        self.nursery: trio.Nursery | None = None
        self._started = 0  # rounds started
        self._finished = 0  # rounds finished (successfully or not)
        self._covered = 0  # the latest round that succeeded: every round up to it is covered
        self._wanted = 0  # the latest round a caller needs
        self._in_flight = 0
        self._round_done = trio.Event()
        # The first failed round and its error. A failed sync fails the WAL for good (it
        # refuses appends until reopened), so every later round fails as well.
        self._failed_round = 0
        self._error: Exception | None = None
        self.rounds = 0  # wal.sync() calls made (a figure for tests)
        self.callers = 0  # sync() calls they served

    def covering_round(self) -> int:
        """The first round that covers every append that has returned by now: a round
        already started may have read what it covers before them, so the one after it."""
        return self._started + 1

    def start(self, need: int) -> None:
        """Has round ``need`` started now, in the nursery, when fewer than two rounds are
        under way (else as soon as one ends); ``sync(need)`` later waits for it."""
        self._wanted = max(self._wanted, need)
        self._start_wanted()

    async def sync(self, need: int | None = None) -> None:
        """Returns once round ``need`` (default: the covering round of this call) is done,
        that is, once every append that returned before ``covering_round()`` was asked is
        durable; raises what the WAL's sync raised for that round. Take the round right
        after the appends (and ``start`` it) and wait later: waiting in order (the answers
        of a connection) then does not start a round per answer."""
        self.callers += 1
        if need is None:
            need = self.covering_round()
        self._wanted = max(self._wanted, need)
        while self._covered < need:
            if self._error is not None and need >= self._failed_round:
                raise self._error
            if self._started < need and self._in_flight < ROUNDS_IN_FLIGHT:
                if self.nursery is None:
                    await self._run(self._begin())
                    continue
                self._start_wanted()
            if self._started >= need or self._in_flight >= ROUNDS_IN_FLIGHT:
                await self._round_done.wait()

    def _start_wanted(self) -> None:
        while (
            self.nursery is not None
            and self._error is None
            and self._started < self._wanted
            and self._in_flight < ROUNDS_IN_FLIGHT
        ):
            try:
                self.nursery.start_soon(self._run, self._started + 1)
            except RuntimeError:  # the nursery is closing: waiters run their own rounds
                self.nursery = None
                return
            self._begin()

    def _begin(self) -> int:
        self._in_flight += 1
        self._started += 1
        return self._started

    async def _run(self, this_round: int) -> None:
        """One round (already counted by _begin). A round that succeeds covers every round
        started before it too: everything appended before it started is durable once its
        wal.sync() returns."""
        try:
            self.rounds += 1
            await trio.to_thread.run_sync(self._sync, limiter=self._limiter)
        except Exception as e:
            if self._error is None or this_round < self._failed_round:
                self._failed_round, self._error = this_round, e
        else:
            self._covered = max(self._covered, this_round)
        finally:
            self._in_flight -= 1
            self._finished += 1
            done, self._round_done = self._round_done, trio.Event()
            done.set()
            self._start_wanted()
