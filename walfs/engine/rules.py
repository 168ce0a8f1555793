"""The rules built on the engine contract, one home each: every face and the facade use
these instead of re-deriving them (and instead of asking which engine they have: an
optional capability is tested here, once, with a fallback built on the core calls)."""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from walfs.engine.capabilities import (
    Appenders,
    GroupCursors,
    LineAppend,
    NoWaitAppend,
    PieceAppend,
    ResidentBytes,
    has,
)
from walfs.engine.contract import LogEngine
from walfs.engine.names import check_partition, topic_bytes
from walfs.engine.records import Record, decode_meta, encode_meta, value_is_null
from walfs.engine.settings import Policy, policy_of
from walfs.engine.types import (
    DEFAULT_MAX_BYTES,
    MAX_RECORD_BYTES,
    REC_SIZE,
    Appender,
    Change,
    StreamInfo,
)
from walfs.errors import BufferTooSmallError, OffsetOutOfRangeError, RecordTooLargeError


# -- appending ---------------------------------------------------------------------------
def append_lines(engine: LogEngine, topic: str, partition: int, data: Any) -> tuple[int, int]:
    """Appends each line of `data` (split on b"\\n"; a final newline ends the last line) as
    one batch of plain records: the file face's write. (first offset, number of records).
    Same contract as LogEngine.append. The engine's own LineAppend when it has one."""
    if has(engine, LineAppend):
        return engine.append_lines(topic, partition, data)
    if not data:
        raise ValueError("append_lines needs at least one byte")
    data = bytes(data)
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    metas = array("I", bytes(4 * len(lines)))
    first = engine.append(topic, partition, b"".join(lines), metas, array("I", (len(x) for x in lines)))
    return first, len(lines)


def append_pieces(
    engine: LogEngine, topic: str, partition: int, pieces: Sequence[Any], meta_lens: Any, value_lens: Any
) -> int:
    """LogEngine.append with the bodies in several buffers (capabilities.PieceAppend);
    joined into one buffer for an engine without it."""
    if has(engine, PieceAppend):
        return engine.append_pieces(topic, partition, pieces, meta_lens, value_lens)
    return engine.append(topic, partition, b"".join(pieces), meta_lens, value_lens)


def append_nowait(
    engine: LogEngine, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any
) -> int | None:
    """capabilities.NoWaitAppend's append, or None (nothing appended: append the usual way,
    in a thread) for an engine that always waits."""
    if has(engine, NoWaitAppend):
        return engine.append_nowait(topic, partition, data, meta_lens, value_lens)
    n = len(meta_lens)
    if n == 0 or len(value_lens) != n or sum(meta_lens) + sum(value_lens) != memoryview(data).nbytes:
        raise ValueError("append needs one meta and one value length per record, adding up to the data")
    return None


class _PlainAppender:
    """An Appender built on LogEngine.append, for an engine without capabilities.Appenders."""

    def __init__(self, engine: LogEngine, topic: str, partition: int) -> None:
        topic_bytes(topic)  # the names are checked now, once
        self.topic = topic
        self.partition = check_partition(partition)
        self._engine = engine

    def append(self, value: bytes) -> int:
        lens = array("I", [len(value)])
        return self._engine.append(self.topic, self.partition, value, array("I", [0]), lens)


def appender(engine: LogEngine, topic: str, partition: int = 0) -> Appender:
    """A handle for cheap single appends to one stream (creates the stream)."""
    if has(engine, Appenders):
        return engine.appender(topic, partition)
    return _PlainAppender(engine, topic, partition)


# -- reading -----------------------------------------------------------------------------
def resident(engine: LogEngine, topic: str, partition: int, position: int, size: int) -> bool:
    """capabilities.ResidentBytes's hint; False (may wait) for an engine that cannot tell."""
    if has(engine, ResidentBytes):
        return engine.resident(topic, partition, position, size)
    return False


# -- settings and cursors --------------------------------------------------------------
def retention(engine: LogEngine, topic: str) -> Policy:
    """The retention in force for a topic: its overrides over the engine's default."""
    return policy_of(engine.settings(topic), engine.retention_default)


def committed_offset(engine: LogEngine, group: str, topic: str, partition: int = 0) -> int | None:
    """The group's committed offset on the stream (LogEngine.committed without metadata)."""
    got = engine.committed(group, topic, partition)
    return None if got is None else got[0]


def durable_end(engine: LogEngine, topic: str, partition: int, offset: int) -> int:
    """Where a consumer at `offset` may read up to: the durable watermark, after syncing
    if records were published beyond a durable mark at or below `offset` (one shared
    fsync), so a consumer never waits for the interval syncer and never sees a record
    that a power cut could take back."""
    return durable_info(engine, topic, partition, offset).durable_watermark


def durable_info(engine: LogEngine, topic: str, partition: int, offset: int) -> StreamInfo:
    """The partition's info once durable_end's sync (if one is due) is done: its
    durable_watermark is durable_end's answer, read with the other marks in one call."""
    i = engine.info(topic, partition)
    if i.durable_watermark <= offset < i.high_watermark:
        engine.sync()
        i = engine.info(topic, partition)
    return i


