"""The fetch path's C batch encoder (walfs_kafka_batch) against the Python reference
encoder, byte for byte, on records with and without keys, headers and timestamps."""

import array
import random

import pytest

from walfs.kafka.record_batch import decode_batches, encode_batch, read_batch


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
        w.append_records("t", [(key, value, headers, ts)])
    high = w.high_watermark("t")
    for offset, n, max_bytes in [
        (0, 1, 1 << 20),
        (0, 500, 1 << 20),
        (1, 7, 100),
        (150, 1000, 50_000),
        (high - 1, 10, 1),
    ]:
        expected = encode_batch(w.read_records("t", offset, max_records=n, max_bytes=max_bytes))
        got = read_batch(w, "t", offset, 0, n, max_bytes)
        assert got == expected, (offset, n, max_bytes)
        # And what a consumer decodes from it is what was appended.
        (batch,) = decode_batches(got)
        recs = w.read_records("t", offset, max_records=n, max_bytes=max_bytes)
        assert [(r.key, r.value, list(r.headers)) for r in recs] == [
            (b.key, b.value, b.headers) for b in batch.records
        ]
    assert read_batch(w, "t", high, 0, 10, 1 << 20) == b""


def test_a_meta_section_that_does_not_parse_is_refused(open_wal):
    w = open_wal()
    bad_meta = b"\x01\x01\xff\xff\x00\x00"  # a key longer than the section
    w._append("t", 0, [bad_meta + b"value"], array.array("I", [len(bad_meta)]), array.array("I", [5]))
    with pytest.raises(ValueError, match="meta"):
        read_batch(w, "t", 0, 0, 10, 1 << 20)
