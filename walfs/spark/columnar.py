"""Reads an offset range of one stream as pyarrow RecordBatches in the schema of
walfs.spark.schema.

Why not walfs.engine.rules.read_records: it builds a Python Record per row (~6 µs each), which caps a
core at ~150k rows/s, while the C read itself costs ~0.25 µs per record. The fast path
below calls the C reader into one Arrow buffer and turns the record table it fills
(walfs_rec_t[]) into columns with numpy, so values of file-appended records reach Spark
without a per-row Python object: LogEngine.read fills an Arrow buffer with the record
bodies and a numpy array with one descriptor per record (walfs.engine.types.REC_LAYOUT).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from walfs import BufferTooSmallError
from walfs.engine.contract import LogEngine
from walfs.engine.records import Record, decode_meta, value_is_null
from walfs.engine.rules import read_records
from walfs.engine.types import REC_LAYOUT, REC_SIZE
from walfs.errors import OffsetOutOfRangeError
from walfs.spark.schema import ARROW_SCHEMA, CREATE_TIME, HEADER_TYPE, LOG_APPEND_TIME

BATCH_RECORDS = 65536
BATCH_BYTES = 16 << 20

REC_DTYPE = np.dtype(REC_LAYOUT)

# walfs_rec_t from csrc/walfs.h, as the engine describes it (checked against C there).
_FAST = REC_DTYPE.itemsize == REC_SIZE


def read_range(
    engine: LogEngine,
    topic: str,
    partition: int,
    start: int,
    end: int,
    batch_records: int = BATCH_RECORDS,
    batch_bytes: int = BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Yields the records start..end-1 of topic[partition] (end must be <= the high
    watermark of `wal`), at most `batch_records` per batch."""
    offset = start
    while offset < end:
        want = min(batch_records, end - offset)
        batch = None
        if _FAST:
            batch = _read_fast(engine, topic, partition, offset, want, batch_bytes)
        if batch is None:
            batch = records_to_batch(
                topic, partition, read_records(engine, topic, partition, offset, want, batch_bytes)
            )
        if batch.num_rows == 0:
            raise OffsetOutOfRangeError(
                f"{topic!r}[{partition}] has no record at offset {offset} (end {end})"
            )
        offset += batch.num_rows
        yield batch


def _read_fast(
    engine: LogEngine, topic: str, partition: int, offset: int, want: int, max_bytes: int
) -> pa.RecordBatch | None:
    recs = np.empty(want, REC_DTYPE)
    buflen = max_bytes
    while True:
        # An Arrow buffer, so the values column can point into it without a copy.
        buf = pa.allocate_buffer(buflen)
        try:
            n = engine.read(topic, partition, offset, buf, recs, want, max_bytes)
        except BufferTooSmallError as e:  # one record larger than the buffer: read it alone
            buflen = max_bytes = e.needed
            continue
        return _columns_to_batch(topic, partition, recs[:n], buf)


# A meta section holding only a producer timestamp (what every record produced through
# the Kafka listener has): u8 version=1, u8 flags=2, i64 timestamp, u32 n_headers=0.
_TS_ONLY_META = 14


