"""The Kafka listener's C codecs against the Python reference code, byte for byte: the
fetch encoders (walfs_read_kafka_batch straight from the log, and walfs_kafka_batch
after a read, the cluster engine's way) and the produce decoder (walfs_kafka_records),
on records with and without keys, headers and timestamps, and on damaged input."""

import array
import random
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

import walfs
from walfs.engine.records import encode_meta, producer_of, with_producer
from walfs.wire.batch_codec import decode_kafka_records, read_as_kafka_batch
from walfs.wire.record_batch import (
    BATCH_OVERHEAD,
    CRC_START,
    BatchError,
    WireRecord,
    _batches,
    _decode_records,
    decode_batches,
    decode_for_append,
    encode_batch,
    encode_records_for_test,
    set_header_field,
)


def test_c_batches_equal_the_python_encoding(open_wal):
    w = open_wal()
    rnd = random.Random(7)
    w.append_lines("t", b"plain one\nplain two\n\n")  # no meta at all, an empty value
    for i in range(300):
        key = None if i % 3 == 0 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40)))
        headers = [
            (
                rnd.choice(["h", "trace-id", "é", ""]),
                None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(0, 300)),
            )
            for _ in range(rnd.randrange(0, 4))
        ]
        ts = None if i % 5 == 0 else 1_700_000_000_000 + rnd.randrange(-(10**6), 10**6)
        value = rnd.randbytes(rnd.choice([0, 1, 63, 64, 127, 128, 5000, 20000]))
        if i % 11 == 0:
            value = None  # a tombstone: fetched as a null value (length -1)
        w.append("t", [(key, value, headers, ts)])
    high = w.info("t").high_watermark
    for offset, n, max_bytes in [
        (0, 1, 1 << 20),
        (0, 500, 1 << 20),
        (1, 7, 100),
        (150, 1000, 50_000),
        (high - 1, 10, 1),
    ]:
        read = w.read_records("t", offset, max_records=n, max_bytes=max_bytes)
        # After a read (the cluster engine's way): the same records as the read, encoded.
        assert read_as_kafka_batch(w.engine, "t", 0, offset, n, max_bytes) == encode_batch(read)
        # Straight from the log: the same encoding of the records it took. It stops at
        # the read's limits, or earlier where the encoded batch would pass max_bytes
        # (Kafka's own measure); never below one record.
        got = bytes(w.engine.read_kafka_batch("t", 0, offset, n, max_bytes))
        (batch,) = decode_batches(got)
        k = len(batch.records)
        assert 1 <= k <= len(read), (offset, n, max_bytes)
        assert got == encode_batch(read[:k]), (offset, n, max_bytes)
        if k < len(read):
            assert len(got) <= max_bytes + BATCH_OVERHEAD < len(encode_batch(read[: k + 1]))
        # And what a consumer decodes from it is what was appended.
        assert [(r.key, r.value, list(r.headers)) for r in read[:k]] == [
            (b.key, b.value, b.headers) for b in batch.records
        ]
    assert w.engine.read_kafka_batch("t", 0, high, 10, 1 << 20) == b""
    assert read_as_kafka_batch(w.engine, "t", 0, high, 10, 1 << 20) == b""


def test_the_batch_limit_is_counted_in_kafkas_encoding(open_wal):
    """Small plain values grow in Kafka's encoding (a length, attributes, two deltas, a
    null key, a header count per record): the one-pass read stops where the batch would
    pass max_bytes, as Kafka counts max.partition.fetch.bytes, not where the stored
    bodies would."""
    w = open_wal()
    values = [b"%010d" % i for i in range(1000)]
    w.append("t", values)
    for max_bytes in (1, 100, 1000, 5000):
        got = bytes(w.engine.read_kafka_batch("t", 0, 0, 10_000, max_bytes))
        (batch,) = decode_batches(got)
        k = len(batch.records)
        assert [r.value for r in batch.records] == values[:k]
        read = w.read_records("t", 0, max_records=10_000, max_bytes=max_bytes)
        assert got == encode_batch(read[:k])
        assert k == 1 or len(got) <= max_bytes + BATCH_OVERHEAD, max_bytes
        assert len(encode_batch(read[: k + 1])) > max_bytes + BATCH_OVERHEAD, max_bytes  # one more: too big
        if max_bytes >= 100:  # the stored bodies alone would have allowed more
            assert k < len(read)


