"""The counters every layer keeps for the metrics (walfs/service/metrics.py exposes them).

Hot paths pay almost nothing: the Wal keeps plain integer counters (appends and bytes per
stream, reclaimed files) and a `Latency` histogram of durability waits; FUSE requests
(walfs.fuse.requests) are timed into the mount's lock-free `LoopLatency`, Kafka requests
into a `Latency` kept here.
Everything else (consumer lag, disk free, segment files, fsync rounds, recovery figures)
is computed when scraped.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable
from typing import Any

# Seconds: 50 us .. 10 s, enough for a FUSE round trip and a slow fsync alike.
BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Latency:
    """A fixed-bucket histogram per label value (thread-safe; one lock per observe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self._errors: dict[str, int] = {}

    def observe(self, label: str, seconds: float, error: bool = False) -> None:
        i = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            counts = self._counts.get(label)
            if counts is None:
                counts = self._counts[label] = [0] * (len(BUCKETS) + 1)
                self._sums[label] = 0.0
            counts[i] += 1
            self._sums[label] += seconds
            if error:
                self._errors[label] = self._errors.get(label, 0) + 1

    def snapshot(self) -> list[tuple[str, list[int], float, int]]:
        with self._lock:
            return [(k, list(v), self._sums[k], self._errors.get(k, 0)) for k, v in self._counts.items()]

    def time(self, label: str) -> _Timer:
        return _Timer(self, label)


class LoopLatency(Latency):
    """A Latency that one thread writes (an event loop: the mount's FUSE requests) and any
    thread reads (a scrape): `observe` takes no lock.

    Each label has one list, `slots[label]` (made up front for `labels`, by `slot()`
    for others): the bucket counts, then the error count (ERRORS) and the sum of
    seconds (SUM). The writer changes its items in place, and a reader copies the list;
    each item's store is atomic under the GIL, so a snapshot taken during a request may
    miss that request in some items, never count it twice. Labels never observed are
    left out of snapshots. The mount's request wrapper (walfs.fuse.requests) updates a
    slot inline: a method call with a lock per request was a measurable share of a
    small request's time."""

    ERRORS = len(BUCKETS) + 1
    SUM = len(BUCKETS) + 2

    def __init__(self, labels: Iterable[str] = ()) -> None:
        super().__init__()
        self.slots: dict[str, list[Any]] = {label: self._new_slot() for label in labels}

    @staticmethod
    def _new_slot() -> list[Any]:
        return [0] * (len(BUCKETS) + 2) + [0.0]

    def slot(self, label: str) -> list[Any]:
        s = self.slots.get(label)
        if s is None:
            with self._lock:  # slots are made by the writer, listed by readers
                s = self.slots.setdefault(label, self._new_slot())
        return s

    def observe(self, label: str, seconds: float, error: bool = False) -> None:
        s = self.slot(label)
        s[bisect.bisect_left(BUCKETS, seconds)] += 1
        s[self.SUM] += seconds
        if error:
            s[self.ERRORS] += 1

    def snapshot(self) -> list[tuple[str, list[int], float, int]]:
        with self._lock:
            slots = list(self.slots.items())
        out = []
        for label, s in slots:
            copy = list(s)
            counts = copy[: len(BUCKETS) + 1]
            if any(counts):
                out.append((label, counts, copy[self.SUM], copy[self.ERRORS]))
        return out


class _Timer:
    def __init__(self, hist: Latency, label: str) -> None:
        self.hist, self.label = hist, label

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.hist.observe(self.label, time.perf_counter() - self.t0, exc_type is not None)


TALLY_FOLD = 1024  # a single appender folds its stream's tally once it holds this many appends


class WalStats:
    """The Wal's own counters: plain integers on the append path, read when scraped.

    Single appends (the stream handle, LocalAppender) do not take the lock: each adds its
    byte count to its stream's tally (stream_tally), a list that only grows by
    list.append (atomic under the GIL); whoever holds the lock folds tallies into the
    counters (fold), the appender itself once a tally is long, and every read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._appends: dict[tuple[str, int], list[int]] = {}
        self._tallies: dict[tuple[str, int], list[int]] = {}
        self._records_appended = 0
        self.reclaimed_segments = 0
        self.backpressure_waits = 0  # appends that waited for retention (size limit + one segment)
        self.open_seconds = 0.0
        self.durable_waits = Latency()
        self.corrupt = CorruptRecords()

    def appended(self, topic: str, partition: int, n: int, nbytes: int) -> None:
        with self._lock:
            self._count(topic, partition, n, nbytes)

    def _count(self, topic: str, partition: int, n: int, nbytes: int) -> None:
        c = self._appends.get((topic, partition))
        if c is None:
            c = self._appends[(topic, partition)] = [0, 0]
        c[0] += n
        c[1] += nbytes
        self._records_appended += n

    def stream_tally(self, topic: str, partition: int) -> list[int]:
        """The list single appends to (topic, partition) add their byte counts to."""
        with self._lock:
            t = self._tallies.get((topic, partition))
            if t is None:
                t = self._tallies[(topic, partition)] = []
            return t

    def fold(self) -> None:
        with self._lock:
            self._fold()

    def _fold(self) -> None:
        for (topic, partition), t in self._tallies.items():
            k = len(t)
            if k:
                nbytes = sum(t[:k])
                del t[:k]  # appends that came meanwhile stay, after the first k
                self._count(topic, partition, k, nbytes)

    @property
    def records_appended(self) -> int:
        with self._lock:
            self._fold()
            return self._records_appended

    def appends_by_stream(self) -> dict[tuple[str, int], tuple[int, int]]:
        with self._lock:
            self._fold()
            return {k: (v[0], v[1]) for k, v in self._appends.items()}


# -- damaged records met by reads (walfs_corrupt_records_total) -------------------------

CORRUPT_REMEMBERED = 4096  # damaged records remembered, so that each is logged once


class CorruptRecords:
    """Damaged records that reads ran into (the engine raises CorruptRecordError for
    them): `first` says whether this one is new, so that it is logged and counted once,
    not at every read that reaches it again (a kernel's or a Kafka client's retries).
    Bounded: past CORRUPT_REMEMBERED the oldest is forgotten (and would count again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, int], None] = {}  # (stream number, offset), oldest first
        self.total = 0

    def first(self, stream_no: int, offset: int) -> bool:
        key = (stream_no, offset)
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= CORRUPT_REMEMBERED:
                del self._seen[next(iter(self._seen))]
            self._seen[key] = None
            self.total += 1
            return True

    def __len__(self) -> int:
        return len(self._seen)
