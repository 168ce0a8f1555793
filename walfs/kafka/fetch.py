"""Fetch (with long polling) and ListOffsets.

A Fetch that finds nothing new waits up to max_wait_ms for any of its partitions to
grow, in ``wal.wait_for`` calls on worker threads: the wake-up comes from the engine,
so records appended by the mount or by another producer end the wait too, and an
idle consumer costs no CPU. Each partition's records go out as one v2 batch, encoded in C
straight from the log (capabilities.KafkaBatchRead).

A fetch whose records are all in the page cache, with no sync due, is read on the event
loop (as the mount reads, walfs/fuse/operations.py): a MiB takes ~0.15 ms there, and the hop to
a worker thread and back cost 0.3-0.5 ms of CPU per fetch (docs/notes/2026-11-24-kafka-fetch-path.md, "The
fetch path"). The others (records on disk only, a sync to wait for, many partitions) are
read in a worker thread, so that no connection waits for the disk on another's behalf."""

from __future__ import annotations

from typing import Any

import trio

from walfs.engine.rules import durable_info, wait_for
from walfs.kafka.api import Api, Written
from walfs.kafka.broker import Broker, Connection
from walfs.kafka.fetch_ahead import MAX_RECORDS_PER_READ, Next, NextBatches, in_page_cache
from walfs.kafka.fetch_answer import encode_fetch_answer
from walfs.kafka.list_offsets_answer import TopicAnswers, encode_list_offsets_answer
from walfs.kafka.messages import ErrorCode
from walfs.kafka.wal_errors import error_code_for
from walfs.wire.batch_codec import read_kafka_batch
from walfs.wire.record_batch import batch_end

# A long poll watches at most this many partitions (those first in the request);
# the others are still served by the next fetch, at most max_wait_ms later.
MAX_WATCHED_PARTITIONS = 16
# A fetch naming more partitions than this is read in a worker thread: the event loop is
# not held for the reads of many.
MAX_INLINE_PARTITIONS = 8

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


def _read_partitions(
    broker: Broker, req: Any, ahead: NextBatches | None = None
) -> tuple[list[Any], int, list[tuple[str, int, int]]]:
    """Reads every requested partition (worker thread, or the event loop: _read), taking
    the batches ``ahead`` kept for exactly these reads instead of reading them again.

    Returns per topic (name, [(partition, error, hwm, lwm, records bytes)]), the
    bytes found, and the (topic, partition, offset) of partitions at their end."""
    engine = broker.engine
    budget = getattr(req, "max_bytes", 0x7FFFFFFF)
    total = 0
    at_end: list[tuple[str, int, int]] = []
    topics = []
    for ft in req.topics:
        parts: list[tuple[int, ErrorCode, int, int, bytes | bytearray | memoryview]] = []
        for fp in ft.partitions:
            topic, p, offset = ft.topic, fp.partition, fp.fetch_offset
            if p < 0 or p >= broker.catalog.partition_count(topic):
                parts.append((p, ErrorCode.unknown_topic_or_partition, -1, -1, b""))
                continue
            # The high watermark Kafka clients see is the durable one (Kafka's for acks=all):
            # a record a power cut could take back is never handed out. Records published
            # past it at this offset are made durable first (one group-committed sync).
            info = durable_info(engine, topic, p, offset)
            hwm, lwm = info.durable_watermark, info.low_watermark
            if offset < lwm or offset > info.high_watermark:
                parts.append((p, ErrorCode.offset_out_of_range, hwm, lwm, b""))
                continue
            data: bytes | bytearray | memoryview = b""
            if offset == hwm:
                at_end.append((topic, p, offset))
            elif total < budget or total == 0:
                limit = min(fp.partition_max_bytes, budget - total)
                try:
                    # At least one record comes back even above the limit, so a
                    # record larger than max_bytes cannot stall its consumer (KIP-74).
                    # Encoded in C straight from the log (capabilities.KafkaBatchRead).
                    n, limit = min(MAX_RECORDS_PER_READ, hwm - offset), max(limit, 1)
                    kept = ahead.take(topic, p, offset, limit) if ahead is not None else None
                    data = kept if kept is not None else read_kafka_batch(engine, topic, p, offset, n, limit)
                except Exception as e:
                    parts.append((p, error_code_for(e, f"fetch {topic}/{p}@{offset}"), hwm, lwm, b""))
                    continue
                total += len(data)
            parts.append((p, ErrorCode.none, hwm, lwm, data))
        topics.append((ft.topic, parts))
    return topics, total, at_end


def _readable_inline(broker: Broker, req: Any, ahead: NextBatches | None = None) -> bool:
    """Whether _read_partitions can run on the event loop without waiting: few partitions,
    none with a sync due (durable_end would fsync), and every one's records from its fetch
    offset on (up to its byte limit) in the page cache (LogEngine.resident, a mincore), or
    read ahead already."""
    engine = broker.engine
    budget = getattr(req, "max_bytes", 0x7FFFFFFF)
    n = 0
    try:
        for ft in req.topics:
            for fp in ft.partitions:
                n += 1
                if n > MAX_INLINE_PARTITIONS or fp.partition < 0:
                    return False
                info = engine.info(ft.topic, fp.partition)
                offset = fp.fetch_offset
                if info.durable_watermark <= offset < info.high_watermark:
                    return False  # records past the durable mark: a sync first
                if ahead is not None and ahead.has(ft.topic, fp.partition, offset):
                    continue
                if info.low_watermark <= offset < info.durable_watermark:
                    size = max(1, min(fp.partition_max_bytes, budget))
                    if not in_page_cache(engine, ft.topic, fp.partition, offset, size):
                        return False
    except Exception:
        return False  # the worker-thread read reports it
    return True


