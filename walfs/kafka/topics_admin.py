"""CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords.

walfs has one copy of everything, so replication factors other than 1 (or -1,
"broker default") are refused rather than silently ignored. Deletion is off unless
the listener was started with allow_delete (the mount's own deletion switch).
CreateTopics' configs are checked like Kafka checks them (walfs.kafka.topic_configs:
INVALID_CONFIG for a name walfs does not honour or a bad value) and stored in the
WAL's per-topic settings. DeleteRecords is a trim (Wal.trim): the new log start offset
is what ListOffsets earliest answers, and fetches below it get OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

from typing import Any

from walfs.kafka.api import Api
from walfs.kafka.broker import NODE_ID, Broker, Connection, log
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.metadata import valid_new_topic
from walfs.kafka.topic_catalog import MAX_PARTITIONS
from walfs.kafka.topic_configs import ConfigError, parse_topic_configs, store
from walfs.kafka.wal_errors import error_code_for


def _check_new_topic(broker: Broker, t: Any) -> tuple[ErrorCode, str | None, int, dict[str, Any]]:
    code, message, count = _check_name_and_count(broker, t)
    if code is not ErrorCode.none:
        return code, message, count, {}
    try:
        settings = parse_topic_configs([(c.name, c.value) for c in t.configs])
    except ConfigError as e:
        return ErrorCode.invalid_config, str(e), 0, {}
    return code, message, count, settings


def _check_name_and_count(broker: Broker, t: Any) -> tuple[ErrorCode, str | None, int]:
    if not valid_new_topic(t.name):
        return ErrorCode.invalid_topic_exception, "topic names use [A-Za-z0-9._-], 1-249 characters", 0
    if broker.catalog.partition_count(t.name) > 0:
        return ErrorCode.topic_already_exists, f"topic {t.name!r} already exists", 0
    count = len(t.assignments) if t.assignments else t.num_partitions
    if count == -1:
        count = broker.config.num_partitions
    if not 0 < count <= MAX_PARTITIONS:
        return ErrorCode.invalid_partitions, f"{count} partitions (1..{MAX_PARTITIONS})", 0
    if t.replication_factor not in (-1, 1):
        return ErrorCode.invalid_replication_factor, "walfs keeps one replica", 0
    return ErrorCode.none, None, count


def _create_topic(broker: Broker, name: str, count: int, settings: dict[str, Any]) -> None:
    """Configs first, so nothing sees the topic without them; a topic that could not be
    made leaves no settings behind for a later one of that name."""
    if settings:
        store(broker.engine, name, settings)
    try:
        broker.catalog.declare(name, count)
    except BaseException:
        if settings:
            broker.engine.set_settings(name, **{k: "default" for k in settings})
        raise


async def handle_create_topics(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(19, version)
    results = []
    for t in req.topics:
        code, message, count, settings = _check_new_topic(broker, t)
        if code is ErrorCode.none and not req.validate_only:
            try:
                await broker.blocking(_create_topic, broker, t.name, count, settings)
                log.info("%s: created topic %s with %d partition(s)", conn.peer, t.name, count)
            except Exception as e:
                code, message = error_code_for(e, f"create topic {t.name}"), str(e)
        results.append(
            build(
                mod.CreatableTopicResult,
                name=t.name,
                topic_id=None,
                error_code=code,
                error_message=message,
                num_partitions=count if code is ErrorCode.none else -1,
                replication_factor=1 if code is ErrorCode.none else -1,
                configs=(),
            )
        )
    return build(mod.CreateTopicsResponse, topics=tuple(results))


def _delete_topic(broker: Broker, topic: str) -> None:
    """Deletes the topic for real (LogEngine.delete): its space comes back, its committed
    offsets go, and creating it again starts from offset 0, as on Kafka."""
    broker.engine.delete(topic)


async def handle_delete_topics(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(20, version)
    results = []
    for name in req.topic_names or ():
        code, message = ErrorCode.none, None
        if not broker.allow_delete:
            code, message = ErrorCode.topic_deletion_disabled, "deletion is disabled on this listener"
        elif broker.catalog.partition_count(name) == 0:
            code = ErrorCode.unknown_topic_or_partition
        else:
            try:
                await broker.blocking(_delete_topic, broker, name)
                log.info("%s: deleted topic %s", conn.peer, name)
            except Exception as e:
                code, message = error_code_for(e, f"delete topic {name}"), str(e)
        results.append(build(mod.DeletableTopicResult, name=name, error_code=code, error_message=message))
    return build(mod.DeleteTopicsResponse, responses=tuple(results))


async def handle_create_partitions(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(37, version)
    names = [t.name for t in req.topics]
    results = []
    for t in req.topics:
        current = broker.catalog.partition_count(t.name)
        code, message = ErrorCode.none, None
        if names.count(t.name) > 1:
            code, message = ErrorCode.invalid_request, f"topic {t.name!r} is named more than once"
        elif current == 0:
            code, message = ErrorCode.unknown_topic_or_partition, f"topic {t.name!r} does not exist"
        elif t.count <= current:
            code = ErrorCode.invalid_partitions
            message = (  # Kafka's own words
                f"The topic {t.name} currently has {current} partition(s); "
                f"{t.count} would not be an increase."
                if t.count < current
                else f"Topic already has {current} partition(s)."
            )
        elif t.count > MAX_PARTITIONS:
            code, message = ErrorCode.invalid_partitions, f"{t.count} partitions (at most {MAX_PARTITIONS})"
        elif t.assignments is not None and (
            len(t.assignments) != t.count - current
            or any(tuple(a.broker_ids) != (NODE_ID,) for a in t.assignments)
        ):
            code = ErrorCode.invalid_replica_assignment
            message = f"walfs is one broker ({NODE_ID}) with one replica"
        elif not req.validate_only:
            try:
                await broker.blocking(broker.catalog.declare, t.name, t.count)
                log.info("%s: topic %s now has %d partitions", conn.peer, t.name, t.count)
            except Exception as e:
                code, message = error_code_for(e, f"create partitions of {t.name}"), str(e)
        results.append(
            build(mod.CreatePartitionsTopicResult, name=t.name, error_code=code, error_message=message)
        )
    return build(mod.CreatePartitionsResponse, results=tuple(results))


def _delete_records(broker: Broker, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
    """(error, new low watermark) of one DeleteRecords partition (worker thread)."""
    engine = broker.engine
    if not 0 <= partition < broker.catalog.partition_count(topic):
        return ErrorCode.unknown_topic_or_partition, -1
    try:
        high = engine.info(topic, partition).high_watermark
        if offset == -1:  # Kafka's "up to the high watermark"
            offset = high
        if not 0 <= offset <= high:
            return ErrorCode.offset_out_of_range, -1
        engine.trim(topic, partition, offset)  # durable when it returns; below the low mark: nothing
        return ErrorCode.none, engine.info(topic, partition).low_watermark
    except Exception as e:
        return error_code_for(e, f"delete records of {topic}/{partition} before {offset}"), -1


async def handle_delete_records(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(21, version)
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, low = await broker.blocking(_delete_records, broker, t.name, p.partition_index, p.offset)
            if code is ErrorCode.none:
                log.info("%s: %s/%d now starts at %d", conn.peer, t.name, p.partition_index, low)
            parts.append(
                build(
                    mod.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=code,
                )
            )
        topics.append(build(mod.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts)))
    return build(mod.DeleteRecordsResponse, topics=tuple(topics))


HANDLERS = {
    19: Api("CreateTopics", 2, 7, handle_create_topics),
    20: Api("DeleteTopics", 1, 5, handle_delete_topics),
    37: Api("CreatePartitions", 0, 3, handle_create_partitions),
    21: Api("DeleteRecords", 0, 2, handle_delete_records),
}
