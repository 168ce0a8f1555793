"""The v2 record-batch codec, checked against kio's independent reader."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch

from walfs.wire.record_batch import (
    CRC_START,
    BatchError,
    UnsupportedCompression,
    WireRecord,
    batch_end,
    decode_batches,
    encode_batch,
    encode_records_for_test,
    set_header_field,
)


@dataclass
class Rec:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes | None]]


Row = tuple[bytes | None, bytes, list[tuple[str, bytes | None]], int]

records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
        st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(records_st, st.integers(0, 2**40))
def test_fetch_batches_read_back_with_kio(rows: list[Row], base: int) -> None:
    recs = [Rec(base + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(rows)]
    data = encode_batch(recs)
    batch, size = read_batch(data, 0)  # kio checks the CRC-32C and all lengths
    assert size == len(data)
    assert [r.offset for r in batch.records] == [r.offset for r in recs]
    assert [(r.key, r.value) for r in batch.records] == [(r.key, r.value) for r in recs]
    assert [[(h.key, h.value) for h in r.headers] for r in batch.records] == [
        [(k.encode(), v) for k, v in r.headers] for r in recs
    ]
    assert batch.max_timestamp == max(r.timestamp_ms for r in recs)


@settings(max_examples=100, deadline=None)
@given(records_st, st.sampled_from([0, 1]))
def test_produce_batches_decode(rows: list[Row], codec: int) -> None:
    wire = [WireRecord(k, v, h, ts) for k, v, h, ts in rows]
    [batch] = decode_batches(encode_records_for_test(wire, codec=codec))
    assert batch.records == wire


def test_crc_mismatch_and_truncation_are_refused() -> None:
    data = bytearray(encode_records_for_test([WireRecord(b"k", b"v")]))
    with pytest.raises(BatchError):
        decode_batches(bytes(data[:-1]))
    data[-1] ^= 1
    with pytest.raises(BatchError, match="CRC"):
        decode_batches(bytes(data))


def test_unknown_codec_is_reported() -> None:
    data = encode_records_for_test([WireRecord(b"k", b"v")])
    # Set the codec bits to 5 (no such codec) and fix the CRC so only the codec is wrong.
    from crc32c import crc32c

    raw = bytearray(data)
    set_header_field(raw, "attributes", 5)  # codecs 5-7 do not exist
    set_header_field(raw, "crc", crc32c(bytes(raw[CRC_START:])))
    with pytest.raises(UnsupportedCompression):
        decode_batches(bytes(raw))


def test_several_batches_in_one_record_set() -> None:
    a = encode_records_for_test([WireRecord(None, b"a")])
    b = encode_records_for_test([WireRecord(None, b"b"), WireRecord(None, b"c")])
    assert [r.value for bt in decode_batches(a + b) for r in bt.records] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("base, count", [(0, 1), (0, 37), (1_000_000, 5)])
def test_batch_end_is_the_offset_after_the_last_record(base: int, count: int) -> None:
    records = [WireRecord(None, b"v%d" % i, [], 1) for i in range(count)]
    batch = encode_records_for_test(records, base_offset=base)
    assert batch_end(batch) == base + count
    assert batch_end(memoryview(batch + b"trailing")) == base + count  # only the first batch is read
    with pytest.raises(BatchError, match="truncated"):
        batch_end(batch[:60])
