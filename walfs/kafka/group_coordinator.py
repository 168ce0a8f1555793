"""The consumer-group coordinator: membership, generations and rebalances (the
classic JoinGroup/SyncGroup protocol) in memory, committed offsets in the engine's
cursor store (durable, shared with walfs consumers).

Group state after a restart: members are forgotten and their next Heartbeat or
commit gets UNKNOWN_MEMBER_ID, which makes them rejoin; offsets survive.

States follow Kafka's: EMPTY -> PREPARING (waiting for members to (re)join) ->
COMPLETING (joined; waiting for the leader's assignment) -> STABLE.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine

log = logging.getLogger("walfs.kafka.groups")

# Kafka's group.initial.rebalance.delay.ms is 3 s; a shorter wait still lets consumers
# started together land in one generation without slowing a lone consumer's start.
INITIAL_REBALANCE_DELAY_S = 0.5
HOUSEKEEPING_PERIOD_S = 0.2


class GroupError(Exception):
    """A request the group rejects; ``code`` is the Kafka error code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_SESSION_TIMEOUT = 26


class State(Enum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"


@dataclass
class Member:
    member_id: str
    client_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_s: float
    rebalance_timeout_s: float
    last_seen: float
    group_instance_id: str | None = None
    assignment: bytes = b""


@dataclass
class JoinResult:
    generation: int
    protocol_name: str
    leader: str
    members: list[tuple[str, str | None, bytes]]  # (member_id, instance id, metadata)


@dataclass
class Round:
    """One rebalance: joiners wait on ``joined``, followers on ``synced``."""

    deadline: float
    joined: trio.Event = field(default_factory=trio.Event)
    synced: trio.Event = field(default_factory=trio.Event)
    result: JoinResult | None = None
    rejoined: set[str] = field(default_factory=set)
    assignments: dict[str, bytes] | None = None


@dataclass
class Group:
    group_id: str
    state: State = State.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    round: Round | None = None


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    client_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_s: float
    rebalance_timeout_s: float


class GroupCoordinator:
    def __init__(self, engine: LogEngine, initial_delay_s: float = INITIAL_REBALANCE_DELAY_S) -> None:
        self._engine = engine
        self._groups: dict[str, Group] = {}
        self._initial_delay_s = initial_delay_s

    def _group(self, group_id: str) -> Group:
        g = self._groups.get(group_id)
        if g is None:
            g = self._groups[group_id] = Group(group_id)
        return g

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def describe(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def forget(self, group_id: str) -> None:
        """Drops a group without members (DeleteGroups); a group with members stays."""
        g = self._groups.get(group_id)
        if g is not None and not g.members:
            del self._groups[group_id]

    # -- rebalancing -----------------------------------------------------------

    def _start_round(self, g: Group, now: float, initial: bool) -> Round:
        if g.round is not None and g.state is State.COMPLETING:
            # Followers waiting for the leader's assignment learn that it will not come.
            g.round.synced.set()
        timeout = max((m.rebalance_timeout_s for m in g.members.values()), default=0.0)
        wait = self._initial_delay_s if initial else timeout
        g.round = Round(deadline=now + wait)
        g.state = State.PREPARING
        log.info("group %s: rebalancing (generation %d)", g.group_id, g.generation)
        return g.round

    def _maybe_complete(self, g: Group, now: float) -> None:
        r = g.round
        if g.state is not State.PREPARING or r is None:
            return
        all_in = bool(g.members) and all(m in r.rejoined for m in g.members)
        if not all_in and now < r.deadline:
            return
        if all_in and g.generation == 0 and now < r.deadline:
            return  # the first generation waits out the initial delay for more joiners
        for mid in [m for m in g.members if m not in r.rejoined]:
            log.info("group %s: member %s did not rejoin in time", g.group_id, mid)
            del g.members[mid]
        if not g.members:
            g.state = State.EMPTY
            g.generation += 1
            g.leader = g.protocol_name = g.protocol_type = None
            r.joined.set()
            return
        first = next(iter(g.members.values()))
        common = set.intersection(*({p for p, _ in m.protocols} for m in g.members.values()))
        protocol = next(p for p, _ in first.protocols if p in common)
        if g.leader not in g.members:
            g.leader = first.member_id
        g.generation += 1
        g.protocol_name = protocol
        g.state = State.COMPLETING
        assert g.leader is not None
        r.result = JoinResult(
            generation=g.generation,
            protocol_name=protocol,
            leader=g.leader,
            members=[
                (m.member_id, m.group_instance_id, dict(m.protocols)[protocol]) for m in g.members.values()
            ],
        )
        log.info(
            "group %s: generation %d with %d member(s), protocol %s",
            g.group_id,
            g.generation,
            len(g.members),
            protocol,
        )
        r.joined.set()

    async def join(self, req: JoinRequest) -> tuple[str, JoinResult]:
        now = trio.current_time()
        g = self._group(req.group_id)
        member_id = req.member_id
        if member_id and member_id not in g.members:
            raise GroupError(UNKNOWN_MEMBER_ID)
        if g.members and g.protocol_type not in (None, req.protocol_type):
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL)
        others = [m for mid, m in g.members.items() if mid != member_id]
        offered = {p for p, _ in req.protocols}
        if not offered or any(not offered & {p for p, _ in m.protocols} for m in others):
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL)
        if req.session_timeout_s <= 0:
            raise GroupError(INVALID_SESSION_TIMEOUT)
        if not member_id:
            member_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
        g.members[member_id] = Member(
            member_id=member_id,
            client_id=req.client_id,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            session_timeout_s=req.session_timeout_s,
            rebalance_timeout_s=req.rebalance_timeout_s,
            last_seen=now,
            group_instance_id=req.group_instance_id,
        )
        g.protocol_type = req.protocol_type
        r = g.round
        if g.state is not State.PREPARING or r is None:
            r = self._start_round(g, now, initial=g.state is State.EMPTY)
        r.rejoined.add(member_id)
        self._maybe_complete(g, now)
        await r.joined.wait()
        if r.result is None or member_id not in g.members:
            raise GroupError(UNKNOWN_MEMBER_ID)
        return member_id, r.result

    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes]
    ) -> bytes:
        g = self._check_member(group_id, generation, member_id)
        if g.state is State.PREPARING:
            raise GroupError(REBALANCE_IN_PROGRESS)
        r = g.round
        if g.state is State.COMPLETING and r is not None:
            if member_id == g.leader:
                r.assignments = dict(assignments)
                for mid, m in g.members.items():
                    m.assignment = assignments.get(mid, b"")
                g.state = State.STABLE
                r.synced.set()
            else:
                await r.synced.wait()
                if g.round is not r or g.state is not State.STABLE:
                    raise GroupError(REBALANCE_IN_PROGRESS)
        current = g.members.get(member_id)
        if current is None:
            raise GroupError(UNKNOWN_MEMBER_ID)
        return current.assignment

    def _check_member(self, group_id: str, generation: int, member_id: str) -> Group:
        g = self._groups.get(group_id)
        if g is None or member_id not in g.members:
            raise GroupError(UNKNOWN_MEMBER_ID)
        g.members[member_id].last_seen = trio.current_time()
        if generation != g.generation and g.state is not State.PREPARING:
            raise GroupError(ILLEGAL_GENERATION)
        return g

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> None:
        g = self._check_member(group_id, generation, member_id)
        if g.state is State.PREPARING:
            raise GroupError(REBALANCE_IN_PROGRESS)
        if generation != g.generation:
            raise GroupError(ILLEGAL_GENERATION)

    def leave(self, group_id: str, member_id: str) -> bool:
        g = self._groups.get(group_id)
        if g is None or member_id not in g.members:
            return False
        del g.members[member_id]
        log.info("group %s: member %s left", g.group_id, member_id)
        now = trio.current_time()
        if g.state is State.PREPARING:
            self._maybe_complete(g, now)
        elif g.members:
            self._start_round(g, now, initial=False)
        else:
            if g.round is not None:
                g.round.synced.set()
            g.state = State.EMPTY
            g.generation += 1
            g.leader = g.protocol_name = g.protocol_type = None
        return True

    def check_commit(self, group_id: str, generation: int, member_id: str) -> None:
        """Commits from a generation's members must match it; commits with
        generation -1 (a consumer using assign(), kcat -G is not one) are free."""
        if generation < 0 and not member_id:
            return
        g = self._check_member(group_id, generation, member_id)
        if g.state is State.PREPARING:
            raise GroupError(REBALANCE_IN_PROGRESS)
        if generation != g.generation:
            raise GroupError(ILLEGAL_GENERATION)

    # -- housekeeping ------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Drop members whose session lapsed; finish rebalances whose time is up."""
        for g in list(self._groups.values()):
            waiting = g.round.rejoined if g.state is State.PREPARING and g.round else set()
            for mid, m in list(g.members.items()):
                if mid not in waiting and now - m.last_seen > m.session_timeout_s:
                    log.info("group %s: member %s session expired", g.group_id, mid)
                    self.leave(g.group_id, mid)
            self._maybe_complete(g, now)

    async def run(self) -> None:
        """Housekeeping loop; runs in the listener's nursery until cancelled."""
        while True:
            await trio.sleep(HOUSEKEEPING_PERIOD_S)
            self.expire(trio.current_time())
