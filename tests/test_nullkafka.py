"""bench/kafka/nullkafka, the in-memory Kafka-wire server of bench/kafka/bench_vs_kafka.py --ceiling,
against real clients: confluent_kafka (librdkafka) and kafka-python produce records, Kafka's
own ProducerPerformance produces more (the bench's `produce` helper), and confluent_kafka and
ConsumerPerformance (the bench's `consume` helper, classic group protocol) read them back:
every record once, in order, byte for byte, offsets as Kafka assigns them. Bad input: a
batch whose CRC does not match is refused with CORRUPT_MESSAGE, a frame over 100 MiB closes
the connection. No speed is asserted.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaProducer
from kafka_answers import _produce_raw
from kafka_harness import fetch_request
from kafka_wire import Wire

from walfs.wire.record_batch import WireRecord, encode_records_for_test

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench" / "kafka"))

import bench_vs_kafka  # noqa: E402
from real_kafka import classpath  # noqa: E402

OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2


@pytest.fixture(scope="module")
def nullkafka() -> Iterator[str]:
    server = bench_vs_kafka.NullKafka().start()  # `make nullkafka`, then the binary
    assert server.bootstrap.startswith("127.0.0.1:")
    yield server.bootstrap
    server.stop()
    assert server.proc is not None and server.proc.returncode is not None


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


def test_fetch_answers_whole_stored_batches_and_bad_input(nullkafka: str) -> None:
    """Fetch v12 (flexible, decoded by kio): the stored batches as produced, base offsets
    patched; the first batch whole even over the limit; nothing at the high watermark; out of
    range beyond it. A bad CRC is refused, nothing of it kept; a frame over 100 MiB closes."""
    bench_vs_kafka.create_topic(nullkafka, "raw", {})
    good = encode_records_for_test([WireRecord(b"k", b"v", [("h", b"1")], 1_000)])
    bad = good[:-1] + bytes([good[-1] ^ 1])  # a record byte: the CRC no longer matches
    with Wire(nullkafka) as w:
        assert _produce_raw(w, "raw", bad) == (CORRUPT_MESSAGE, -1)
        assert _produce_raw(w, "raw", good) == (0, 0)  # nothing of the bad batch kept
        assert _produce_raw(w, "raw", good) == (0, 1)

        def fetch(offset: int, limit: int) -> tuple[int, int, bytes]:
            p = w.call(1, 12, fetch_request("raw", {0: offset}, limit=limit)).responses[0].partitions[0]
            return int(p.error_code), int(p.high_watermark), bytes(p.records or b"")

        code, hw, records = fetch(0, 1)  # the first batch whole, over a 1-byte limit
        assert (code, hw, len(records)) == (0, 2, len(good))
        assert records[16:] == good[16:] and struct.unpack(">q", records[:8]) == (0,)
        code, hw, records = fetch(1, 1 << 20)
        assert (code, hw, len(records), records[16:]) == (0, 2, len(good), good[16:])
        assert struct.unpack(">q", records[:8]) == (1,)
        code, hw, records = fetch(0, 1 << 20)
        assert (code, hw, len(records)) == (0, 2, 2 * len(good))
        assert fetch(2, 1 << 20) == (0, 2, b"")  # caught up: nothing (after max_wait)
        assert fetch(3, 1 << 20)[0] == OFFSET_OUT_OF_RANGE
    host, port = nullkafka.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", (100 << 20) + 1) + b"\0" * 64)
        assert s.recv(1) == b""  # refused before reading the body: the connection closed
