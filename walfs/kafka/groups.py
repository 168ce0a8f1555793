"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup (membership, in walfs.kafka.group_coordinator) and OffsetCommit,
OffsetFetch (the engine's cursor store: ``wal.commit_offset`` is durable when it
returns, so a commit acknowledged here survives a crash)."""

from __future__ import annotations

from typing import Any

from walfs.engine.capabilities import CommitMany, has
from walfs.engine.names import topic_bytes
from walfs.engine.rules import committed_offsets
from walfs.engine.types import MAX_METADATA_BYTES
from walfs.kafka.api import Api
from walfs.kafka.broker import NODE_ID, Broker, Connection
from walfs.kafka.group_coordinator import GroupError, JoinRequest
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.wal_errors import error_code_for


async def handle_find_coordinator(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(10, version)
    if version >= 4:
        return build(
            mod.FindCoordinatorResponse,
            coordinators=tuple(
                build(
                    mod.Coordinator,
                    key=key,
                    node_id=NODE_ID,
                    host=conn.host,
                    port=conn.port,
                    error_code=ErrorCode.none,
                    error_message=None,
                )
                for key in req.coordinator_keys
            ),
        )
    return build(
        mod.FindCoordinatorResponse,
        error_code=ErrorCode.none,
        error_message=None,
        node_id=NODE_ID,
        host=conn.host,
        port=conn.port,
    )


async def handle_join_group(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(11, version)
    session_s = req.session_timeout.total_seconds()
    rebalance = getattr(req, "rebalance_timeout", None)
    rebalance_s = rebalance.total_seconds() if rebalance is not None else -1.0
    join = JoinRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        client_id=conn.client_id or "",
        group_instance_id=getattr(req, "group_instance_id", None),
        protocol_type=req.protocol_type,
        protocols=[(p.name, p.metadata) for p in req.protocols],
        session_timeout_s=session_s,
        rebalance_timeout_s=rebalance_s if rebalance_s > 0 else session_s,
    )
    try:
        member_id, result = await broker.groups.join(join)
    except GroupError as e:
        return build(
            mod.JoinGroupResponse,
            error_code=ErrorCode(e.code),
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",
            leader="",
            skip_assignment=False,
            member_id=req.member_id,
            members=(),
        )
    members = ()
    if member_id == result.leader:
        members = tuple(
            build(mod.JoinGroupResponseMember, member_id=mid, group_instance_id=gi, metadata=md)
            for mid, gi, md in result.members
        )
    return build(
        mod.JoinGroupResponse,
        error_code=ErrorCode.none,
        generation_id=result.generation,
        protocol_type=req.protocol_type,
        protocol_name=result.protocol_name,
        leader=result.leader,
        skip_assignment=False,
        member_id=member_id,
        members=members,
    )


async def handle_sync_group(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(14, version)
    assignments = {a.member_id: a.assignment for a in req.assignments}
    try:
        assignment = await broker.groups.sync(req.group_id, req.generation_id, req.member_id, assignments)
        code = ErrorCode.none
    except GroupError as e:
        assignment, code = b"", ErrorCode(e.code)
    g = broker.groups.describe(req.group_id)
    return build(
        mod.SyncGroupResponse,
        error_code=code,
        protocol_type=g.protocol_type if g else None,
        protocol_name=g.protocol_name if g else None,
        assignment=assignment,
    )


async def handle_heartbeat(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(12, version)
    try:
        broker.groups.heartbeat(req.group_id, req.generation_id, req.member_id)
        code = ErrorCode.none
    except GroupError as e:
        code = ErrorCode(e.code)
    return build(mod.HeartbeatResponse, error_code=code)


async def handle_leave_group(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(13, version)
    if version < 3:
        left = broker.groups.leave(req.group_id, req.member_id)
        code = ErrorCode.none if left else ErrorCode.unknown_member_id
        return build(mod.LeaveGroupResponse, error_code=code)
    members = []
    for m in req.members:
        left = broker.groups.leave(req.group_id, m.member_id)
        members.append(
            build(
                mod.MemberResponse,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=ErrorCode.none if left else ErrorCode.unknown_member_id,
            )
        )
    return build(mod.LeaveGroupResponse, error_code=ErrorCode.none, members=tuple(members))


async def handle_offset_commit(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(8, version)
    generation = getattr(req, "generation_id_or_member_epoch", -1)
    group_code = ErrorCode.none
    try:
        broker.groups.check_commit(req.group_id, generation, req.member_id)
    except GroupError as e:
        group_code = ErrorCode(e.code)
    if not _storable_group(req.group_id):
        group_code = ErrorCode.invalid_group_id

    def commit_all() -> list[Any]:
        codes: list[list[ErrorCode]] = []  # per topic of the request, per partition
        todo: list[tuple[str, int, int, str]] = []
        at: list[tuple[int, int]] = []  # where each of todo answers
        for ti, t in enumerate(req.topics):
            known = broker.catalog.partition_count(t.name)
            codes.append([])
            for pi, p in enumerate(t.partitions):
                code = group_code
                if code is ErrorCode.none and not 0 <= p.partition_index < known:
                    # Kafka answers a commit to a topic or partition it does not have
                    # with UNKNOWN_TOPIC_OR_PARTITION (not the engine's range check).
                    code = ErrorCode.unknown_topic_or_partition
                metadata = p.committed_metadata or ""  # Kafka keeps a null as ""
                if code is ErrorCode.none and len(metadata.encode("utf-8")) > MAX_METADATA_BYTES:
                    code = ErrorCode.offset_metadata_too_large  # offset.metadata.max.bytes
                codes[ti].append(code)
                if code is ErrorCode.none:
                    todo.append((t.name, p.partition_index, p.committed_offset, metadata))
                    at.append((ti, pi))
        for (name, index, _offset, _metadata), (ti, pi), result in zip(
            todo, at, commit_each(todo), strict=True
        ):
            if isinstance(result, Exception):
                codes[ti][pi] = error_code_for(result, f"commit {req.group_id} {name}/{index}")
        return [
            build(
                mod.OffsetCommitResponseTopic,
                name=t.name,
                partitions=tuple(
                    build(
                        mod.OffsetCommitResponsePartition, partition_index=p.partition_index, error_code=code
                    )
                    for p, code in zip(t.partitions, codes[ti], strict=True)
                ),
            )
            for ti, t in enumerate(req.topics)
        ]

    def commit_each(todo: list[tuple[str, int, int, str]]) -> list[bool | Exception]:
        """One commit_many where the engine has it (the local engine: one manifest change
        for a group's new cursors), else LogEngine.commit per partition."""
        engine = broker.engine
        if len(todo) > 1 and has(engine, CommitMany):
            return engine.commit_many(req.group_id, todo)
        out: list[bool | Exception] = []
        for name, index, offset, metadata in todo:
            try:
                out.append(engine.commit(req.group_id, name, index, offset, metadata=metadata))
            except Exception as e:
                out.append(e)
        return out

    topics = await broker.blocking(commit_all)
    return build(mod.OffsetCommitResponse, topics=tuple(topics))


async def handle_offset_fetch(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(9, version)
    engine = broker.engine

    def fetch_all() -> tuple[list[Any], ErrorCode]:
        out = []
        asked: list[tuple[str, Any]] = [(t.name, t.partition_indexes) for t in req.topics or ()]
        if req.topics is None:  # everything the group committed
            by_topic: dict[str, list[int]] = {}
            try:
                committed = committed_offsets(engine, req.group_id)
            except Exception as e:  # a damaged cursor file
                return [], error_code_for(e, f"offset fetch {req.group_id}")
            for topic, p in sorted(committed):
                by_topic.setdefault(topic, []).append(p)
            asked = list(by_topic.items())
        for name, indexes in asked:
            known = broker.catalog.partition_count(name)
            if indexes is None:
                indexes = range(known)
            parts = []
            for p in indexes:
                if not 0 <= p < known:
                    parts.append(
                        build(
                            mod.OffsetFetchResponsePartition,
                            partition_index=p,
                            committed_offset=-1,
                            committed_leader_epoch=-1,
                            metadata="",
                            error_code=ErrorCode.unknown_topic_or_partition,
                        )
                    )
                    continue
                try:
                    entry = engine.committed(req.group_id, name, p)
                    code = ErrorCode.none
                except Exception as e:
                    entry, code = None, error_code_for(e, f"offset fetch {req.group_id} {name}/{p}")
                parts.append(
                    build(
                        mod.OffsetFetchResponsePartition,
                        partition_index=p,
                        committed_offset=-1 if entry is None else entry[0],
                        committed_leader_epoch=-1,
                        metadata="" if entry is None else entry[1],
                        error_code=code,
                    )
                )
            out.append(build(mod.OffsetFetchResponseTopic, name=name, partitions=tuple(parts)))
        return out, ErrorCode.none

    if not _storable_group(req.group_id):
        return build(mod.OffsetFetchResponse, topics=(), error_code=ErrorCode.invalid_group_id)
    topics, code = await broker.blocking(fetch_all)
    return build(mod.OffsetFetchResponse, topics=tuple(topics), error_code=code)


def _storable_group(group: str) -> bool:
    """Group ids walfs can keep offsets for: the one name rule (walfs.engine.names), which Kafka
    does not have (it accepts "" too); others get INVALID_GROUP_ID."""
    try:
        topic_bytes(group)
    except ValueError:
        return False
    return True


HANDLERS = {
    10: Api("FindCoordinator", 0, 4, handle_find_coordinator),
    11: Api("JoinGroup", 0, 9, handle_join_group),
    14: Api("SyncGroup", 0, 5, handle_sync_group),
    12: Api("Heartbeat", 0, 4, handle_heartbeat),
    13: Api("LeaveGroup", 0, 5, handle_leave_group),
    8: Api("OffsetCommit", 2, 8, handle_offset_commit),
    9: Api("OffsetFetch", 1, 7, handle_offset_fetch),
}
