"""A damaged record on disk is reported to a Kafka consumer, never served: the fetch path
that encodes straight from the mapped segment (LogEngine.read_kafka_batch, C
walfs_read_kafka_batch) checks each record's CRC before it uses its bytes, four records at
a time, and stops right before a bad one from any start; the bad record itself is answered
with CORRUPT_MESSAGE, to a raw Fetch and to librdkafka (confluent-kafka)."""

from __future__ import annotations

import datetime
import os
import socket
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from kafka_harness import Listener, encode_request, poll_messages, rdkafka_consumer, recv_frame
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.serial import entity_reader

import walfs
from walfs.kafka.messages import ErrorCode, build
from walfs.wire.batch_codec import read_kafka_batch
from walfs.wire.record_batch import decode_batches

BAD = 10  # the damaged record's offset
# Blocks small enough that record BAD lies in a sealed run, which open does not re-check.
GEOMETRY = {"segment_size": 1 << 20, "block_size": 64 << 10}


def seg_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.startswith("seg-"))


def find(d: Path, needle: bytes) -> tuple[Path, int]:
    hits = [(p, i) for p in seg_files(d) for i in [p.read_bytes().find(needle)] if i >= 0]
    assert len(hits) == 1, hits
    return hits[0]


def flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))


def damaged_log(data: Path, where: str) -> list[bytes]:
    """600 records in sealed runs (not checked at open), record BAD's header or value
    flipped on disk after a clean close."""
    vals = [b"sealed-%05d-" % i + b"p" * 200 for i in range(600)]
    with walfs.Wal(str(data), **GEOMETRY) as w:
        for i in range(0, len(vals), 50):
            w.append("t", vals[i : i + 50])
    path, pos = find(data, b"sealed-%05d-" % BAD)
    flip(path, pos - 12 if where == "header" else pos + 50)
    return vals


def values(batch: bytes | bytearray | memoryview) -> list[bytes | None]:
    if not len(batch):
        return []
    (b,) = decode_batches(bytes(batch))
    return [r.value for r in b.records]


@pytest.mark.parametrize("where", ["header", "payload"])
def test_read_kafka_batch_stops_before_a_damaged_record_and_refuses_it(tmp_path: Path, where: str) -> None:
    data = tmp_path / "data"
    vals = damaged_log(data, where)
    with walfs.Wal(str(data), **GEOMETRY) as w:
        e = w.engine
        # From every start before it (each place in a group of four CRC checks), the good
        # records up to it and not one byte of it.
        for start in range(0, BAD):
            assert values(read_kafka_batch(e, "t", 0, start, 1000, 1 << 20)) == vals[start:BAD], start
        with pytest.raises(walfs.CorruptRecordError, match=f"offset {BAD}"):
            read_kafka_batch(e, "t", 0, BAD, 1000, 1 << 20)
        assert values(read_kafka_batch(e, "t", 0, BAD + 1, 5, 1 << 20)) == vals[BAD + 1 : BAD + 6]


def fetch(sock: socket.socket, offset: int, cid: int) -> tuple[ErrorCode, bytes]:
    body = build(
        FetchRequest,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=1 << 20,
        topics=(
            build(
                FetchTopic,
                topic="t",
                partitions=(
                    build(FetchPartition, partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    sock.sendall(encode_request(1, 12, cid, body))
    frame = recv_frame(sock)
    _header, used = entity_reader(FetchResponse.__header_schema__)(frame, 0)
    resp = entity_reader(FetchResponse)(frame, used)[0]
    (part,) = resp.responses[0].partitions
    return part.error_code, bytes(part.records or b"")


def test_kafka_fetch_reports_a_damaged_record_as_corrupt_message(tmp_path: Path) -> None:
    data = tmp_path / "data"
    vals = damaged_log(data, "payload")
    with walfs.Wal(str(data), **GEOMETRY) as w, Listener(w) as lst:
        with socket.create_connection(("127.0.0.1", lst.port), timeout=30) as s:
            code, records = fetch(s, 0, 1)
            assert code == ErrorCode.none and values(records) == vals[:BAD]
            code, records = fetch(s, BAD, 2)
            assert code == ErrorCode.corrupt_message and records == b""
            code, records = fetch(s, BAD + 1, 3)
            assert code == ErrorCode.none and values(records)[:5] == vals[BAD + 1 : BAD + 6]

        # librdkafka: the good records, then the error, and never the damaged bytes.
        c = rdkafka_consumer(lst.bootstrap, "g")
        try:
            c.subscribe(["t"])
            got, error = poll_messages(c, len(vals), timeout=60)
            assert [m.value() for m in got] == vals[:BAD]
            # librdkafka names Kafka's CORRUPT_MESSAGE (2) INVALID_MSG.
            assert error is not None and error.code() == KafkaError.INVALID_MSG, error
        finally:
            c.close()
    assert os.path.isdir(data)