def _columns_to_batch(
    topic: str, partition: int, r: np.ndarray, buf: pa.Buffer, gid_known: bool = True
) -> pa.RecordBatch:
    """Columns from descriptors (REC_LAYOUT) and the bodies they point into. With
    gid_known False (records fetched over the wire, which carries no gid) gid is null."""
    n = len(r)
    meta_len = r["meta_len"].astype(np.int64)
    value_len = r["value_len"].astype(np.int64)
    pos = r["buf_pos"].astype(np.int64)
    used = int(pos[-1] + meta_len[-1] + value_len[-1]) if n else 0
    value_offsets = np.zeros(n + 1, np.int32)
    value_offsets[1:] = np.cumsum(value_len)
    has_meta = bool(n) and bool(meta_len.any())
    if not has_meta:
        # Bodies are packed back to back, so with no meta the buffer already is the
        # concatenation of the values: the column is a view of it.
        data = buf.slice(0, used)
    else:
        # The values are the bodies less their meta sections: drop the meta bytes with a
        # byte mask (an index only per meta byte, a few per record; an index per value
        # byte would take 8 bytes of memory for each one).
        raw_u8 = np.frombuffer(buf, np.uint8, used)
        meta_offsets = np.zeros(n + 1, np.int64)
        meta_offsets[1:] = np.cumsum(meta_len)
        keep = np.ones(used, bool)
        keep[
            np.arange(int(meta_offsets[-1]), dtype=np.int64) + np.repeat(pos - meta_offsets[:-1], meta_len)
        ] = False
        data = pa.py_buffer(raw_u8[keep])
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(value_offsets), data])
    ts_ms = r["timestamp_ms"].astype(np.int64)
    ts_type = np.full(n, LOG_APPEND_TIME, np.int32)
    key_col: pa.Array = pa.nulls(n, pa.binary())
    header_col: pa.Array = _empty_lists(n)
    if has_meta:
        # Timestamp-only metas are decoded with numpy; the rest (keys, headers) in Python.
        ts_only = np.zeros(n, bool)
        cand = np.flatnonzero(meta_len == _TS_ONLY_META)
        if len(cand):
            heads = raw_u8[pos[cand][:, None] + np.arange(_TS_ONLY_META)]
            ok = (heads[:, 0] == 1) & (heads[:, 1] == 2) & ~heads[:, 10:14].any(axis=1)
            ts_only[cand[ok]] = True
            ts_ms[cand[ok]] = np.ascontiguousarray(heads[ok, 2:10]).view("<i8").ravel()
            ts_type[cand[ok]] = CREATE_TIME
        rest = np.flatnonzero((meta_len > 0) & ~ts_only)
        if len(rest):
            keys: list[bytes | None] = [None] * n
            headers: list[list[dict[str, Any]]] = [[] for _ in range(n)]
            raw = memoryview(buf)
            nulls = np.zeros(n, bool)
            for i in rest:
                p = int(pos[i])
                meta = bytes(raw[p : p + int(meta_len[i])])
                key, hdrs, produced_ts = decode_meta(meta)
                nulls[i] = value_is_null(meta)
                keys[i] = key
                headers[i] = [{"key": k, "value": v} for k, v in hdrs]
                if produced_ts is not None:
                    ts_ms[i] = produced_ts
                    ts_type[i] = CREATE_TIME
            key_col = pa.array(keys, pa.binary())
            header_col = pa.array(headers, pa.list_(HEADER_TYPE))
            if nulls.any():  # null values (Kafka tombstones) are null in the value column
                valid = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
                bufs = [valid, pa.py_buffer(value_offsets), data]
                values = pa.Array.from_buffers(pa.binary(), n, bufs, int(nulls.sum()))
    gid = pa.array(r["gid"].astype(np.int64)) if gid_known else pa.nulls(n, pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            key_col,
            values,
            _repeated_string(topic, n),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(r["offset"].astype(np.int64)),
            pa.array(ts_ms * 1000, pa.timestamp("us", tz="UTC")),
            pa.array(ts_type),
            header_col,
            gid,
        ],
        schema=ARROW_SCHEMA,
    )


def _repeated_string(s: str, n: int) -> pa.Array:
    raw = s.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _empty_lists(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_TYPE))


def records_to_batch(topic: str, partition: int, records: Sequence[Record]) -> pa.RecordBatch:
    """The portable path: Record objects from the public API to one batch.

    Record.timestamp_ms does not say who set it, so a record with meta (key or headers)
    counts as CreateTime here; the fast path knows exactly."""
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            _repeated_string(topic, n),
            pa.array(np.full(n, partition, np.int32)),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp_ms * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            pa.array(
                [CREATE_TIME if (r.key is not None or r.headers) else LOG_APPEND_TIME for r in records],
                pa.int32(),
            ),
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records], pa.list_(HEADER_TYPE)
            ),
            pa.array([r.gid for r in records], pa.int64()),
        ],
        schema=ARROW_SCHEMA,
    )
