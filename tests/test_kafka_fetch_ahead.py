"""The fetch read-ahead (walfs/kafka/fetch_ahead.py): after a fetch answer is out, each
partition whose answer stopped on its byte limit has its next batch read and kept for
the connection's next fetch. What it must keep true, on a real engine:
- an answer served from it is byte for byte the answer a fresh read gives;
- it is used only for the same partition, offset and limit;
- a topic deleted and created again, a trim, a damaged record: the next fetch answers
  as if nothing had been read ahead;
- what it keeps is bounded per connection and per broker, and given back;
- through the real listener, real clients (librdkafka, kafka-python) read every record
  once, in order, while a producer appends."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka_harness import Listener, consume, fetch_request, rdkafka_consumer
from test_kafka_fetch_damage import GEOMETRY as SEALED_GEOMETRY
from test_kafka_fetch_damage import find, flip

import walfs
from walfs.kafka.broker import Broker, Connection
from walfs.kafka.dispatch import SUPPORTED
from walfs.kafka.fetch import handle_fetch
from walfs.kafka.fetch_ahead import MAX_BYTES, Next, NextBatches
from walfs.kafka.messages import ErrorCode
from walfs.wire.record_batch import batch_end, decode_batches

GEOMETRY = {"segment_size": 16 << 20, "block_size": 1 << 20}
LIMIT = 64 << 10  # each partition's byte limit: ~60 records of 1 KiB per answer
VERSION = 12


def request(topic: str, offsets: dict[int, int], limit: int = LIMIT) -> Any:
    return fetch_request(topic, offsets, limit, max_wait_ms=0)


def wire(out: Any) -> bytes:
    return out if isinstance(out, bytes) else b"".join(bytes(p) for p in out)


async def fetch(broker: Broker, conn: Connection, req: Any) -> bytes:
    """One fetch as the listener answers it: the answer's wire bytes, then the work the
    handler left for after the answer (the read-ahead), as the listener runs it."""
    answer = wire((await handle_fetch(broker, conn, VERSION, req)).write(7))
    job, conn.after_answer = conn.after_answer, None
    if job is not None:
        job()
    return answer


def new_conn() -> Connection:
    return Connection(peer="test", host="127.0.0.1", port=0)


def broker_for(w: Any) -> Broker:
    return Broker(w.engine, api_versions=dict(SUPPORTED))


async def test_an_answer_read_ahead_is_the_answer_a_fresh_read_gives(tmp_path: Path) -> None:
    values = [os.urandom(1000) for _ in range(3000)]
    with walfs.Wal(str(tmp_path / "d"), fsync="never", **GEOMETRY) as w:
        w.append("t", values)
        w.create("t", 1)
        w.append("t", values[:500], partition=1)
        broker = broker_for(w)
        full = broker.ahead_budget
        conn = new_conn()
        offsets = {0: 0, 1: 0}
        answers = served = 0
        while offsets[0] < len(values):
            kept = conn.fetch_ahead
            served += kept is not None and kept.has("t", 0, offsets[0])
            got = await fetch(broker, conn, request("t", offsets))
            fresh = await fetch(broker_for(w), new_conn(), request("t", offsets))
            assert got == fresh, offsets
            answers += 1
            for p in offsets:
                batch = fresh_batch(w, p, offsets[p])
                offsets[p] = batch_end(batch) if batch else offsets[p]
        # Every answer but the first and the last came from the read-ahead, byte for byte
        # the fresh one (the last reaches the high watermark: a fresh read may find more
        # records by then, so a read-ahead that reaches it is not kept).
        assert answers > 40
        assert served == answers - 2
        assert conn.fetch_ahead is not None
        conn.fetch_ahead.take_all()
        assert broker.ahead_budget == full


def fresh_batch(w: Any, p: int, offset: int) -> bytes:
    info = w.engine.info("t", p)
    if offset >= info.high_watermark:
        return b""
    return bytes(w.engine.read_kafka_batch("t", p, offset, info.high_watermark - offset, LIMIT))


def records_of(answer_batch: bytes) -> list[bytes | None]:
    return [r.value for b in decode_batches(answer_batch) for r in b.records]


async def test_it_is_used_only_for_the_same_offset_and_limit(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "d"), fsync="never", **GEOMETRY) as w:
        w.append("t", [b"%05d" % i + b"x" * 995 for i in range(1000)])
        broker, conn = broker_for(w), new_conn()
        await fetch(broker, conn, request("t", {0: 0}))
        ahead = conn.fetch_ahead
        assert ahead is not None
        end = batch_end(fresh_batch(w, 0, 0))
        assert ahead.take("t", 0, end, LIMIT) is not None
        assert ahead.take("t", 0, end + 1, LIMIT) is None
        assert ahead.take("t", 0, end, LIMIT // 2) is None
        assert ahead.take("t", 1, end, LIMIT) is None
        # Another offset: answered by a fresh read, and what was kept is dropped.
        got = await fetch(broker, conn, request("t", {0: 5}))
        assert got == await fetch(broker_for(w), new_conn(), request("t", {0: 5}))
        assert not ahead.has("t", 0, end)


async def test_a_topic_deleted_and_created_again_is_read_again(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "d"), fsync="never", **GEOMETRY) as w:
        w.append("t", [b"old-%05d" % i + b"o" * 990 for i in range(500)])
        broker, conn = broker_for(w), new_conn()
        await fetch(broker, conn, request("t", {0: 0}))
        end = batch_end(fresh_batch(w, 0, 0))
        assert conn.fetch_ahead is not None and conn.fetch_ahead.has("t", 0, end)
        w.delete("t")
        w.append("t", [b"new-%05d" % i + b"n" * 990 for i in range(500)])
        got = await fetch(broker, conn, request("t", {0: end}))
        assert got == await fetch(broker_for(w), new_conn(), request("t", {0: end}))
        assert b"new-%05d" % end in got and b"old-" not in got


async def test_a_trim_past_the_kept_offset_answers_out_of_range(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "d"), fsync="never", segment_size=1 << 20, block_size=64 << 10) as w:
        w.append("t", [b"%05d" % i + b"x" * 995 for i in range(3000)])
        broker, conn = broker_for(w), new_conn()
        await fetch(broker, conn, request("t", {0: 0}))
        end = batch_end(fresh_batch(w, 0, 0))
        assert conn.fetch_ahead is not None and conn.fetch_ahead.has("t", 0, end)
        w.trim("t", 2000)
        low = w.engine.info("t", 0).low_watermark
        assert low > end
        got = await fetch(broker, conn, request("t", {0: end}))
        assert got == await fetch(broker_for(w), new_conn(), request("t", {0: end}))
        answer = decode_answer(got)
        assert answer.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range


def decode_answer(frame: bytes) -> Any:
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(1, VERSION)
    _, used = entity_reader(cls.__header_schema__)(frame, 0)
    return entity_reader(cls)(frame, used)[0]


@pytest.mark.parametrize("where", ["header", "payload"])
async def test_a_damaged_record_ahead_is_reported_by_the_fetch_at_it(tmp_path: Path, where: str) -> None:
    """A record damaged within the next answer's reach: the read-ahead stops before it as
    a fresh read does, and the fetch at the damaged record answers CORRUPT_MESSAGE."""
    data = tmp_path / "d"
    vals = [b"sealed-%05d-" % i + b"p" * 200 for i in range(600)]
    with walfs.Wal(str(data), **SEALED_GEOMETRY) as w:
        for i in range(0, len(vals), 50):
            w.append("t", vals[i : i + 50])
    bad = 40
    path, pos = find(data, b"sealed-%05d-" % bad)
    flip(path, pos - 12 if where == "header" else pos + 50)
    limit = 5000  # ~22 records per answer: the damage is in the second answer's reach
    with walfs.Wal(str(data), **SEALED_GEOMETRY) as w:
        broker, conn = broker_for(w), new_conn()
        got_values: list[bytes | None] = []
        offset = 0
        for _ in range(10):
            answer = decode_answer(await fetch(broker, conn, request("t", {0: offset}, limit)))
            part = answer.responses[0].partitions[0]
            if part.error_code != ErrorCode.none:
                assert part.error_code == ErrorCode.corrupt_message
                break
            batch = bytes(part.records)
            got_values += records_of(batch)
            offset = batch_end(batch)
        assert offset == bad
        assert got_values == vals[:bad]


async def test_what_is_kept_is_bounded_and_given_back(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "d"), fsync="never", **GEOMETRY) as w:
        for p in range(8):
            w.create("t", p)
            w.append("t", [os.urandom(1000) for _ in range(2000)], partition=p)
        w.sync()  # below the durable watermark: what a fetch's durable_end does first
        broker = broker_for(w)
        full = broker.ahead_budget
        ahead = NextBatches(broker)
        ahead.read([Next("t", p, 0, 1 << 20) for p in range(8)])
        kept = [p for p in range(8) if ahead.has("t", p, 0)]
        assert 1 <= len(kept) <= MAX_BYTES // (1 << 20)
        assert full - broker.ahead_budget <= MAX_BYTES
        # The broker's budget bounds all connections together.
        others = [NextBatches(broker) for _ in range(40)]
        for o in others:
            o.read([Next("t", p, 0, 1 << 20) for p in range(8)])
        assert full - broker.ahead_budget <= full
        assert broker.ahead_budget >= 0
        for o in [ahead, *others]:
            o.take_all()
        assert broker.ahead_budget == full


def test_real_clients_read_every_record_once_while_a_producer_appends(tmp_path: Path) -> None:
    first = [b"a-%06d-" % i + os.urandom(500) for i in range(6000)]
    more = [b"b-%06d-" % i + os.urandom(500) for i in range(3000)]
    with walfs.Wal(str(tmp_path / "d"), fsync="never", **GEOMETRY) as w, Listener(w) as lst:
        w.append("t", first)

        def produce() -> None:
            for i in range(0, len(more), 100):
                w.append("t", more[i : i + 100])

        t = threading.Thread(target=produce)
        t.start()
        try:
            c = rdkafka_consumer(lst.bootstrap, "g1", **{"max.partition.fetch.bytes": 32 << 10})
            try:
                c.subscribe(["t"])
                got = [m.value() for m in consume(c, len(first) + len(more), timeout=120)]
            finally:
                c.close()
        finally:
            t.join()
        assert got == first + more
        kc = KafkaConsumer(
            "t",
            bootstrap_servers=lst.bootstrap,
            group_id="g2",
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=32 << 10,
            consumer_timeout_ms=30_000,
        )
        try:
            got2 = []
            for m in kc:
                got2.append(m.value)
                if len(got2) == len(first) + len(more):
                    break
        finally:
            kc.close()
        assert got2 == first + more
