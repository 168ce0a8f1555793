"""The sink's bulk encoder (walfs.spark.sink_rows): Arrow columns to the stored record
layout without Python per row. Checked byte for byte against the one reference encoder,
engine_api.encode_records, on rows with and without keys, headers (null values, non-ASCII
names), empty values, the streaming marker, and tables of several chunks and slices;
then read back from a real WAL, and encoded into Kafka record batches from their pieces
as the fetch encoder encodes their joined bodies."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c

import walfs
from walfs.engine.rules import encode_records
from walfs.spark.columnar import REC_DTYPE
from walfs.spark.sink import STAGED_SCHEMA, normalize
from walfs.spark.sink_remote import kafka_batch
from walfs.spark.sink_rows import ROW_OVERHEAD, Chunk, cuts, encode_chunk, row_costs
from walfs.spark.sink_target import LocalTarget
from walfs.wire.batch_codec import encode_kafka_batch, encode_kafka_batch_pieces
from walfs.wire.record_batch import CRC_START, header_field

MARKER = ("walfs.sink", b"q:3:0:2")


def random_rows(seed: int, n: int, keys: float, headers: float) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        key = rng.randbytes(rng.randrange(6)) if rng.random() < keys else None
        hs = []
        if rng.random() < headers:
            for j in range(rng.randrange(1, 4)):
                value = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(5))
                hs.append({"key": f"h{j}" + "é" * rng.randrange(3), "value": value})
        rows.append(
            {
                "topic": "t",
                "partition": 0,
                "key": key,
                "value": rng.randbytes(rng.randrange(40)),
                "headers": hs,
            }
        )
    return rows


def staged(rows: list[dict[str, Any]], pieces: int = 3) -> pa.Table:
    """The rows as the driver gets them: a table of several record batches."""
    b = normalize(pa.RecordBatch.from_pylist(rows, schema=STAGED_SCHEMA), None)
    step = max(1, len(rows) // pieces)
    return pa.Table.from_batches([b.slice(i, step) for i in range(0, len(rows), step)], STAGED_SCHEMA)


def reference(t: pa.Table, marker: tuple[str, bytes] | None) -> tuple[bytes, list[int], list[int]]:
    recs = [
        (r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]], None) for r in t.to_pylist()
    ]
    if marker is not None:
        k, v, h, ts = recs[0]
        recs[0] = (k, v, [*h, marker], ts)
    data, metas, values = encode_records(recs)
    return data, list(metas), list(values)


@pytest.mark.parametrize(
    ("keys", "headers"), [(0.0, 0.0), (1.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.5, 0.5), (1.0, 1.0)]
)
@pytest.mark.parametrize("marker", [None, MARKER], ids=["batch", "marked"])
def test_chunks_are_byte_for_byte_what_encode_records_writes(
    keys: float, headers: float, marker: tuple[str, bytes] | None
) -> None:
    t = staged(random_rows(int(keys * 10 + headers * 100), 300, keys, headers))
    for part in (t, t.slice(0, 1), t.slice(97, 150), t.slice(299, 1)):
        chunk = encode_chunk(part, marker)
        data, metas, values = reference(part, marker)
        assert joined(chunk) == data
        assert list(chunk.meta_lens) == metas
        assert list(chunk.value_lens) == values
        assert len(chunk) == part.num_rows


def test_costs_count_every_byte_and_cuts_fill_each_chunk_up_to_the_limit() -> None:
    rows = random_rows(7, 200, 0.5, 0.5)
    t = staged(rows)
    costs = row_costs(t)
    for r, c in zip(rows, costs, strict=True):
        hs = sum(len(h["key"].encode()) + len(h["value"] or b"") + 8 for h in r["headers"])
        assert c == ROW_OVERHEAD + len(r["value"]) + len(r["key"] or b"") + hs
    for limit in (1, 100, 500, 10**9):
        runs = list(cuts(costs, limit))
        assert runs[0][0] == 0 and runs[-1][1] == len(rows)
        assert all(a < b and b == c for (a, b), (c, _) in zip(runs, runs[1:], strict=False))
        for a, b in runs:
            # Within the limit (a single row may exceed it alone), and the next row did not fit.
            assert b - a == 1 or costs[a:b].sum() <= limit
            assert b == len(rows) or costs[a : b + 1].sum() > limit


def test_chunks_read_back_from_a_wal(tmp_path: Path) -> None:
    rows = random_rows(11, 500, 0.5, 0.5)
    t = staged(rows)
    target = LocalTarget(walfs.open.open_engine(str(tmp_path / "data")))
    try:
        firsts = target.append("t", 0, [encode_chunk(t.slice(a, b - a)) for a, b in cuts(row_costs(t), 4000)])
    finally:
        target.close()
    assert firsts[0] == 0 and len(firsts) > 3
    with walfs.Wal(tmp_path / "data", read_only=True) as wal:
        got = wal.read_records("t", 0, 0, 1000)
    assert [(r.key, r.value, list(r.headers)) for r in got] == [
        (r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in rows
    ]


def test_a_chunk_with_no_key_or_header_is_the_value_column_itself() -> None:
    """Plain rows cost no copy: the chunk's data is a view of the value column's buffer."""
    t = staged(
        [{"topic": "t", "partition": 0, "key": None, "value": b"v%d" % i, "headers": []} for i in range(50)],
        1,
    )
    chunk = encode_chunk(t)
    assert len(chunk.pieces) == 1 and isinstance(chunk.pieces[0], pa.Buffer)
    assert chunk.pieces[0].address == t.column("value").chunks[0].buffers()[2].address
    assert not np.frombuffer(chunk.meta_lens, np.uint32).any()


@pytest.mark.parametrize(("keys", "headers"), [(0.0, 0.0), (0.5, 0.5)], ids=["plain", "keyed"])
def test_a_marked_chunk_is_appended_from_its_pieces_without_joining_them(
    tmp_path: Path, keys: float, headers: float
) -> None:
    """The marker's meta section does not make a chunk copy its values: a plain chunk's
    pieces are the marker's meta, then the value column's own buffers (one per batch);
    every chunk reads back from a WAL (LogEngine.append_pieces) as encode_records writes
    it, the marker on its first row."""
    rows = random_rows(5, 240, keys, headers)
    t = staged(rows, 4)
    chunk = encode_chunk(t, MARKER)
    assert len(chunk.pieces) > 1
    if not keys:
        # each batch's values where its slice of the shared buffer starts: views, no copy
        starts = [
            c.buffers()[2].address + int(np.frombuffer(c.buffers()[1], np.int32)[c.offset])
            for c in t.column("value").chunks
        ]
        assert [p.address for p in chunk.pieces[1:]] == starts
    assert chunk.nbytes == sum(chunk.meta_lens) + sum(chunk.value_lens)
    data, metas, values = reference(t, MARKER)
    assert joined(chunk) == data
    target = LocalTarget(walfs.open.open_engine(str(tmp_path / "data")))
    try:
        assert target.append("t", 0, [chunk, encode_chunk(t.slice(7, 100), MARKER)]) == [0, len(rows)]
    finally:
        target.close()
    with walfs.Wal(tmp_path / "data", read_only=True) as wal:
        got = wal.read_records("t", 0, 0, 1000)
    expect = [(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in rows]
    expect += expect[7:107]
    expect[0][2].append(MARKER)
    expect[len(rows)] = (expect[len(rows)][0], expect[len(rows)][1], [*expect[len(rows)][2], MARKER])
    assert [(r.key, r.value, list(r.headers)) for r in got] == expect


def joined(chunk: Chunk) -> bytes:
    """The chunk's bodies in one buffer: its pieces joined."""
    return b"".join(bytes(memoryview(p)) for p in chunk.pieces)