def test_a_meta_section_that_does_not_parse_is_refused(open_wal):
    w = open_wal()
    w.append("t", [(b"k", b"good", [], None)])
    bad_meta = b"\x01\x01\xff\xff\x00\x00"  # a key longer than the section
    w.engine.append("t", 0, bad_meta + b"value", array.array("I", [len(bad_meta)]), array.array("I", [5]))
    # Straight from the log: the good record before it is served, then the bad one refused.
    (batch,) = decode_batches(bytes(w.engine.read_kafka_batch("t", 0, 0, 10, 1 << 20)))
    assert [(r.key, r.value) for r in batch.records] == [(b"k", b"good")]
    with pytest.raises(ValueError, match="meta"):
        w.engine.read_kafka_batch("t", 0, 1, 10, 1 << 20)
    with pytest.raises(ValueError, match="meta"):
        read_as_kafka_batch(w.engine, "t", 0, 0, 10, 1 << 20)


def test_common_records_among_others_equal_the_python_encoding(open_wal):
    """The common record (no key, no header, a value: a stored meta that is empty or holds
    only the producer's timestamp) is encoded with those known (kafka_batch.c put_record):
    byte for byte what the general path and the Python reference give, in runs of its own
    (four at a time, as the read checks them) and between keyed, headed and null records,
    with one- to three-byte varints (negative and large timestamp deltas, long values), and
    long records, whose next bytes the read prefetches, across runs."""
    w = open_wal()
    rnd = random.Random(20)
    base = 1_700_000_000_000
    for burst in range(40):
        rows = []
        for i in range(rnd.choice([1, 3, 4, 5, 9, 17])):
            value = rnd.randbytes(rnd.choice([0, 1, 63, 64, 100, 127, 128, 300, 1024, 5000, 20000]))
            ts = rnd.choice([None, base, base - 5000, base + 10**9, 0, 1 << 40])
            if burst % 4 == 3 and i % 2:  # a keyed, headed or null record between common ones
                others = [(b"k", value, [], ts), (None, value, [("h", b"x")], ts), (None, None, [], ts)]
                rows.append(rnd.choice(others))
            else:
                rows.append((None, value, [], ts))
        w.append("t", rows)
    w.append_lines("t", b"no meta\nat all\n")
    high = w.info("t").high_watermark
    for offset in range(0, high, 7):
        for n, max_bytes in [(1, 1), (4, 1 << 20), (1000, 3000), (1000, 1 << 20)]:
            got = bytes(w.engine.read_kafka_batch("t", 0, offset, n, max_bytes))
            (batch,) = decode_batches(got)
            k = len(batch.records)
            read = w.read_records("t", offset, max_records=k)
            assert len(read) == k
            assert got == encode_batch(read), (offset, n, max_bytes)


@pytest.mark.parametrize(
    "meta, served",
    [
        (b"\x02\x02" + struct.pack("<q", 123) + b"\0\0\0\0", True),  # version 2: the general path
        (b"\x01\x00\0\0\0\0", True),  # version 1, no flag, no header
        (b"\x01\x02" + struct.pack("<q", 123) + b"\x01\0\0\0", False),  # a header the section lacks
        (b"\x01\x06" + struct.pack("<q", 123) + b"\0\0\0\0", False),  # a null value in version 1
    ],
)
def test_metas_near_the_common_one_take_the_general_path(open_wal, meta: bytes, served: bool):
    """Fourteen bytes like the common meta but not it: parsed in full, served as the
    Python reference reads them, or refused as before."""
    w = open_wal()
    w.append("t", [(None, b"first", [], 5)])
    w.engine.append("t", 0, meta + b"value", array.array("I", [len(meta)]), array.array("I", [5]))
    if served:
        got = bytes(w.engine.read_kafka_batch("t", 0, 0, 10, 1 << 20))
        assert got == encode_batch(w.read_records("t", 0))
        return
    (batch,) = decode_batches(bytes(w.engine.read_kafka_batch("t", 0, 0, 10, 1 << 20)))
    assert [r.value for r in batch.records] == [b"first"]
    with pytest.raises(ValueError, match="meta"):
        w.engine.read_kafka_batch("t", 0, 1, 10, 1 << 20)