def encode_records(records: Iterable[Any]) -> tuple[bytes, array, array]:
    """(key, value, headers, timestamp_ms) tuples or Record-like objects in the stored
    layout LogEngine.append takes: (bodies, meta lengths, value lengths). A None value is
    a null (a Kafka tombstone): stored empty, marked in the meta section."""
    bodies: list[bytes] = []
    metas = array("I")
    values = array("I")
    for r in records:
        if isinstance(r, tuple):
            key, value, headers, ts = r
        else:
            key, value, headers, ts = r.key, r.value, r.headers, getattr(r, "timestamp_ms", None)
        meta = encode_meta(key, headers, ts, null_value=value is None)
        value = b"" if value is None else bytes(value)
        if len(value) > MAX_RECORD_BYTES:
            raise RecordTooLargeError("a record is larger than 4 GiB")
        bodies.append(meta + value if meta else value)
        metas.append(len(meta))
        values.append(len(value))
    if not bodies:
        raise ValueError("no records to append")
    return b"".join(bodies), metas, values


def committed_offsets(engine: LogEngine, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of a group in the engine's org: {(topic, partition): offset}.
    The engine's own GroupCursors when it has one (a committed() per stream otherwise)."""
    if has(engine, GroupCursors):
        return engine.group_cursors(group)
    out = {}
    for t, p in engine.streams():
        offset = committed_offset(engine, group, t, p)
        if offset is not None:
            out[(t, p)] = offset
    return out


def group_start(engine: LogEngine, group: str, topic: str, partition: int = 0) -> int:
    """Where a group's next record is: its committed offset, or the low watermark when
    that is further (trimmed records are gone for everyone); 0 for a new group. The one
    rule for every face (the Python Consumer, the mount's consumer files)."""
    committed = committed_offset(engine, group, topic, partition)
    return max(committed or 0, engine.info(topic, partition).low_watermark)


def wait_for(
    engine: LogEngine, topic: str, partition: int, offset: int, timeout: float | None = None
) -> bool:
    """Blocks until the high watermark passes `offset` (True), the timeout passes or the
    engine closes (False). Woken by watch(), not by polling."""
    woken = threading.Event()

    def on_change(c: Change) -> None:
        if c.kind == "close" or (c.topic == topic and c.partition == partition):
            woken.set()

    stop = engine.watch(on_change)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if engine.closed:
                return False
            if engine.info(topic, partition).high_watermark > offset:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            woken.wait(left)
            woken.clear()
    finally:
        stop()


class _ReadBuffers(threading.local):
    buf: bytearray
    recs: bytearray

    def __init__(self) -> None:
        # Empty until a read in this thread needs them (read_raw grows them): nothing is
        # allocated at import.
        self.buf = bytearray()
        self.recs = bytearray()


_bufs = _ReadBuffers()


def read_raw(
    engine: LogEngine, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
) -> tuple[int, memoryview, list[int]]:
    """One read into this thread's buffers (grown as needed): (n, buf, the descriptors as
    five 64-bit words each: gid, offset, timestamp_ms, meta_len | value_len << 32, buf_pos)."""
    if not isinstance(offset, int) or offset < 0:
        raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
    max_records = max(1, min(max_records, 1 << 20))
    t = _bufs
    if len(t.recs) < max_records * REC_SIZE:
        t.recs = bytearray(max_records * REC_SIZE)
    want = max(min(max_bytes, 16 << 20), 64 << 10)
    if len(t.buf) < want:
        t.buf = bytearray(want)
    while True:
        try:
            n = engine.read(topic, partition, offset, t.buf, t.recs, max_records, max_bytes)
        except BufferTooSmallError as e:
            t.buf = bytearray(e.needed)
            continue
        words = memoryview(t.recs)[: n * REC_SIZE].cast("Q").tolist()
        return n, memoryview(t.buf), words


def read_records(
    engine: LogEngine,
    topic: str,
    partition: int,
    offset: int,
    max_records: int = 1000,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[Record]:
    """read() as Record objects (keys, headers and producer times decoded)."""
    n, mv, w = read_raw(engine, topic, partition, offset, max_records, max_bytes)
    out = []
    for k in range(0, 5 * n, 5):
        pos, lens = w[k + 4], w[k + 3]
        split = pos + (lens & 0xFFFFFFFF)
        meta = mv[pos:split].tobytes()
        key, headers, ts = decode_meta(meta)
        append_ts = w[k + 2] - (1 << 64) if w[k + 2] >= 1 << 63 else w[k + 2]
        out.append(
            Record(
                w[k + 1],
                append_ts if ts is None else ts,
                None if value_is_null(meta) else mv[split : split + (lens >> 32)].tobytes(),
                key,
                headers,
                w[k],
            )
        )
    return out


def read_values(
    engine: LogEngine,
    topic: str,
    partition: int,
    offset: int,
    max_records: int = 1000,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[bytes]:
    """read() as values only (the fast path of walfs.Wal.read)."""
    n, mv, w = read_raw(engine, topic, partition, offset, max_records, max_bytes)
    out = []
    for k in range(3, 5 * n, 5):
        start = w[k + 1] + (w[k] & 0xFFFFFFFF)
        out.append(mv[start : start + (w[k] >> 32)].tobytes())
    return out
