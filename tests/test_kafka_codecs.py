"""Kafka's four codecs on produce (issue 12): gzip, snappy (raw and the Java client's
xerial framing), lz4 (frame) and zstd decode to the records the uncompressed batch
holds; a "bomb" in each codec is refused at the cap with CORRUPT_MESSAGE and the
listener goes on serving; librdkafka producing with each codec round-trips."""

from __future__ import annotations

import struct
from pathlib import Path

import cramjam
import pytest
from confluent_kafka import KafkaError, Producer
from crc32c import crc32c
from kafka_harness import consume, listener, rdkafka_consumer

from walfs.wire.compression import (
    CODEC_NAMES,
    MAX_DECOMPRESSED_BYTES,
    XERIAL_MAGIC,
    CompressionError,
    compress,
    decompress,
)
from walfs.wire.record_batch import (
    BATCH_OVERHEAD,
    CRC_START,
    LOG_OVERHEAD,
    BatchError,
    WireRecord,
    decode_for_append,
    encode_records_for_test,
    set_header_field,
)

CODECS = [1, 2, 3, 4]
RECORDS = [
    WireRecord(b"k%d" % i, b"value %d " % i * (i % 7 + 1), [("h", b"x"), ("n", None)], 1_700_000_000_000 + i)
    for i in range(200)
]


def _with_payload(codec: int, payload: bytes) -> bytes:
    """RECORDS' batch header with ``codec`` and ``payload`` as its records section."""
    b = bytearray(encode_records_for_test(RECORDS)[:BATCH_OVERHEAD]) + payload
    set_header_field(b, "batch_length", BATCH_OVERHEAD - LOG_OVERHEAD + len(payload))
    set_header_field(b, "attributes", codec)
    set_header_field(b, "crc", crc32c(bytes(b[CRC_START:])))
    return bytes(b)


def _records_section(records: list[WireRecord]) -> bytes:
    return encode_records_for_test(records)[BATCH_OVERHEAD:]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
def test_each_codec_decodes_to_the_uncompressed_records(codec: int) -> None:
    plain = decode_for_append(encode_records_for_test(RECORDS))
    packed = encode_records_for_test(RECORDS, codec=codec)
    got = decode_for_append(packed)
    assert plain is not None and got is not None
    assert len(packed) < len(_records_section(RECORDS))  # it really was compressed
    assert got.data == plain.data
    assert list(got.meta_lens) == list(plain.meta_lens) and list(got.value_lens) == list(plain.value_lens)


def test_snappy_raw_block_as_librdkafka_sends_it() -> None:
    section = _records_section(RECORDS)
    raw = bytes(cramjam.snappy.compress_raw(section))
    assert not raw.startswith(XERIAL_MAGIC)
    got = decode_for_append(_with_payload(2, raw))
    plain = decode_for_append(encode_records_for_test(RECORDS))
    assert got is not None and plain is not None and got.data == plain.data


def test_snappy_xerial_in_several_chunks() -> None:
    section = _records_section(RECORDS)
    half = len(section) // 2
    blocks = [bytes(cramjam.snappy.compress_raw(part)) for part in (section[:half], section[half:])]
    chunks = b"".join(struct.pack(">i", len(c)) + c for c in blocks)
    payload = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + chunks
    assert decompress(2, payload) == section


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
def test_each_codec_bomb_is_refused_at_the_cap(codec: int) -> None:
    bomb = encode_records_for_test([WireRecord(None, bytes(8 * MAX_DECOMPRESSED_BYTES))], codec=codec)
    assert len(bomb) < MAX_DECOMPRESSED_BYTES // 2  # snappy shrinks zeros about 20x, the others more
    with pytest.raises(BatchError, match="more than"):
        decode_for_append(bomb)
    # Exactly the cap is fine, one byte more is not.
    data = bytes(MAX_DECOMPRESSED_BYTES)
    assert len(decompress(codec, compress(codec, data))) == MAX_DECOMPRESSED_BYTES
    with pytest.raises(CompressionError, match="more than"):
        decompress(codec, compress(codec, data + b"\0"))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
def test_each_codec_damaged_or_cut_data_is_a_batch_error(codec: int) -> None:
    payload = compress(codec, _records_section(RECORDS))
    flipped = payload[:-1] + bytes([payload[-1] ^ 0xFF])
    for bad in (payload[: len(payload) // 2], payload[:5], b"\xff" * 40, flipped):
        try:
            got = decode_for_append(_with_payload(codec, bad))
        except BatchError:
            continue
        # A codec without a checksum may decode damage into other bytes: then the
        # records parser must refuse them or they must be whole records.
        assert got is not None


def test_snappy_xerial_chunk_lengths_are_checked() -> None:
    head = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    too_long = head + struct.pack(">i", 1 << 30) + b"x"
    for bad in (head[:10], head + b"\0\0", too_long, head + struct.pack(">i", -5)):
        with pytest.raises(CompressionError):
            decompress(2, bad)


def _consume_values(bootstrap: str, topic: str, n: int) -> list[bytes | None]:
    c = rdkafka_consumer(bootstrap, f"g-{topic}")
    try:
        c.subscribe([topic])
        return [m.value() for m in consume(c, n, timeout=60)]
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_produces_with_each_codec(tmp_path: Path, codec: str) -> None:
    with listener(tmp_path) as lst:
        p = Producer({"bootstrap.servers": lst.bootstrap, "compression.type": codec, "linger.ms": 50})
        values = [b"%s record %d " % (codec.encode(), i) * 20 for i in range(500)]
        for v in values:
            p.produce("z", value=v, key=b"k")
        assert p.flush(30) == 0
        assert lst.wal.read("z", 0, max_records=1000) == values
        assert _consume_values(lst.bootstrap, "z", 500) == values


def test_librdkafka_zstd_bomb_refused_then_next_producer_served(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.create("t", 0)
        errors: list[KafkaError] = []
        p = Producer(
            {
                "bootstrap.servers": lst.bootstrap,
                "compression.type": "zstd",
                "message.max.bytes": 64 << 20,
                "retries": 0,
            }
        )
        p.produce("t", value=bytes(16 << 20), partition=0, on_delivery=lambda err, msg: errors.append(err))
        assert p.flush(60) == 0
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() == KafkaError.INVALID_MSG  # Kafka's CORRUPT_MESSAGE (2)
        good = Producer({"bootstrap.servers": lst.bootstrap, "compression.type": "zstd"})
        good.produce("t", value=b"after", partition=0)
        assert good.flush(30) == 0
        assert lst.wal.read("t", 0) == [b"after"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_produces_with_each_codec(tmp_path: Path, codec: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    with listener(tmp_path) as lst:
        p = KafkaProducer(bootstrap_servers=lst.bootstrap, compression_type=codec, linger_ms=20)
        values = [b"kafka-python %s %d " % (codec.encode(), i) * 10 for i in range(300)]
        futures = [p.send("kp", value=v, key=b"k") for v in values]
        assert [f.get(timeout=30).offset for f in futures] == list(range(300))
        p.close()
        assert lst.wal.read("kp", 0, max_records=1000) == values
        c = KafkaConsumer(
            "kp", bootstrap_servers=lst.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
        )
        assert [m.value for m in c][:300] == values
        c.close()
