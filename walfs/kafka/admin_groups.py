"""ListGroups, DescribeGroups, DeleteGroups and OffsetDelete (kafka-consumer-groups, the
admin clients' group calls).

One set of groups: those with members in the coordinator (Kafka consumers now) and those
in the engine's cursor store (every group that ever committed: Kafka consumers, walfs
consumers of the Python API, readers of the mount's ``.consumers/<group>/<topic>``, and
groups made with ``mkdir .consumers/<group>``). A group without members is "Empty", as a
Kafka group that only has committed offsets is; its lag is what kafka-consumer-groups
computes from OffsetFetch and ListOffsets. Deleting a group deletes its offsets (so its
``.consumers`` directory goes too), and only when it has no members, as on Kafka.
"""

from __future__ import annotations

from typing import Any

from walfs.engine.names import topic_bytes
from walfs.kafka.api import Api
from walfs.kafka.broker import Broker, Connection, log
from walfs.kafka.group_coordinator import Group, State
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.wal_errors import error_code_for

NO_AUTHORIZED_OPERATIONS = -(2**31)
GROUP_TYPE = "classic"  # Kafka's name for the JoinGroup/SyncGroup protocol walfs runs
PROTOCOL_TYPE = "consumer"


def _valid_group_id(group_id: str) -> bool:
    try:
        topic_bytes(group_id)  # groups obey the name rule topics do (they are directories)
    except Exception:
        return False
    return True


def _live(broker: Broker, group_id: str) -> Group | None:
    """The coordinator's group when it has members."""
    g = broker.groups.describe(group_id)
    return g if g is not None and g.members else None


def _state(g: Group | None) -> str:
    return g.state.value if g is not None else State.EMPTY.value


async def _all_groups(broker: Broker) -> list[str]:
    stored = await broker.blocking(broker.engine.groups)
    live = [gid for gid in broker.groups.group_ids() if _live(broker, gid) is not None]
    return sorted(set(stored) | set(live))


async def _exists(broker: Broker, group_id: str) -> bool:
    if _live(broker, group_id) is not None:
        return True
    return group_id in await broker.blocking(broker.engine.groups)


async def handle_list_groups(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(16, version)
    states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    out = []
    if not types or GROUP_TYPE in types:
        for gid in await _all_groups(broker):
            g = _live(broker, gid)
            state = _state(g)
            if states and state.lower() not in states:
                continue
            out.append(
                build(
                    mod.ListedGroup,
                    group_id=gid,
                    protocol_type=(g.protocol_type if g else None) or PROTOCOL_TYPE,
                    group_state=state,
                    group_type=GROUP_TYPE,
                )
            )
    return build(mod.ListGroupsResponse, error_code=ErrorCode.none, groups=tuple(out))


async def handle_describe_groups(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(15, version)
    out = []
    for gid in req.groups:
        g = _live(broker, gid)
        exists = g is not None or await _exists(broker, gid)
        if not exists:
            # v6 (KIP-1043) says so with an error; older versions answer a "Dead" group.
            code = ErrorCode.group_id_not_found if version >= 6 else ErrorCode.none
            out.append(
                build(
                    mod.DescribedGroup,
                    error_code=code,
                    error_message=f"group {gid!r} does not exist" if version >= 6 else None,
                    group_id=gid,
                    group_state="Dead",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=NO_AUTHORIZED_OPERATIONS,
                )
            )
            continue
        members = []
        if g is not None:
            for m in g.members.values():
                metadata = dict(m.protocols).get(g.protocol_name or "", b"")
                members.append(
                    build(
                        mod.DescribedGroupMember,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host="",
                        member_metadata=metadata,
                        member_assignment=m.assignment,
                    )
                )
        out.append(
            build(
                mod.DescribedGroup,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=gid,
                group_state=_state(g),
                protocol_type=(g.protocol_type if g else None) or PROTOCOL_TYPE,
                protocol_data=(g.protocol_name if g else None) or "",
                members=tuple(members),
                authorized_operations=NO_AUTHORIZED_OPERATIONS,
            )
        )
    return build(mod.DescribeGroupsResponse, groups=tuple(out))


async def handle_delete_groups(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(42, version)
    out = []
    for gid in req.groups_names:
        if not _valid_group_id(gid):
            code = ErrorCode.invalid_group_id
        elif _live(broker, gid) is not None:
            code = ErrorCode.non_empty_group
        else:
            try:
                existed = await broker.blocking(broker.engine.forget, gid)
                broker.groups.forget(gid)
                code = ErrorCode.none if existed else ErrorCode.group_id_not_found
                if existed:
                    log.info("%s: deleted consumer group %s", conn.peer, gid)
            except Exception as e:
                code = error_code_for(e, f"delete group {gid}")
        out.append(build(mod.DeletableGroupResult, group_id=gid, error_code=code))
    return build(mod.DeleteGroupsResponse, results=tuple(out))


async def handle_offset_delete(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(47, version)
    gid = req.group_id

    def reply(code: ErrorCode, topics: tuple[Any, ...] = ()) -> Any:
        return build(mod.OffsetDeleteResponse, error_code=code, topics=topics)

    if not _valid_group_id(gid):
        return reply(ErrorCode.invalid_group_id)
    if not await _exists(broker, gid):
        return reply(ErrorCode.group_id_not_found)
    # Members are consuming: walfs does not decode their subscriptions, so every partition
    # is treated as subscribed (Kafka refuses only the subscribed topics' partitions).
    active = _live(broker, gid) is not None

    def delete_all() -> list[Any]:
        topics = []
        for t in req.topics:
            known = broker.catalog.partition_count(t.name)
            parts = []
            for p in t.partitions:
                i = p.partition_index
                if not 0 <= i < known:
                    code = ErrorCode.unknown_topic_or_partition
                elif active:
                    code = ErrorCode.group_subscribed_to_topic
                else:
                    try:
                        broker.engine.forget(gid, t.name, i)
                        code = ErrorCode.none
                    except Exception as e:
                        code = error_code_for(e, f"offset delete {gid} {t.name}/{i}")
                parts.append(build(mod.OffsetDeleteResponsePartition, partition_index=i, error_code=code))
            topics.append(build(mod.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(parts)))
        return topics

    return reply(ErrorCode.none, tuple(await broker.blocking(delete_all)))


HANDLERS = {
    16: Api("ListGroups", 0, 5, handle_list_groups),
    15: Api("DescribeGroups", 0, 6, handle_describe_groups),
    42: Api("DeleteGroups", 0, 2, handle_delete_groups),
    47: Api("OffsetDelete", 0, 0, handle_offset_delete),
}
