"""State shared by every connection of one listener: the WAL, the topic catalog,
the group coordinator and the thread pools that keep blocking WAL calls off the
trio thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from walfs.engine.capabilities import NoWaitAppend, has
from walfs.kafka.broker_config import BrokerConfig
from walfs.kafka.fetch_ahead import NextBatches, on_change
from walfs.kafka.group_coordinator import GroupCoordinator
from walfs.kafka.group_sync import GroupSync
from walfs.kafka.producer_ids import ProducerIds
from walfs.kafka.record_times import RecordTimes
from walfs.kafka.topic_catalog import TopicCatalog

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine
    from walfs.kafka.sasl_session import SaslSession

log = logging.getLogger("walfs.kafka")

T = TypeVar("T")

NODE_ID = 0  # the single broker; Metadata and FindCoordinator both name it
CLUSTER_ID = "walfs"


@dataclass
class Connection:
    """What a handler needs to know about the connection it answers on."""

    peer: str
    # The address the client reached us at is what we advertise back: it works for
    # a listener bound to 0.0.0.0 as well as to 127.0.0.1.
    host: str
    port: int
    client_id: str | None = None
    # The connection's SASL state on a SASL listener (None on others).
    sasl: SaslSession | None = None
    # Work a handler leaves for after its answer is out, run by the listener only when
    # the answer went out whole and no request waits (the fetch's read-ahead).
    after_answer: Callable[[], None] | None = None
    # The batches read ahead for this connection's next fetch (walfs/kafka/fetch_ahead.py).
    fetch_ahead: NextBatches | None = None


@dataclass
class Broker:
    engine: LogEngine
    allow_delete: bool = False
    # Kafka's broker settings (num.partitions, message.max.bytes, ...).
    config: BrokerConfig = field(default_factory=BrokerConfig)
    # What ApiVersions advertises (filled from the dispatch table by the listener).
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    catalog: TopicCatalog = field(init=False)
    # Whether the engine can append without waiting (capabilities.NoWaitAppend).
    nowait_appends: bool = field(init=False)
    groups: GroupCoordinator = field(init=False)
    # Syncs for acks=all answers, one round for all who wait at once (group_sync.py).
    durable: GroupSync = field(init=False)
    producer_ids: ProducerIds = field(default_factory=ProducerIds)
    record_times: RecordTimes = field(default_factory=RecordTimes)  # ListOffsets by timestamp
    # Separate limiters: long-poll waits may park many threads for up to max_wait_ms,
    # and they must never starve appends and syncs of threads.
    io_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(16))
    wait_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(256))
    # walfs.common.metrics.Latency of requests by API name when metrics are on (None: off).
    request_latency: Any = None
    # Bytes every connection's fetch read-ahead may still keep (walfs/kafka/fetch_ahead.py).
    ahead_budget: int = field(default=64 << 20, init=False)
    # Topics created or deleted since the read-ahead began watching (it drops what it kept).
    topic_changes: int = field(default=0, init=False)
    # Set once the read-ahead's watcher is registered (for the broker's life: registered
    # only then, because a watcher costs every append a call).
    _stop_watching: Callable[[], None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.nowait_appends = has(self.engine, NoWaitAppend)
        self.catalog = TopicCatalog(self.engine)
        self.groups = GroupCoordinator(self.engine)
        self.durable = GroupSync(self.engine.sync, self.io_limiter)

    def watch_topic_changes(self) -> int:
        """topic_changes, counted from the first call on (LogEngine.watch)."""
        if self._stop_watching is None:
            self._stop_watching = self.engine.watch(lambda change: on_change(self, change))
        return self.topic_changes

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a WAL call that may block (append under fsync=always, sync) in a
        worker thread."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self.io_limiter)

    def appends_in_place(self, unsynced: bool) -> bool:
        """Whether a produce tries its appends on the event loop (capabilities.NoWaitAppend,
        walfs/kafka/produce.py): with an engine that can append without waiting (the local
        one; the cluster engine's appends are round trips), when the append would not wait
        for durability: "never" and "interval" always, "always" only for an ``unsynced``
        append (one whose answer waits for the shared sync round: answer_syncs)."""
        if not self.nowait_appends:
            return False
        fsync = self.engine.fsync
        return fsync in ("never", "interval") or (fsync == "always" and unsynced)

    def answer_syncs(self, acks: int) -> bool:
        """Whether a produce's answer waits for the shared sync round (``durable``, one
        ``wal.sync()`` for every answer waiting at once) under the engine's fsync policy,
        the one durability policy (docs/durability.md). When it does, the records are
        appended without the engine's own wait (``append(wait=False)``): the shared round is
        the produce path's only durability wait, and the connection reads its next
        requests while it runs (walfs/kafka/produce.py).

        - acks=-1: yes under "interval" and "always" (and any engine without a policy);
          no under "never": answered once the records are in the log (the page cache,
          which survives SIGKILL of the process but not a power cut), as Kafka's single
          broker answers acks=all without an fsync.
        - acks=1: under "always" only, where every append is durable before it is
          reported; under "interval" and "never" it is answered once in the log, as
          any append of those policies returns.
        - acks=0: no (there is no answer; the append takes the engine's own policy)."""
        fsync = self.engine.fsync
        if acks == -1:
            return fsync != "never"
        return acks == 1 and fsync == "always"
