"""Batches with invalid records are refused whole with INVALID_RECORD (87) and, from
ProduceResponse v8 on, per-record errors (batch index + message) and an error message
(issue 12); nothing of the batch is written and the next batch is appended. Kafka's batch
rules are compared live with a real broker in tests/test_kafka_vs_real_broker.py."""

from __future__ import annotations

import datetime
from pathlib import Path

from crc32c import crc32c
from kafka_answers import invalid_batch_answers
from kafka_harness import listener
from kafka_wire import Wire, make

from walfs.wire.record_batch import CRC_START, WireRecord, encode_records_for_test, set_header_field

INVALID_RECORD = 87


def _produce(w: Wire, version: int, records: bytes) -> object:
    req = make(
        0,
        version,
        "ProduceRequest",
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            make(
                0,
                version,
                "TopicProduceData",
                name="t",
                partition_data=(make(0, version, "PartitionProduceData", index=0, records=records),),
            ),
        ),
    )
    return w.call(0, version, req).responses[0].partition_responses[0]


def test_records_walfs_cannot_keep_get_per_record_errors(tmp_path: Path) -> None:
    rows = [
        WireRecord(b"k", b"ok", [("fine", b"1")], 1_000),
        WireRecord(b"k", b"bad", [], 1_001),
        WireRecord(b"k", b"ok", [], 1_002),
        WireRecord(b"k", b"bad", [], 1_003),
    ]
    # Records 1 and 3 get a header whose key is not UTF-8: encoded with a placeholder key
    # of the same length whose bytes are then swapped, and the CRC made right again.
    rows[1].headers = [("\x01\x01", b"x")]
    rows[3].headers = [("\x01\x01", b"y")]
    batch = bytearray(encode_records_for_test(rows))
    batch = bytearray(batch.replace(b"\x04\x01\x01", b"\x04\xff\xfe"))
    set_header_field(batch, "crc", crc32c(bytes(batch[CRC_START:])))
    with listener(tmp_path) as lst:
        lst.wal.create("t", 0)
        with Wire(lst.bootstrap) as w:
            p = _produce(w, 9, bytes(batch))
            assert int(p.error_code) == INVALID_RECORD
            assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
                (1, "header key is not UTF-8"),
                (3, "header key is not UTF-8"),
            ]
            assert p.error_message and "2 invalid record(s)" in p.error_message
            p7 = _produce(w, 7, bytes(batch))  # before v8: the code alone
            assert int(p7.error_code) == INVALID_RECORD
            assert lst.wal.info("t", 0).high_watermark == 0  # nothing of either batch
            good = _produce(w, 9, encode_records_for_test([WireRecord(None, b"after", [], 5)]))
            assert int(good.error_code) == 0 and int(good.base_offset) == 0
        assert lst.wal.read("t", 0) == [b"after"]


def test_batch_rules_refuse_whole_batches(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        got = invalid_batch_answers(lst.bootstrap)
    assert got == {
        "create": 0,
        "inconsistent offset range": (INVALID_RECORD, -1),
        "then good (inconsistent offset range)": (0, 0),
        "control batch": (INVALID_RECORD, -1),
        "then good (control batch)": (0, 2),
        "producer id without sequence": (INVALID_RECORD, -1),
        "then good (producer id without sequence)": (0, 4),
    }
