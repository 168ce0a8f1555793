"""State shared by every connection of one listener: the WAL, the topic catalog,
the group coordinator and the thread pools that keep blocking WAL calls off the
trio thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from walfs.kafka.broker_config import BrokerConfig
from walfs.kafka.group_coordinator import GroupCoordinator
from walfs.kafka.group_sync import GroupSync
from walfs.kafka.producer_ids import ProducerIds
from walfs.kafka.record_times import RecordTimes
from walfs.kafka.topic_catalog import TopicCatalog

if TYPE_CHECKING:
    from walfs.engine_api import LogEngine
    from walfs.kafka.sasl import SaslSession

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


@dataclass
class Broker:
    wal: LogEngine
    allow_delete: bool = False
    # Kafka's broker settings (num.partitions, message.max.bytes, ...).
    config: BrokerConfig = field(default_factory=BrokerConfig)
    # What ApiVersions advertises (filled from the dispatch table by the listener).
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    catalog: TopicCatalog = field(init=False)
    groups: GroupCoordinator = field(init=False)
    # Syncs for acks=all answers, one round for all who wait at once (group_sync.py).
    durable: GroupSync = field(init=False)
    producer_ids: ProducerIds = field(default_factory=ProducerIds)
    record_times: RecordTimes = field(default_factory=RecordTimes)  # ListOffsets by timestamp
    # Separate limiters: long-poll waits may park many threads for up to max_wait_ms,
    # and they must never starve appends and syncs of threads.
    io_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(16))
    wait_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(256))
    # walfs.metrics.Latency of requests by API name when metrics are on (None: off).
    request_latency: Any = None

    def __post_init__(self) -> None:
        self.catalog = TopicCatalog(self.wal)
        self.groups = GroupCoordinator(self.wal)
        self.durable = GroupSync(self.wal.sync, self.io_limiter)

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a WAL call that may block (append under fsync=always, sync) in a
        worker thread."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self.io_limiter)

    def appends_in_place(self, unsynced: bool) -> bool:
        """Whether a produce tries its appends on the event loop (LogEngine.append_nowait,
        walfs/kafka/produce.py): with an engine that has an fsync policy (the local one; the
        cluster engine's appends are round trips), when the append would not wait for
        durability: "never" and "interval" always, "always" only for an ``unsynced``
        append (acks=-1, synced by the listener before it answers)."""
        fsync = getattr(self.wal, "fsync", None)
        return fsync in ("never", "interval") or (fsync == "always" and unsynced)

    @property
    def acks_all_syncs(self) -> bool:
        """Whether an acks=-1 answer waits for a ``wal.sync()``: under the engine's fsync
        policy, the one durability policy (docs/durability.md). "never": no, acks=-1 is
        answered once the records are in the log (the page cache, which survives SIGKILL
        of the process but not a power cut), as Kafka's single broker answers acks=all
        without an fsync. "interval", "always" (and any other engine): yes; the records
        are appended without the engine's own wait (``append_unsynced``), so under
        "always" too the connection reads its next requests while the sync runs, and the
        answers waiting at once share it (walfs/kafka/produce.py)."""
        return getattr(self.wal, "fsync", None) != "never"
