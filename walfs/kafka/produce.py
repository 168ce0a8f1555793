"""Produce (and InitProducerId, which idempotent producers call first).

All batches for one partition in a request become one ``wal.append_bodies`` call,
so they survive a crash together or not at all. The answer waits for durability where
the engine's fsync policy asks for it (Broker.answer_syncs: acks=-1 under "interval" and
"always", acks=1 under "always"): the records are appended without the engine's own wait
(``append(wait=False)``) and the answer is a ``Later`` that waits for the shared chain of syncs
(group_sync.py), the produce path's one durability wait. Otherwise it is answered once
the records are in the log (page cache): acks=-1 under "never", as Kafka's single broker
does, and acks=1 under "interval" and "never". acks=0 has no answer and uses the plain
append (under "always" it returns once durable).

A partition's records are appended in place, on the event loop, when the engine takes them
without waiting (``capabilities.NoWaitAppend``: an existing stream, no new segment, no lock
held elsewhere) and the append would not wait for durability anyway, up to
IN_PLACE_MAX_BYTES of a request's records: no worker-thread
hop, which cost more than the append itself (docs/notes/2026-11-24-kafka-produce-path.md). Anything
that may wait
(creating a topic, an idempotent producer's first batch after a restart, which searches
the log, retention's back-pressure, a new segment, acks=0 under "always") goes to a
worker thread as before, from the start: nothing is half done in place."""

from __future__ import annotations

import time
from typing import Any

from walfs.engine.records import stamp_timestamps
from walfs.engine.rules import append_nowait
from walfs.kafka.api import Api, Later
from walfs.kafka.broker import Broker, Connection, log
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.metadata import valid_new_topic
from walfs.kafka.producer_ids import DUPLICATE, OUT_OF_ORDER, STALE_EPOCH
from walfs.kafka.topic_configs import log_append_time, max_message_bytes
from walfs.kafka.wal_errors import error_code_for
from walfs.wire.record_batch import (
    BatchError,
    InvalidRecords,
    ProducedBodies,
    UnsupportedCompression,
    batch_sizes,
    decode_for_append,
)

# Record bytes of one request tried in place (their CRC check, split and copy hold the event
# loop for about a millisecond per MiB); the partitions past it go to a worker thread.
IN_PLACE_MAX_BYTES = 2 << 20


class _WouldWait(Exception):
    """The in-place append met something that waits, before doing anything: the caller
    appends in a worker thread instead."""


def _append_partition(
    broker: Broker, topic: str, partition: int, data: bytes | None, unsynced: bool, in_place: bool = False
) -> tuple[ErrorCode, int, int]:
    """(error, base offset, log start offset); runs in a worker thread, or with ``in_place``
    on the event loop, where it raises _WouldWait, nothing appended, at the first step that
    could wait. ``unsynced``: the caller syncs before it answers (Broker.answer_syncs), so
    the append does not wait for durability."""
    engine = broker.engine
    count = broker.catalog.partition_count(topic)
    # A first produce to partition 0 creates the topic, as an append through the
    # mount does (clients usually auto-create through Metadata first anyway).
    cfg = broker.config
    if count == 0 and partition == 0 and valid_new_topic(topic) and cfg.auto_create_topics_enable:
        if in_place:  # creating a topic syncs the catalog
            raise _WouldWait
        if cfg.num_partitions > 1:
            broker.catalog.declare(topic, cfg.num_partitions)
        count = 1
    if partition < 0 or partition >= count:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    limit = max_message_bytes(engine, cfg, topic)
    if data and any(size > limit for size in batch_sizes(data)):
        log.info("produce to %s/%d: a batch above max.message.bytes (%d)", topic, partition, limit)
        return ErrorCode.message_too_large, -1, -1
    try:
        # Batch headers in Python, records in C straight into stored bodies.
        produced = decode_for_append(data or b"")
    except UnsupportedCompression as e:
        log.info("produce to %s/%d: %s", topic, partition, e)
        return ErrorCode.unsupported_compression_type, -1, -1
    except InvalidRecords as e:
        # Kafka's INVALID_RECORD, with the records at fault (ProduceResponse v8+).
        log.info("produce to %s/%d: invalid records: %s", topic, partition, e)
        raise
    except BatchError as e:
        log.warning("produce to %s/%d: rejected batch: %s", topic, partition, e)
        return ErrorCode.corrupt_message, -1, -1
    if produced is None:
        info = engine.info(topic, partition)
        return ErrorCode.none, info.high_watermark, info.low_watermark
    if log_append_time(engine, cfg, topic):  # message.timestamp.type=LogAppendTime
        stamp_timestamps(produced.data, produced.meta_lens, produced.value_lens, int(time.time() * 1000))
    if produced.producer_id < 0 or produced.base_sequence < 0:
        return _append(engine, topic, partition, produced, unsynced, in_place)
    # An idempotent producer: its sequence is checked, and the batch carries its producer
    # section into the log, so the check survives a restart (walfs/kafka/producer_ids.py).
    ids = broker.producer_ids
    pid, epoch, first, n = (
        produced.producer_id,
        produced.producer_epoch,
        produced.base_sequence,
        len(produced.meta_lens),
    )
    guard = ids.guard(pid, topic, partition)
    # In place: neither wait for the guard (a thread may hold it across a slow append) nor
    # search the log for a producer this listener does not know yet.
    if not guard.acquire(blocking=not in_place):
        raise _WouldWait
    try:
        if in_place and ids.needs_search(pid, topic, partition):
            raise _WouldWait
        verdict, offset = ids.check(engine, pid, epoch, topic, partition, first, n)
        if verdict == DUPLICATE:
            log.info(
                "produce to %s/%d: resent batch of producer %d not appended again", topic, partition, pid
            )
            return ErrorCode.none, offset, engine.info(topic, partition).low_watermark
        if verdict == OUT_OF_ORDER:
            log.info("produce to %s/%d: producer %d sequence %d out of order", topic, partition, pid, first)
            return ErrorCode.out_of_order_sequence_number, -1, -1
        if verdict == STALE_EPOCH:
            return ErrorCode.invalid_producer_epoch, -1, -1
        produced.add_producer((pid, epoch, first, n))
        code, base, start = _append(engine, topic, partition, produced, unsynced, in_place)
        if code is ErrorCode.none:
            ids.remember(pid, epoch, topic, partition, first, n, base)
        return code, base, start
    finally:
        guard.release()