async def _read(
    broker: Broker, req: Any, ahead: NextBatches | None
) -> tuple[list[Any], int, list[tuple[str, int, int]]]:
    if _readable_inline(broker, req, ahead):
        return _read_partitions(broker, req, ahead)
    return await broker.blocking(_read_partitions, broker, req, ahead)


def _plan_ahead(req: Any, topics: list[Any]) -> list[Next]:
    """The reads the next fetch will make if it asks for the same partitions from where
    this answer ended (the Java consumer's next fetch): one per partition that got
    records, with the byte limit _read_partitions will give it. A limit is known only
    while the partitions before it cannot use up the fetch's max_bytes (each may return
    up to its own limit), so the plan stops at the first it cannot know, and at
    MAX_INLINE_PARTITIONS (the read-ahead runs on the event loop, as the inline read)."""
    budget = getattr(req, "max_bytes", 0x7FFFFFFF)
    most = 0  # the most bytes the partitions so far can return
    plan: list[Next] = []
    for ft, (_, parts) in zip(req.topics, topics, strict=True):
        for fp, (p, error, _hwm, _lwm, data) in zip(ft.partitions, parts, strict=True):
            limit = fp.partition_max_bytes
            if most + limit > budget:
                return plan
            most += limit
            if error == ErrorCode.none and len(data) > 0 and limit > 0:
                plan.append(Next(ft.topic, p, batch_end(data), limit))
                if len(plan) == MAX_INLINE_PARTITIONS:
                    return plan
    return plan


async def _wait_for_any(broker: Broker, watch: list[tuple[str, int, int]], timeout_s: float) -> None:
    """Returns when one watched partition grows past its offset, or after timeout_s."""
    engine = broker.engine

    async def watch_one(topic: str, partition: int, offset: int, scope: trio.CancelScope) -> None:
        grew = await trio.to_thread.run_sync(
            lambda: wait_for(engine, topic, partition, offset, timeout=timeout_s),
            abandon_on_cancel=True,
            limiter=broker.wait_limiter,
        )
        if grew:
            scope.cancel()

    with trio.move_on_after(timeout_s) as scope:
        async with trio.open_nursery() as nursery:
            for topic, p, off in watch[:MAX_WATCHED_PARTITIONS]:
                nursery.start_soon(watch_one, topic, p, off, scope)


async def handle_fetch(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    ahead = conn.fetch_ahead
    if ahead is None or ahead.broker is not broker:
        if ahead is not None:
            ahead.take_all()
        ahead = conn.fetch_ahead = NextBatches(broker)
    try:
        topics, total, at_end = await _read(broker, req, ahead)
        wait_s = req.max_wait.total_seconds()
        if total == 0 and at_end and wait_s > 0:
            await _wait_for_any(broker, at_end, wait_s)
            topics, total, at_end = await _read(broker, req, ahead)
    finally:
        ahead.take_all()
    plan = _plan_ahead(req, topics)
    if plan:
        conn.after_answer = lambda: ahead.read(plan)
    # Written straight into its wire pieces (walfs/kafka/fetch_answer.py), not through
    # kio's dataclasses: ~85 us less per fetch.
    return Written(lambda correlation_id: encode_fetch_answer(correlation_id, version, topics))


def _list_offset(broker: Broker, version: int, topic: str, p: int, ts: int) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) for one ListOffsets query (worker thread): by record
    timestamp, as Kafka searches (walfs/kafka/record_times.py)."""
    engine = broker.engine
    if p < 0 or p >= broker.catalog.partition_count(topic):
        return ErrorCode.unknown_topic_or_partition, -1, -1
    try:
        info = engine.info(topic, p)
        hwm, low = info.high_watermark, info.low_watermark
        if ts == LATEST:
            return ErrorCode.none, -1, hwm
        if ts == EARLIEST:
            return ErrorCode.none, -1, low
        if ts == MAX_TIMESTAMP:
            if version < 7:  # KIP-734: -3 exists from v7 on; Kafka refuses it before
                return ErrorCode.unsupported_version, -1, -1
            found_ts, off = broker.record_times.max_timestamp(engine, topic, p, low, hwm)
            return ErrorCode.none, found_ts, off
        if ts < 0:
            return ErrorCode.invalid_request, -1, -1
        # -1, -1 when no record is that new: Kafka's answer.
        found_ts, off = broker.record_times.offset_for(engine, topic, p, ts, low, hwm)
        return ErrorCode.none, found_ts, off
    except Exception as e:
        return error_code_for(e, f"list offsets {topic}/{p}@{ts}"), -1, -1


async def handle_list_offsets(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    def answer(topic: str, p: int, ts: int) -> tuple[int, ErrorCode, int, int]:
        return (p, *_list_offset(broker, version, topic, p, ts))

    def answer_all() -> list[TopicAnswers]:
        out: list[TopicAnswers] = []
        for t in req.topics:
            out.append((t.name, [answer(t.name, q.partition_index, q.timestamp) for q in t.partitions]))
        return out

    topics = await broker.blocking(answer_all)
    # Written in wire form (list_offsets_answer.py): one ListOffsets of 100,000 partitions
    # costs their numbers, not 100,000 of kio's dataclasses.
    return Written(lambda correlation_id: encode_list_offsets_answer(correlation_id, version, topics))


HANDLERS = {
    1: Api("Fetch", 4, 12, handle_fetch),
    2: Api("ListOffsets", 1, 7, handle_list_offsets),
}
