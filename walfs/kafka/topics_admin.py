"""CreateTopics and DeleteTopics.

walfs has one copy of everything, so replication factors other than 1 (or -1,
"broker default") are refused rather than silently ignored. Deletion is off unless
the listener was started with allow_delete (the mount's own deletion switch)."""

from __future__ import annotations

from typing import Any

from walfs.kafka.api import Api
from walfs.kafka.broker import Broker, Connection, log
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.metadata import valid_new_topic
from walfs.kafka.topic_catalog import DEFAULT_PARTITIONS, MAX_PARTITIONS
from walfs.kafka.wal_errors import error_code_for


def _check_new_topic(broker: Broker, t: Any) -> tuple[ErrorCode, str | None, int]:
    if not valid_new_topic(t.name):
        return ErrorCode.invalid_topic_exception, "topic names use [A-Za-z0-9._-], 1-249 characters", 0
    if broker.catalog.partition_count(t.name) > 0:
        return ErrorCode.topic_already_exists, f"topic {t.name!r} already exists", 0
    count = len(t.assignments) if t.assignments else t.num_partitions
    if count == -1:
        count = DEFAULT_PARTITIONS
    if not 0 < count <= MAX_PARTITIONS:
        return ErrorCode.invalid_partitions, f"{count} partitions (1..{MAX_PARTITIONS})", 0
    if t.replication_factor not in (-1, 1):
        return ErrorCode.invalid_replication_factor, "walfs keeps one replica", 0
    return ErrorCode.none, None, count


async def handle_create_topics(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(19, version)
    results = []
    for t in req.topics:
        code, message, count = _check_new_topic(broker, t)
        if code is ErrorCode.none and not req.validate_only:
            try:
                await broker.blocking(broker.catalog.declare, t.name, count)
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
    broker.wal.delete(topic)


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


HANDLERS = {
    19: Api("CreateTopics", 2, 7, handle_create_topics),
    20: Api("DeleteTopics", 1, 5, handle_delete_topics),
}
