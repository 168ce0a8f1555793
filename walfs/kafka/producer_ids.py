"""Idempotent producers: ids, and the sequence numbers checked per partition as Kafka
checks them (enable.idempotence is the default of the Java client since 3.0, of
kafka-python and of librdkafka's idempotent mode).

Per (producer id, partition) the broker knows the producer's epoch and its last batches
(Kafka keeps five). A batch that equals one of them (same epoch, first and last
sequence) is a resend: it is answered with the offset it was written at, and not
appended again. Otherwise the batch must continue the sequence (first sequence = last
sequence + 1, wrapping after 2^31-1) or it is refused with OUT_OF_ORDER_SEQUENCE_NUMBER;
an older epoch gets INVALID_PRODUCER_EPOCH; a newer epoch must start at sequence 0.
A producer the broker has no state for may start at any sequence (Kafka's rule, for
producers whose records retention removed).

The state survives a restart because it is in the WAL itself: the first record of each
batch an idempotent producer appends carries a producer section in its meta (producer id,
epoch, base sequence, record count: walfs/engine/records.py, meta version 2), written in the
same atomic append as the records. After a restart, the first batch of a producer the
listener does not know sends it back over the partition's log, newest first, until its
last five batches are found or the log start is reached (producers it gave an id to
itself are known to be new and need no search). Ids are seeded from the clock in
microseconds, so a restarted listener does not hand out an id again."""

from __future__ import annotations

import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from walfs.engine.types import REC_SIZE
from walfs.errors import BufferTooSmallError

KEPT_BATCHES = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
SEARCH_CHUNK = 4096  # records read per step of the search after a restart
MAX_STATES = 100_000  # (producer, partition) states kept in memory; older ones are searched again
_LOCK_STRIPES = 64
_REC = struct.Struct("<QQqIIQ")  # walfs_rec_t
_SECTION = struct.Struct("<qhii")  # walfs/engine/records.py producer section

DUPLICATE, OUT_OF_ORDER, STALE_EPOCH = "duplicate", "out of order", "stale epoch"


@dataclass
class _State:
    epoch: int = -1
    # (first sequence, last sequence, base offset), oldest first
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=KEPT_BATCHES))


def _last_seq(first: int, count: int) -> int:
    return (first + count - 1) & 0x7FFFFFFF


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == 0x7FFFFFFF)


def _search(engine: Any, topic: str, partition: int, pid: int) -> _State:
    """The producer's epoch and last batches, from the producer sections in the log."""
    state = _State()
    found: list[tuple[int, int, int, int]] = []  # (epoch, first, last, offset), newest first
    info = engine.info(topic, partition)
    end, low = info.high_watermark, info.low_watermark
    size = 1 << 20
    buf, recs = bytearray(size), bytearray(REC_SIZE * SEARCH_CHUNK)
    while end > low and len(found) < KEPT_BATCHES:
        start = max(low, end - SEARCH_CHUNK)
        chunk = []
        offset = start
        while offset < end:
            try:
                got = engine.read(topic, partition, offset, buf, recs, end - offset, size)
            except BufferTooSmallError as e:
                size = e.needed
                buf = bytearray(size)
                continue
            if got == 0:
                break
            for i in range(got):
                _gid, off, _ts, meta_len, _vlen, pos = _REC.unpack_from(recs, i * REC_SIZE)
                if meta_len >= 6 + _SECTION.size and buf[pos] == 2 and buf[pos + 1] & 8:
                    p, epoch, first, count = _SECTION.unpack_from(buf, pos + meta_len - _SECTION.size)
                    if p == pid:
                        chunk.append((epoch, first, _last_seq(first, count), off))
            offset += got
        found.extend(reversed(chunk))
        end = start
    if found:
        state.epoch = found[0][0]
        for epoch, first, last, off in reversed(found[:KEPT_BATCHES]):
            if epoch == state.epoch:
                state.batches.append((first, last, off))
    return state


class ProducerIds:
    def __init__(self) -> None:
        self._next = int(time.time() * 1_000_000) & 0x3FFFFFFFFFFFFF
        # Ids this listener handed out (new: nothing to search), oldest first.
        self._mine: dict[int, None] = {}
        self._states: dict[tuple[int, str, int], _State] = {}
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._lock = threading.Lock()

    def allocate(self) -> int:
        with self._lock:
            pid = self._next
            self._next += 1
            self._mine[pid] = None
            if len(self._mine) > MAX_STATES:
                del self._mine[next(iter(self._mine))]  # forgotten: a search finds nothing
            return pid

    def guard(self, pid: int, topic: str, partition: int) -> threading.Lock:
        """Held across check, append and remember, so two resends of one batch racing on
        two connections cannot both be appended."""
        return self._locks[hash((pid, topic, partition)) % _LOCK_STRIPES]

    def needs_search(self, pid: int, topic: str, partition: int) -> bool:
        """Whether check would search the log (a producer neither seen on this partition
        nor handed out here): the one part of check that reads the disk."""
        return (pid, topic, partition) not in self._states and pid not in self._mine

    def check(
        self, engine: Any, pid: int, epoch: int, topic: str, partition: int, first: int, count: int
    ) -> tuple[str | None, int]:
        """(None, -1) to append; (DUPLICATE, base offset) for a resend; (OUT_OF_ORDER or
        STALE_EPOCH, -1) to refuse. Call under ``guard``."""
        key = (pid, topic, partition)
        state = self._states.get(key)
        if state is None:
            state = _State() if pid in self._mine else _search(engine, topic, partition, pid)
            with self._lock:
                self._states[key] = state
                if len(self._states) > MAX_STATES:
                    # The oldest state goes; the log still has it for a search if needed.
                    del self._states[next(iter(self._states))]
        last = _last_seq(first, count)
        if state.epoch >= 0 and epoch < state.epoch:
            return STALE_EPOCH, -1
        if epoch == state.epoch:
            for b_first, b_last, offset in state.batches:
                if b_first == first and b_last == last:
                    return DUPLICATE, offset
            if state.batches and not _in_sequence(state.batches[-1][1], first):
                return OUT_OF_ORDER, -1
        elif state.epoch >= 0 and first != 0:
            return OUT_OF_ORDER, -1  # a new epoch starts at sequence 0
        return None, -1

    def remember(
        self, pid: int, epoch: int, topic: str, partition: int, first: int, count: int, base: int
    ) -> None:
        """After the append: the batch is the producer's newest. Call under ``guard``."""
        state = self._states.setdefault((pid, topic, partition), _State())
        if epoch != state.epoch:
            state.epoch = epoch
            state.batches.clear()
        state.batches.append((first, _last_seq(first, count), base))
