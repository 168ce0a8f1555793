"""ApiVersions and Metadata: what the broker speaks and which topics it has.

The listener is the single broker (node 0) and leader of every partition; it
advertises the address the client reached it at."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from walfs.engine.names import kafka_topic_error
from walfs.kafka.api import Api, Written
from walfs.kafka.broker import CLUSTER_ID, NODE_ID, Broker, Connection
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.metadata_answer import NO_AUTHORIZED_OPERATIONS, Entry, encode_metadata_answer


def valid_new_topic(name: str) -> bool:
    """Topics created over the wire: the one name rule (walfs.engine.names) plus Kafka's alphabet."""
    return kafka_topic_error(name) is None


async def handle_api_versions(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(18, version)
    keys = tuple(
        build(mod.ApiVersion, api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(broker.api_versions.items())
    )
    return build(mod.ApiVersionsResponse, error_code=ErrorCode.none, api_keys=keys)


@lru_cache(maxsize=256)
def _partitions(mod: Any, count: int) -> tuple[Any, ...]:
    """A topic's partition list, the same for every topic of `count` partitions (the
    listener leads them all): built once per count and version, not once per topic of a
    Metadata answer for 100,000 topics. The entries are frozen: sharing them is safe."""
    return tuple(
        build(
            mod.MetadataResponsePartition,
            error_code=ErrorCode.none,
            partition_index=p,
            leader_id=NODE_ID,
            # -1: no leader epochs here, which also keeps clients from sending
            # OffsetForLeaderEpoch to validate their positions.
            leader_epoch=-1,
            replica_nodes=(NODE_ID,),
            isr_nodes=(NODE_ID,),
            offline_replicas=(),
        )
        for p in range(count)
    )


async def handle_metadata(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(3, version)
    catalog = broker.catalog
    if req.topics is None or (version == 0 and not req.topics):
        names = catalog.topics()  # null (v0: empty) asks for every topic
    else:
        names = [t.name for t in req.topics if t.name is not None]
    # v0-v3 have no flag; Kafka auto-creates there when the broker allows it
    # (auto.create.topics.enable), with the broker's num.partitions.
    auto_create = getattr(req, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
    new_partitions = broker.config.num_partitions
    entries: list[Entry] = []
    for name in names:
        count = catalog.partition_count(name)
        error = ErrorCode.none
        if count == 0:
            if not valid_new_topic(name):
                error = ErrorCode.invalid_topic_exception
            elif auto_create:
                await broker.blocking(catalog.declare, name, new_partitions)
                count = new_partitions
            else:
                error = ErrorCode.unknown_topic_or_partition
        entries.append((name, error, count))
    broker_entry = build(
        mod.MetadataResponseBroker, node_id=NODE_ID, host=conn.host, port=conn.port, rack=None
    )
    envelope = {
        "brokers": (broker_entry,),
        "cluster_id": CLUSTER_ID,
        "controller_id": NODE_ID,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
    # Written in wire form (metadata_answer.py): an answer for 100,000 topics costs their
    # names, not 100,000 of kio's dataclasses.
    return Written(
        lambda correlation_id: encode_metadata_answer(correlation_id, version, envelope, entries, _partitions)
    )


HANDLERS = {
    18: Api("ApiVersions", 0, 4, handle_api_versions),
    3: Api("Metadata", 0, 12, handle_metadata),
}