def fetch_encoded(chunk: Chunk, timestamp_ms: int) -> bytes:
    """The chunk as the listener's fetch encoder writes it (walfs_kafka_batch over one
    buffer of the joined bodies): the sink's encoder before it took pieces."""
    n = len(chunk)
    recs = np.zeros(n, REC_DTYPE)
    recs["offset"] = np.arange(n, dtype=np.uint64)
    recs["timestamp_ms"] = timestamp_ms
    recs["meta_len"] = np.frombuffer(chunk.meta_lens, np.uint32)
    recs["value_len"] = np.frombuffer(chunk.value_lens, np.uint32)
    sizes = recs["meta_len"].astype(np.uint64) + recs["value_len"]
    recs["buf_pos"][1:] = np.cumsum(sizes)[:-1]
    return bytes(encode_kafka_batch(joined(chunk), recs, n))


@pytest.mark.parametrize(
    ("keys", "headers"), [(0.0, 0.0), (0.5, 0.5), (1.0, 1.0)], ids=["plain", "some", "all"]
)
def test_a_chunk_goes_to_a_kafka_batch_from_its_pieces_as_from_its_joined_bodies(
    keys: float, headers: float
) -> None:
    """Through a daemon, a chunk's pieces (the marker's meta, then each Arrow batch's
    values; the first record spanning two of them) are encoded as they are
    (walfs_kafka_batch_pieces): the same bytes as the fetch encoder over the joined
    bodies, a valid batch (its CRC-32C checked)."""
    rows = random_rows(int(keys * 10 + headers * 100) + 3, 400, keys, headers)
    t = staged(rows, 5)
    ts = 1_700_000_000_123
    for part, marker in ((t, MARKER), (t, None), (t.slice(0, 1), MARKER), (t.slice(81, 200), MARKER)):
        chunk = encode_chunk(part, marker)
        got = kafka_batch(chunk, ts)
        assert bytes(got) == fetch_encoded(chunk, ts)
        assert len(got) == len(fetch_encoded(chunk, ts))
        # baseOffset, batchLength, records; the CRC-32C (Castagnoli) from attributes on
        assert header_field(got, "record_count") == part.num_rows
        assert header_field(got, "crc") == crc32c(bytes(got[CRC_START:]))
    # Pieces that do not hold exactly the records' bodies are refused.
    chunk = encode_chunk(t, MARKER)
    short = (*chunk.pieces[:-1], memoryview(chunk.pieces[-1])[:-1])
    with pytest.raises(ValueError, match="exactly the records' bodies"):
        encode_kafka_batch_pieces(short, chunk.meta_lens, chunk.value_lens, ts)
    with pytest.raises(ValueError, match="exactly the records' bodies"):
        encode_kafka_batch_pieces((*chunk.pieces, b"x"), chunk.meta_lens, chunk.value_lens, ts)
