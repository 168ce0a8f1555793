"""The sink's rows as the engine stores them, built from Arrow columns in bulk.

The rows of one stream (a table in sink.STAGED_SCHEMA: topic, partition, key, value,
headers) become chunks in the stored layout LogEngine.append takes: bodies (meta section
|| value) back to back, one meta length and one value length per record. The meta
section is walfs.engine.records.encode_meta's: empty for a row with no key and no headers (the
body is the value); else u8 version 1 | u8 flags (1: key) | [u32 key_len, key] | u32
n_headers | n x (u16 name_len, name, i32 value_len or -1, value).

Everything is built by Arrow kernels (element-wise binary joins) and numpy over whole
columns, never by Python per row: rows without key and headers cost nothing (the value
column's data buffer already is the bodies), others one join. Only the first row of a
chunk that carries the streaming sink's marker header is encoded in Python.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from walfs.engine.records import Header, encode_meta

# What a row costs in a chunk beyond its key, value and header bytes, at most: its
# framing in a Kafka record (length, attributes, timestamp and offset deltas, key and
# value lengths, header count: varints) ...
ROW_OVERHEAD = 32
# ... and per header (its name's and value's length varints).
HEADER_OVERHEAD = 8


@dataclass(frozen=True)
class Chunk:
    """Records in the stored layout, appended as one atomic batch: their bodies back to
    back in the concatenation of `pieces` (a body may span pieces), which are appended as
    they are (LogEngine.append_pieces), never joined on the local path."""

    pieces: tuple[bytes | memoryview | pa.Buffer, ...]
    meta_lens: array  # array("I")
    value_lens: array  # array("I")

    def __len__(self) -> int:
        return len(self.meta_lens)

    @property
    def nbytes(self) -> int:
        """The bodies' bytes."""
        return sum(memoryview(p).nbytes for p in self.pieces)


def _u32(a: np.ndarray) -> array:
    out = array("I")
    out.frombytes(np.ascontiguousarray(a, "<u4").tobytes())
    return out


def _offsets(col: pa.Array) -> np.ndarray:
    """The int32 offsets of a binary array (n + 1 of them, its slice's)."""
    buf = col.buffers()[1]
    return (
        np.frombuffer(buf, np.int32, len(col) + 1, col.offset * 4)
        if buf is not None
        else np.zeros(1, np.int32)
    )


def _lengths(col: pa.Array) -> np.ndarray:
    """Byte length of each element of a binary array (0 for nulls), int64."""
    return np.asarray(pc.fill_null(pc.binary_length(col), 0), np.int64) if len(col) else np.zeros(0, np.int64)


def _one(col: pa.ChunkedArray) -> pa.Array:
    """The column as one array (a copy only when it has several chunks)."""
    return col.chunks[0] if col.num_chunks == 1 else col.combine_chunks()


def _fixed(values: np.ndarray, dtype: str) -> pa.Array:
    """Each element's little-endian bytes as one binary value."""
    raw = np.ascontiguousarray(values, dtype)
    offsets = np.arange(len(raw) + 1, dtype=np.int32) * raw.itemsize
    return pa.Array.from_buffers(pa.binary(), len(raw), [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


def _data(col: pa.Array) -> pa.Buffer:
    """The bytes of a binary array's values, back to back (a view, no copy)."""
    off = _offsets(col)
    buf = col.buffers()[2]
    if buf is None:
        return pa.py_buffer(b"")
    return buf.slice(int(off[0]), int(off[-1] - off[0]))


def _column_lengths(col: pa.ChunkedArray) -> np.ndarray:
    """_lengths of a table column, chunk by chunk (no copy of the values)."""
    parts = [_lengths(c) for c in col.chunks]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def row_costs(t: pa.Table) -> np.ndarray:
    """What each row of t takes in a chunk, at most (bytes, int64): its key, value and
    header bytes, and their framing in a Kafka record batch (ROW_OVERHEAD,
    HEADER_OVERHEAD): what chunk limits are counted in."""
    n = t.num_rows
    cost = np.full(n, ROW_OVERHEAD, np.int64)
    cost += _column_lengths(t.column("value"))
    cost += _column_lengths(t.column("key"))
    headers = _one(t.column("headers"))
    flat = headers.flatten()
    if len(flat):
        parents = np.asarray(pc.list_parent_indices(headers), np.int64)
        per = (
            _lengths(pc.cast(flat.field("key"), pa.binary()))
            + _lengths(flat.field("value"))
            + HEADER_OVERHEAD
        )
        cost += np.bincount(parents, weights=per, minlength=n).astype(np.int64)
    return cost


def cuts(costs: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of consecutive runs of rows whose costs add up to at most `limit`
    (at least one row each)."""
    n = len(costs)
    total = np.concatenate([[0], np.cumsum(costs)])
    start = 0
    while start < n:
        stop = int(np.searchsorted(total, total[start] + limit, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        yield start, stop
        start = stop


def _metas(key: pa.Array, headers: pa.Array) -> pa.Array | None:
    """Each row's meta section (binary, empty for none); None when no row has one."""
    n = len(key)
    has_key = np.asarray(pc.is_valid(key), bool) if n else np.zeros(0, bool)
    counts = (
        np.asarray(pc.fill_null(pc.list_value_length(headers), 0), np.int64) if n else np.zeros(0, np.int64)
    )
    need = has_key | (counts > 0)
    if not need.any():
        return None
    head = _fixed(np.where(has_key, 0x0101, 0x0001), "<u2")  # version 1, flags (1: key)
    key_part = pc.if_else(
        pa.array(has_key),
        pc.binary_join_element_wise(_fixed(_lengths(key), "<u4"), pc.fill_null(key, b""), b""),
        pa.scalar(b"", pa.binary()),
    )
    flat = headers.flatten()
    if len(flat):
        names = pc.cast(flat.field("key"), pa.binary())
        hv = flat.field("value")
        hv_len = np.where(np.asarray(pc.is_valid(hv), bool), _lengths(hv), -1)
        entries = pc.binary_join_element_wise(
            _fixed(_lengths(names), "<u2"), names, _fixed(hv_len, "<i4"), pc.fill_null(hv, b""), b""
        )
        offsets = np.zeros(n + 1, np.int32)
        offsets[1:] = np.cumsum(counts)
        blob = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), entries), b"")
    else:
        blob = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")]
        )
    meta = pc.binary_join_element_wise(head, key_part, _fixed(counts, "<u4"), blob, b"")
    return pc.if_else(pa.array(need), meta, pa.scalar(b"", pa.binary()))