def test_a_damaged_long_record_ends_the_batch(wal_dir):
    """1 KiB records (the read prefetches the bytes ahead of them): a flipped byte in one
    stops the batch right before it from any start, and the record itself is refused."""
    from test_kafka_fetch_damage import GEOMETRY, find, flip

    vals = [b"long-%05d-" % i + bytes(rnd % 251 for rnd in range(1014)) for i in range(300)]
    with walfs.Wal(wal_dir, **GEOMETRY) as w:
        for i in range(0, len(vals), 25):
            w.append("t", [(None, v, [], 1_700_000_000_000 + i) for v in vals[i : i + 25]])
    bad = 123
    path, pos = find(Path(wal_dir), b"long-%05d-" % bad)
    flip(path, pos + 700)
    with walfs.Wal(wal_dir, **GEOMETRY) as w:
        for start in (0, 100, 119, 120, 121, 122):
            got = bytes(w.engine.read_kafka_batch("t", 0, start, 1000, 1 << 20))
            (batch,) = decode_batches(got)
            assert [r.value for r in batch.records] == vals[start:bad]
        with pytest.raises(walfs.WalError, match="corrupt"):
            w.engine.read_kafka_batch("t", 0, bad, 1000, 1 << 20)
        (batch,) = decode_batches(bytes(w.engine.read_kafka_batch("t", 0, bad + 1, 1000, 1 << 20)))
        assert batch.records[0].value == vals[bad + 1]


# --- the produce path: walfs_kafka_records against the Python decoder + encode_meta ---

row_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
    st.one_of(st.none(), st.integers(0, 2**41)),
)


def _python_bodies(body: bytes, count: int, base_ts: int) -> tuple[bytes, list[int], list[int]]:
    """What the produce path stored before walfs_kafka_records: the reference."""
    data, metas, values = [], [], []
    for r in _decode_records(body, count, base_ts):
        value = r.value if r.value is not None else b""
        meta = encode_meta(r.key, r.headers, r.timestamp_ms, null_value=r.value is None)
        data.append(meta + value)
        metas.append(len(meta))
        values.append(len(value))
    return b"".join(data), metas, values


def _records_section(rows: list, codec: int = 0) -> tuple[bytes, int, int]:
    wire = [WireRecord(k, v, h, ts) for k, v, h, ts in rows]
    batch = encode_records_for_test(wire, codec=codec)
    ((_pid, _epoch, _seq, base_ts, count, body),) = list(_batches(batch))
    return bytes(body), count, base_ts  # _batches gives a view of the batch


@settings(max_examples=200, deadline=None)
@given(st.lists(row_st, min_size=1, max_size=20), st.sampled_from([0, 1]))
def test_c_produce_decoding_equals_the_python_path(rows: list, codec: int) -> None:
    body, count, base_ts = _records_section(rows, codec)
    data, metas, values = decode_kafka_records(body, count, base_ts)
    assert (data, list(metas), list(values)) == _python_bodies(body, count, base_ts)
    # A producer that sends no timestamps (base timestamp -1): none are stored.
    data, metas, values = decode_kafka_records(body, count, -1)
    assert (data, list(metas), list(values)) == _python_bodies(body, count, -1)


