"""bench/nullkafka, the in-memory Kafka-wire server of bench/bench_vs_kafka.py --ceiling,
against real clients: confluent_kafka (librdkafka) and kafka-python produce records, Kafka's
own ProducerPerformance produces more (the bench's `produce` helper), and confluent_kafka and
ConsumerPerformance (the bench's `consume` helper, classic group protocol) read them back:
every record once, in order, byte for byte, offsets as Kafka assigns them. Bad input: a
batch whose CRC does not match is refused with CORRUPT_MESSAGE, a frame over 100 MiB closes
the connection. No speed is asserted.
"""

from __future__ import annotations

import datetime
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaProducer
from kafka_wire import Wire, make

from walfs.kafka.record_batch import WireRecord, encode_records_for_test

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import bench_vs_kafka  # noqa: E402
from real_kafka import classpath  # noqa: E402

CORRUPT_MESSAGE = 2


@pytest.fixture(scope="module")
def nullkafka() -> Iterator[str]:
    subprocess.run(["make", "-s", "-C", str(REPO), "nullkafka"], check=True)
    proc = subprocess.Popen(
        [str(bench_vs_kafka.NULLKAFKA), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    bootstrap = proc.stdout.readline().strip()
    assert bootstrap.startswith("127.0.0.1:")
    yield bootstrap
    proc.terminate()
    assert proc.wait(timeout=30) is not None


def read_all(bootstrap: str, topic: str, n: int, group: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of the topic's first n records, read with confluent_kafka in a group."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    got: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value()))
        # nothing more comes than was produced
        extra = c.poll(1.0)
        assert extra is None or extra.error() is not None
    finally:
        c.close()
    return got


def test_clients_produce_and_consume_every_record_once_in_order(nullkafka: str) -> None:
    bench_vs_kafka.create_topic(nullkafka, "mixed", {})
    sent: list[tuple[bytes, bytes]] = []
    p = Producer({"bootstrap.servers": nullkafka, "enable.idempotence": True, "linger.ms": 5})
    for i in range(3000):
        kv = (b"c%d" % i, bytes([i % 251]) * (i % 700) + b"confluent-%d" % i)
        p.produce("mixed", kv[1], key=kv[0])
        sent.append(kv)
    assert p.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=nullkafka, acks="all", linger_ms=5)
    for i in range(2000):
        kv = (b"k%d" % i, b"kafka-python-%d-" % i + bytes(range(256))[: i % 256])
        kp.send("mixed", key=kv[0], value=kv[1])
        sent.append(kv)
    kp.flush(30)
    kp.close()

    got = read_all(nullkafka, "mixed", len(sent), "g-mixed")
    assert [o for o, _, _ in got] == list(range(len(sent)))
    assert [(k, v) for _, k, v in got] == sent
    # ConsumerPerformance (the bench's own helper) reads them all too; it raises on fewer
    cp = classpath()
    out = bench_vs_kafka.consume(cp, nullkafka, "mixed", len(sent), 100)
    assert out["records_per_s"] and out["records_per_s"] > 0


def test_producer_performance_records_come_back(nullkafka: str) -> None:
    cp = classpath()
    bench_vs_kafka.create_topic(nullkafka, "perf", {})
    n, size = 20_000, 100
    prod = bench_vs_kafka.produce(cp, nullkafka, "perf", n, size, 2)  # raises unless all acked
    assert prod["records_per_s"] > 0
    got = read_all(nullkafka, "perf", n, "g-perf")
    assert [o for o, _, _ in got] == list(range(n))
    # ProducerPerformance's payloads: record-size bytes of A-Z, no key
    assert all(k is None and v is not None and len(v) == size for _, k, v in got)
    assert all(set(v) <= set(range(65, 91)) for _, _, v in got if v is not None)
    bench_vs_kafka.consume(cp, nullkafka, "perf", n, size)


def _produce_raw(w: Wire, records: bytes) -> object:
    version = 9
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
                name="raw",
                partition_data=(make(0, version, "PartitionProduceData", index=0, records=records),),
            ),
        ),
    )
    return w.call(0, version, req).responses[0].partition_responses[0]


def test_bad_crc_refused_and_big_frame_closes(nullkafka: str) -> None:
    bench_vs_kafka.create_topic(nullkafka, "raw", {})
    good = encode_records_for_test([WireRecord(b"k", b"v", [], 1_000)])
    bad = good[:-1] + bytes([good[-1] ^ 1])  # a record byte: the CRC no longer matches
    with Wire(nullkafka) as w:
        assert _produce_raw(w, bad).error_code == CORRUPT_MESSAGE
        first = _produce_raw(w, good)
        assert (first.error_code, first.base_offset) == (0, 0)  # nothing of the bad batch kept
        second = _produce_raw(w, good)
        assert (second.error_code, second.base_offset) == (0, 1)
    host, port = nullkafka.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", (100 << 20) + 1) + b"\0" * 64)
        assert s.recv(1) == b""  # refused before reading the body: the connection closed