def _values_chunk(value: pa.ChunkedArray, marker: Header | None) -> Chunk:
    """Rows with no key and no headers: the bodies are the values, the pieces the data
    buffers of the value column's chunks, after the marker's meta section when given: no
    copy."""
    value_lens = _column_lengths(value)
    meta_lens = np.zeros(len(value_lens), np.int64)
    pieces: list[bytes | memoryview | pa.Buffer] = [_data(c) for c in value.chunks if len(c)]
    if marker is not None and len(value_lens):
        meta0 = encode_meta(None, [marker], None)
        pieces.insert(0, meta0)
        meta_lens[0] = len(meta0)
    return Chunk(tuple(pieces) or (b"",), _u32(meta_lens), _u32(value_lens))


def encode_chunk(t: pa.Table, marker: Header | None = None) -> Chunk:
    """The rows of t (one stream's, in order) as one chunk; `marker`, when given, is
    added to the first row's headers."""
    key, headers = _one(t.column("key")), _one(t.column("headers"))
    metas = _metas(key, headers)
    if metas is None:
        return _values_chunk(t.column("value"), marker)
    value = _one(t.column("value"))
    value_lens = np.diff(_offsets(value))
    meta_lens = np.diff(_offsets(metas))
    data = _data(pc.binary_join_element_wise(metas, value, b""))
    pieces: tuple[bytes | memoryview | pa.Buffer, ...] = (data,)
    if marker is not None and len(value):
        first = t.slice(0, 1).to_pylist()[0]
        hs: list[Header] = [(h["key"], h["value"]) for h in first["headers"] or ()]
        meta0 = encode_meta(first["key"], [*hs, marker], None)
        skip = int(meta_lens[0] + value_lens[0])
        pieces = (meta0 + first["value"], memoryview(data)[skip:])
        meta_lens = meta_lens.copy()
        meta_lens[0] = len(meta0)
    return Chunk(pieces, _u32(meta_lens), _u32(value_lens))


# The streaming sink's marker header (walfs/spark/sink.py: exactly once) and the most row
# bytes of one chunk (a target's own limit may be lower: SinkTarget.chunk_bytes).
MARKER = "walfs.sink"
CHUNK_BYTES = 32 << 20


def split_streams(table: pa.Table) -> Iterator[tuple[str, int, pa.Table]]:
    """(topic, partition, its rows in their order) for every stream the rows name."""
    if table.num_rows == 0:
        return
    topics = pc.unique(table.column("topic"))
    parts = pc.min_max(table.column("partition"))
    if len(topics) == 1 and parts["min"] == parts["max"]:
        # one stream (the usual case): its rows are the table
        yield topics[0].as_py(), parts["min"].as_py(), table
        return
    pairs = table.select(["topic", "partition"]).group_by(["topic", "partition"]).aggregate([])
    for topic, partition in sorted(
        zip(pairs.column("topic").to_pylist(), pairs.column("partition").to_pylist(), strict=True)
    ):
        mask = pc.and_(pc.equal(table.column("topic"), topic), pc.equal(table.column("partition"), partition))
        yield topic, partition, table.filter(mask)


def chunk_limit(own: int | None, reserve: int = 0) -> int:
    """The most row bytes (row_costs) of one chunk: CHUNK_BYTES or the target's
    own limit (SinkTarget.chunk_bytes), less `reserve` (the marker header)."""
    return max(1, min(CHUNK_BYTES, own if own is not None else CHUNK_BYTES) - reserve)


def marker_reserve(prefix: str) -> int:
    """What the marker header "<prefix><chunk>:<rows>" (two numbers of at most 20
    digits) takes of a chunk's limit: its name, value and framing."""
    return len(MARKER) + len(prefix.encode()) + 41 + HEADER_OVERHEAD


def headed(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Sequence[Header]]]:
    """(offset, headers) of the records in the batches (walfs.spark.schema) that have
    headers; only those rows reach Python."""
    for b in batches:
        counts = pc.list_value_length(b.column("headers"))
        rows = b.filter(pc.greater(pc.fill_null(counts, 0), 0))
        if rows.num_rows == 0:
            continue
        offsets = rows.column("offset").to_pylist()
        for off, hs in zip(offsets, rows.column("headers").to_pylist(), strict=True):
            yield off, [(h["key"], h["value"]) for h in hs]