@settings(max_examples=300, deadline=None)
@given(st.lists(row_st, min_size=1, max_size=5), st.data())
def test_c_and_python_decoders_agree_on_damaged_records(rows: list, data: st.DataObject) -> None:
    # Flip, cut or extend the records section: both decoders refuse it, or both read the
    # same records out of it.
    body, count, base_ts = _records_section(rows)
    b = bytearray(body)
    action = data.draw(st.sampled_from(["flip", "cut", "extend", "count"]))
    if action == "flip":
        i = data.draw(st.integers(0, len(b) - 1))
        b[i] = data.draw(st.integers(0, 255))
    elif action == "cut":
        del b[data.draw(st.integers(0, len(b) - 1)) :]
    elif action == "extend":
        b += data.draw(st.binary(min_size=1, max_size=8))
    else:
        count = data.draw(st.integers(0, count + 2))
    try:
        expected = _python_bodies(bytes(b), count, base_ts)
    except (BatchError, UnicodeDecodeError, struct.error):
        with pytest.raises(ValueError):
            decode_kafka_records(bytes(b), count, base_ts)
        return
    got = decode_kafka_records(bytes(b), count, base_ts)
    assert (got[0], list(got[1]), list(got[2])) == expected


def test_produce_with_append_bodies_reads_back(open_wal):
    w = open_wal()
    rows = [(b"k1", b"v1", [("h", b"x")], 1_700_000_000_123), (None, None, [], None), (None, b"", [], 5)]
    body, count, base_ts = _records_section(rows)
    produced = decode_for_append(encode_records_for_test([WireRecord(*r) for r in rows]))
    assert produced is not None
    assert w.engine.append("t", 0, produced.data, produced.meta_lens, produced.value_lens) == 0
    got = w.read_records("t", 0)
    assert [(r.key, r.value, list(r.headers)) for r in got] == [
        (b"k1", b"v1", [("h", b"x")]),
        (None, None, []),  # a tombstone stays null
        (None, b"", []),  # an empty value stays empty
    ]
    with pytest.raises(ValueError):
        w.engine.append("t", 0, b"xx", array.array("I", [0]), array.array("I", [1]))


@pytest.mark.parametrize(
    "rows",
    [
        [(b"k", b"v" * 20000, [("h", b"x")], 1_700_000_000_123), (None, b"second", [], 5)],
        [(None, b"no meta at all", [], None), (None, b"x", [], None)],  # an empty first meta
        [(None, None, [], 7)],  # a tombstone: a version-2 meta already
    ],
)
@pytest.mark.parametrize("batches", [1, 2])
def test_producer_section_added_in_the_room_before_the_bodies(rows: list, batches: int) -> None:
    # add_producer writes the first record's grown meta section into the room the split
    # left before the bodies: the same bytes as with_producer on a copy, nothing after it
    # moved, and the section reads back (producer_of).
    records = [WireRecord(*r) for r in rows]
    untimed = all(r[3] is None for r in rows)
    batch = encode_records_for_test(records, producer=(42, 3, 100))
    if untimed:  # a producer that sends no timestamps: base timestamp -1, empty metas
        batch = _untimed(batch)
    produced = decode_for_append(batch * batches)
    assert produced is not None
    before = bytes(produced.data)
    m0, n = produced.meta_lens[0], len(produced.meta_lens)
    if untimed:
        assert m0 == 0
    produced.add_producer((42, 3, 100, n))
    meta = with_producer(before[:m0], (42, 3, 100, n))
    assert bytes(produced.data) == meta + before[m0:]
    assert produced.meta_lens[0] == len(meta)
    assert producer_of(meta) == (42, 3, 100, n)


def _untimed(batch: bytes) -> bytes:
    """The batch with base timestamp -1 (the records' deltas are 0), CRC made again."""
    b = bytearray(batch)
    set_header_field(b, "base_timestamp", -1)
    set_header_field(b, "crc", crc32c(bytes(b[CRC_START:])))
    return bytes(b)


def test_c_and_python_agree_on_the_batch_header_size() -> None:
    """The header size has one home per language: record_batch.py's struct, and
    csrc/walfs_kafka.h's WALFS_KAFKA_BATCH_HEAD (kafka_batch.c's layout)."""
    from walfs._core import lib

    assert lib.WALFS_KAFKA_BATCH_HEAD == BATCH_OVERHEAD
