"""DescribeCluster and DescribeLogDirs (kafka-cluster, kafka-log-dirs, admin clients'
describeCluster / describeLogDirs).

walfs is one broker (node 0) with one log directory: the WAL's data directory. A
partition's size is the bytes it keeps in the byte view (its records' values plus their
newlines, from the low watermark to the end: the file view's size less what was
trimmed); the segment files hold them with some per-record overhead. retention.bytes
counts those whole segment files instead (docs/operations.md, "How much disk a size
limit uses").
"""

from __future__ import annotations

import os
from typing import Any

from walfs.kafka.api import Api
from walfs.kafka.broker import CLUSTER_ID, NODE_ID, Broker, Connection
from walfs.kafka.messages import ErrorCode, build, response_module

NO_AUTHORIZED_OPERATIONS = -(2**31)
ENDPOINT_BROKERS = 1


async def handle_describe_cluster(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(60, version)
    if getattr(req, "endpoint_type", ENDPOINT_BROKERS) != ENDPOINT_BROKERS:
        # Controller endpoints (KIP-919): walfs has no separate controller to point at.
        return build(
            mod.DescribeClusterResponse,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="walfs has no controller endpoints",
            endpoint_type=req.endpoint_type,
            cluster_id=CLUSTER_ID,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
        )
    node = build(
        mod.DescribeClusterBroker,
        broker_id=NODE_ID,
        host=conn.host,
        port=conn.port,
        rack=None,
        is_fenced=False,
    )
    return build(
        mod.DescribeClusterResponse,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=CLUSTER_ID,
        controller_id=NODE_ID,
        brokers=(node,),
        cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def _log_dir(broker: Broker, mod: Any, req: Any) -> Any:
    """The one log directory's topics and partition sizes (worker thread)."""
    engine = broker.engine
    if req.topics is None:  # every topic
        by_topic: dict[str, list[int]] = {}
        for t, p in engine.streams():
            by_topic.setdefault(t, []).append(p)
        wanted: list[tuple[str, list[int]]] = sorted(by_topic.items())
    else:
        wanted = [(t.topic, list(t.partitions)) for t in req.topics]
    topics = []
    for name, parts in wanted:
        known = broker.catalog.partition_count(name)
        rows = []
        for p in parts:
            if not 0 <= p < known:
                continue  # Kafka leaves out partitions the directory does not hold
            info = engine.info(name, p)
            rows.append(
                build(
                    mod.DescribeLogDirsPartition,
                    partition_index=p,
                    partition_size=info.byte_size - info.low_byte,
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        if rows:
            topics.append(build(mod.DescribeLogDirsTopic, name=name, partitions=tuple(rows)))
    st = os.statvfs(engine.path)
    return build(
        mod.DescribeLogDirsResult,
        error_code=ErrorCode.none,
        log_dir=os.path.abspath(engine.path),
        topics=tuple(topics),
        total_bytes=st.f_blocks * st.f_frsize,
        usable_bytes=st.f_bavail * st.f_frsize,
        is_cordoned=False,
    )


async def handle_describe_log_dirs(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(35, version)
    result = await broker.blocking(_log_dir, broker, mod, req)
    return build(mod.DescribeLogDirsResponse, error_code=ErrorCode.none, results=(result,))


HANDLERS = {
    60: Api("DescribeCluster", 0, 2, handle_describe_cluster),
    35: Api("DescribeLogDirs", 1, 5, handle_describe_log_dirs),
}
