"""ListOffsets by record timestamp, as Kafka answers it.

Kafka searches the timestamps records carry (CreateTime: the producer's), not the times
they were appended: the answer to "timestamp T" is the first offset whose record
timestamp is at least T, and "max timestamp" (-3) is the first offset holding the largest
timestamp. Record timestamps need not grow with offsets, so Kafka's time index keeps a
running maximum, which makes the search binary. The same here: per partition, an
in-memory index of the running maximum at every CHUNK records, built on first use by
one pass over the partition's records (the engine's own time index is by append time)
and extended as the partition grows; a query binary-searches it and then reads one chunk.
A partition whose log start moved (retention, trim) or that shrank (deleted and made
anew) is indexed again from its log start.

A record's timestamp is the producer's when its meta section holds one, else its append
time: the timestamp a Kafka consumer is shown.
"""

from __future__ import annotations

import bisect
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

from walfs.engine.types import REC_SIZE
from walfs.errors import BufferTooSmallError

CHUNK = 4096  # records per index entry
_REC = struct.Struct("<QQqIIQ")  # walfs_rec_t: gid, offset, timestamp_ms, meta_len, value_len, buf_pos
_TS = struct.Struct("<q")


@dataclass
class _Partition:
    start: int  # offset the index begins at (the log start when it was built)
    ends: list[int] = field(default_factory=list)  # offset one past each chunk
    maxes: list[int] = field(default_factory=list)  # running maximum timestamp up to ends[i]


def _timestamps(engine: Any, topic: str, partition: int, start: int, end: int) -> list[int]:
    """The record timestamps of offsets start..end-1 (producer's, else append time)."""
    out: list[int] = []
    size = 1 << 20
    offset = start
    while offset < end:
        n = min(end - offset, CHUNK)
        buf = bytearray(size)
        recs = bytearray(REC_SIZE * n)
        try:
            got = engine.read(topic, partition, offset, buf, recs, n, size)
        except BufferTooSmallError as e:
            size = e.needed
            continue
        if got == 0:
            break
        for i in range(got):
            _gid, _off, ts, meta_len, _vlen, pos = _REC.unpack_from(recs, i * REC_SIZE)
            if meta_len >= 10 and buf[pos + 1] & 2:  # walfs/engine/records.py: flag 2, i64 after 2 bytes
                ts = _TS.unpack_from(buf, pos + 2)[0]
            out.append(ts)
        offset += got
    return out


class RecordTimes:
    """The running-maximum index of every partition a ListOffsets asked about."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._lock = threading.Lock()

    def _index(self, engine: Any, topic: str, partition: int, low: int, high: int) -> _Partition:
        with self._lock:
            ix = self._parts.get((topic, partition))
            if ix is None or ix.start != low or (ix.ends and ix.ends[-1] > high):
                ix = self._parts[(topic, partition)] = _Partition(low)
            done = ix.ends[-1] if ix.ends else ix.start
            # Only whole chunks are indexed; the tail past the last one is read per query.
            while high - done >= CHUNK:
                ts = _timestamps(engine, topic, partition, done, done + CHUNK)
                if len(ts) < CHUNK:
                    break
                prev = ix.maxes[-1] if ix.maxes else -(1 << 63)
                ix.ends.append(done + CHUNK)
                ix.maxes.append(max(prev, max(ts)))
                done += CHUNK
            return ix

    def offset_for(
        self, engine: Any, topic: str, partition: int, target: int, low: int, high: int
    ) -> tuple[int, int]:
        """(timestamp, offset) of the first record at or after ``target`` in low..high-1,
        (-1, -1) when none is."""
        ix = self._index(engine, topic, partition, low, high)
        i = bisect.bisect_left(ix.maxes, target)
        begin = ix.start if i == 0 else ix.ends[i - 1]
        end = ix.ends[i] if i < len(ix.ends) else high
        for off, ts in enumerate(_timestamps(engine, topic, partition, begin, end), begin):
            if ts >= target:
                return ts, off
        return -1, -1

    def max_timestamp(self, engine: Any, topic: str, partition: int, low: int, high: int) -> tuple[int, int]:
        """(timestamp, offset) of the first record holding the largest timestamp in
        low..high-1; (-1, -1) for an empty partition."""
        if high <= low:
            return -1, -1
        ix = self._index(engine, topic, partition, low, high)
        tail_from = ix.ends[-1] if ix.ends else ix.start
        tail = _timestamps(engine, topic, partition, tail_from, high)
        best = max(ix.maxes[-1] if ix.maxes else -(1 << 63), max(tail, default=-(1 << 63)))
        return best, self.offset_for(engine, topic, partition, best, low, high)[1]
