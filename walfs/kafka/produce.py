"""Produce (and InitProducerId, which idempotent producers call first).

All batches for one partition in a request become one ``wal.append_bodies`` call,
so they survive a crash together or not at all. acks=-1 answers only once the
records are durable: the WAL syncs each append itself under fsync="always",
otherwise the answer is a ``Later`` that calls ``wal.sync()`` first."""

from __future__ import annotations

from typing import Any

from walfs.kafka.api import Api, Later
from walfs.kafka.broker import Broker, Connection, log
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.metadata import valid_new_topic
from walfs.kafka.record_batch import BatchError, UnsupportedCompression, decode_for_append
from walfs.kafka.wal_errors import error_code_for


def _append_partition(
    broker: Broker, topic: str, partition: int, data: bytes | None
) -> tuple[ErrorCode, int, int]:
    """(error, base offset, log start offset); runs in a worker thread."""
    wal = broker.wal
    count = broker.catalog.partition_count(topic)
    # A first produce to partition 0 creates the topic, as an append through the
    # mount does (clients usually auto-create through Metadata first anyway).
    if count == 0 and partition == 0 and valid_new_topic(topic):
        count = 1
    if partition < 0 or partition >= count:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    try:
        # Batch headers in Python, records in C straight into stored bodies.
        produced = decode_for_append(data or b"")
    except UnsupportedCompression as e:
        log.info("produce to %s/%d: %s", topic, partition, e)
        return ErrorCode.unsupported_compression_type, -1, -1
    except BatchError as e:
        log.warning("produce to %s/%d: rejected batch: %s", topic, partition, e)
        return ErrorCode.corrupt_message, -1, -1
    # (A null value, a Kafka tombstone, is stored as an empty record: walfs values are
    # bytes, and the file view needs a line for it.)
    if produced is None:
        return ErrorCode.none, wal.high_watermark(topic, partition), wal.low_watermark(topic, partition)
    n = len(produced.meta_lens)
    dup = broker.producer_ids.duplicate_of(produced.producer_id, topic, partition, produced.base_sequence, n)
    if dup is not None:
        log.info(
            "produce to %s/%d: resent batch of producer %d dropped", topic, partition, produced.producer_id
        )
        return ErrorCode.none, dup, wal.low_watermark(topic, partition)
    try:
        base = wal.append_bodies(topic, produced.data, produced.meta_lens, produced.value_lens, partition)
    except Exception as e:
        return error_code_for(e, f"produce to {topic}/{partition}"), -1, -1
    broker.producer_ids.remember(produced.producer_id, topic, partition, produced.base_sequence, n, base)
    return ErrorCode.none, base, wal.low_watermark(topic, partition)


async def handle_produce(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    results: list[tuple[str, list[tuple[int, ErrorCode, int, int]]]] = []
    appended = False
    for td in req.topic_data:
        parts = []
        for pd in td.partition_data:
            if req.transactional_id is not None:
                # No transactions here: refuse instead of pretending.
                parts.append((pd.index, ErrorCode.transactional_id_authorization_failed, -1, -1))
                continue
            code, base, start = await broker.blocking(
                _append_partition, broker, td.name, pd.index, pd.records
            )
            appended |= code is ErrorCode.none
            parts.append((pd.index, code, base, start))
        results.append((td.name, parts))
    if req.acks == -1 and appended and not broker.appends_are_durable:
        # The answer waits for the sync, the connection does not: it reads and appends the
        # next requests meanwhile, which then share this sync round or the next
        # (pipeline.py, group_sync.py).
        need = broker.durable.covering_round()

        async def synced() -> Any:
            try:
                await broker.durable.sync(need)
            except Exception as e:
                code = error_code_for(e, "sync for acks=-1")
                return _response(
                    version, [(t, [(i, code, -1, -1) for i, _, _, _ in ps]) for t, ps in results]
                )
            return _response(version, results)

        return Later(synced)
    if req.acks == 0:
        return None
    return _response(version, results)


def _response(version: int, results: list[tuple[str, list[tuple[int, ErrorCode, int, int]]]]) -> Any:
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
                        record_errors=(),
                        error_message=None,
                    )
                    for index, code, base, start in parts
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