def _append(
    engine: Any, topic: str, partition: int, produced: ProducedBodies, unsynced: bool, in_place: bool
) -> tuple[ErrorCode, int, int]:
    try:
        if in_place:
            bodies = (produced.data, produced.meta_lens, produced.value_lens)
            base = append_nowait(engine, topic, partition, *bodies)
        else:
            base = engine.append(
                topic, partition, produced.data, produced.meta_lens, produced.value_lens, wait=not unsynced
            )
    except Exception as e:
        return error_code_for(e, f"produce to {topic}/{partition}"), -1, -1
    if base is None:  # the engine would have waited: nothing appended
        raise _WouldWait
    return ErrorCode.none, base, engine.info(topic, partition).low_watermark


async def handle_produce(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    results: list[tuple[str, list[tuple[int, ErrorCode, int, int]]]] = []
    invalid: dict[tuple[str, int], InvalidRecords] = {}
    appended = False
    # The answer waits for the shared sync round below, after all partitions are appended
    # (and the connection reads on meanwhile).
    unsynced = broker.answer_syncs(req.acks)
    in_place = broker.appends_in_place(unsynced)
    in_place_left = IN_PLACE_MAX_BYTES
    for td in req.topic_data:
        parts = []
        for pd in td.partition_data:
            if req.transactional_id is not None:
                # No transactions here: refuse instead of pretending.
                parts.append((pd.index, ErrorCode.transactional_id_authorization_failed, -1, -1))
                continue
            try:
                done: tuple[ErrorCode, int, int] | None = None
                size = len(pd.records or b"")
                if in_place and size <= in_place_left:
                    in_place_left -= size
                    try:
                        done = _append_partition(broker, td.name, pd.index, pd.records, unsynced, True)
                    except _WouldWait:
                        pass
                if done is None:
                    done = await broker.blocking(
                        _append_partition, broker, td.name, pd.index, pd.records, unsynced
                    )
                code, base, start = done
            except InvalidRecords as e:
                code, base, start = ErrorCode.invalid_record, -1, -1
                invalid[(td.name, pd.index)] = e
            appended |= code is ErrorCode.none
            parts.append((pd.index, code, base, start))
        results.append((td.name, parts))
    if unsynced and appended:
        # The answer waits for the sync, the connection does not: it reads and appends the
        # next requests meanwhile, which then share this sync round or the next
        # (pipeline.py, group_sync.py).
        mark = broker.durable.mark()  # its sync under way while the answers before this one wait

        async def synced() -> Any:
            try:
                await broker.durable.wait(mark)
            except Exception as e:
                code = error_code_for(e, f"sync for acks={req.acks}")
                return _response(
                    version, [(t, [(i, code, -1, -1) for i, _, _, _ in ps]) for t, ps in results], invalid
                )
            return _response(version, results, invalid)

        return Later(synced)
    if req.acks == 0:
        return None
    return _response(version, results, invalid)


def _response(
    version: int,
    results: list[tuple[str, list[tuple[int, ErrorCode, int, int]]]],
    invalid: dict[tuple[str, int], InvalidRecords],
) -> Any:
    mod = response_module(0, version)
    return build(
        mod.ProduceResponse,
        responses=tuple(
            build(
                mod.TopicProduceResponse,
                name=topic,
                partition_responses=tuple(
                    build(
                        mod.PartitionProduceResponse,
                        index=index,
                        error_code=code,
                        base_offset=base,
                        log_append_time=None,
                        log_start_offset=start,
                        record_errors=tuple(
                            build(mod.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m)
                            for i, m in (bad.record_errors if bad and version >= 8 else ())
                        ),
                        error_message=str(bad) if bad else None,
                    )
                    for index, code, base, start in parts
                    for bad in [invalid.get((topic, index))]
                ),
            )
            for topic, parts in results
        ),
    )


async def handle_init_producer_id(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(22, version)
    if req.transactional_id is not None:
        return build(
            mod.InitProducerIdResponse,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    pid = broker.producer_ids.allocate()
    return build(mod.InitProducerIdResponse, error_code=ErrorCode.none, producer_id=pid, producer_epoch=0)


HANDLERS = {
    0: Api("Produce", 3, 9, handle_produce),
    22: Api("InitProducerId", 0, 4, handle_init_producer_id),
}
