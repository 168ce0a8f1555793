"""A gzip batch is decompressed with a cap (Kafka's message.max.bytes default): a small
gzip "bomb" is refused with CORRUPT_MESSAGE before it fills memory, and the listener
keeps serving another producer (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import CorruptRecordError
from kafka_harness import listener

from walfs.wire.record_batch import (
    MAX_DECOMPRESSED_BYTES,
    BatchError,
    WireRecord,
    decode_for_append,
    encode_records_for_test,
)


def test_gzip_bomb_batch_refused_small_gzip_kept() -> None:
    bomb = encode_records_for_test([WireRecord(None, bytes(8 * MAX_DECOMPRESSED_BYTES))], codec=1)
    assert len(bomb) < MAX_DECOMPRESSED_BYTES // 100
    with pytest.raises(BatchError, match="decompresses to more than"):
        decode_for_append(bomb)
    fine = decode_for_append(encode_records_for_test([WireRecord(b"k", b"v" * 1000)], codec=1))
    assert fine is not None and len(fine.meta_lens) == 1


def test_gzip_bomb_over_the_wire_refused_other_producer_served(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.create("t", 0)
        bomber = KafkaProducer(
            bootstrap_servers=lst.bootstrap,
            compression_type="gzip",
            max_request_size=64 << 20,
            retries=0,
            enable_idempotence=False,
        )
        fut = bomber.send("t", value=bytes(16 << 20), partition=0)
        with pytest.raises(CorruptRecordError):
            fut.get(timeout=60)
        bomber.close()
        good = KafkaProducer(bootstrap_servers=lst.bootstrap, compression_type="gzip")
        meta = good.send("t", value=b"after", partition=0).get(timeout=30)
        good.close()
        assert meta.offset == 0
        assert [r for r in lst.wal.read("t", 0)] == [b"after"]
