"""KafkaEngine: walfs on an Apache Kafka cluster, behind the engine interface (issue 16).

    kafka://HOST:PORT[,HOST:PORT...]/NAMESPACE[?regions=N]

The local C core stays the embedded default; this engine is where walfs goes when one
machine is not enough. Kafka replicates; walfs adds no replication of its own. An append
returns once Kafka acknowledged it (acks=all, idempotent producer, the topic's
min.insync.replicas) and this engine's replay has passed it. Where this engine differs from
the local one is listed in docs/cluster.md.

KafkaEngine is the public class; it composes one collaborator per concern (as Kafka's
UnifiedLog composes its LocalLog and segments), each in its own module of walfs/cluster/:

    layout.py     the target URL, the two topics, stream keys and regions, the record formats
    clients.py    the Kafka clients: topics made, partition ends, one acknowledged produce
    state.py      the replayed streams and positions (StreamState), one lock, the waits
    chunks.py     data records (chunks) both ways, and their bodies' cache and fetcher
    producing.py  the write path: produce, then wait for this engine's replay to apply it
    replay.py     the open (meta, snapshots, then the log) and the replay thread
    reading.py    read, read_bytes, locate, verify
    cursors.py    consumer cursors and groups on the meta topic
    settings.py   per-topic settings on the meta topic
    snapshots.py  region snapshots on the meta topic
    cleaner.py    retention, reclaim (snapshot, then DeleteRecords), the background thread

The collaborators are org-neutral and shared by an engine's for_org views; the engine passes
its org to each call. Imports go one way: engine.py imports them all, none imports it.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from walfs.cluster.chunks import ChunkStore
from walfs.cluster.cleaner import Cleaner
from walfs.cluster.clients import Clients
from walfs.cluster.cursors import Cursors
from walfs.cluster.layout import U64, parse_target, stream_key_bytes
from walfs.cluster.producing import Writer
from walfs.cluster.reading import Reading
from walfs.cluster.replay import Replay
from walfs.cluster.settings import Settings
from walfs.cluster.snapshots import SNAPSHOT_EVERY, Snapshots
from walfs.cluster.state import ClusterState
from walfs.common.metrics import WalStats
from walfs.engine.names import check_org_id, check_partition, topic_hash
from walfs.engine.settings import Policy
from walfs.engine.types import Change, StreamInfo, VerifyProgress
from walfs.engine.watchers import Watchers
from walfs.errors import OffsetOutOfRangeError, ReadOnlyError, WalClosedError, WalError


class KafkaEngine:
    """A walfs.engine.contract.LogEngine on a Kafka cluster (see that module for the contract of
    each call, and this module's docstring for its parts)."""

    def __init__(
        self,
        target: str,
        fsync: str = "interval",
        org_id: int = 1,
        *,
        read_only: bool = False,
        reclaim_interval_s: float = 10.0,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        retention_groups: Sequence[str] = (),
        timeout_s: float = 60.0,
        use_snapshots: bool = True,
        snapshot_every: int = SNAPSHOT_EVERY,
        **_local_only: Any,
    ) -> None:
        check_org_id(org_id)
        self.t = parse_target(target)
        self.path = target
        self.org_id = org_id
        self.read_only = read_only
        self.fsync = fsync  # durability is Kafka's acks=all + min.insync.replicas (docs/cluster.md)
        self.stats = WalStats()
        self.timeout = timeout_s
        self.retention_default = Policy(retention_ms, retention_bytes, tuple(retention_groups))
        # use_snapshots=False replays every region from its first record (to measure what
        # snapshots save, or to rebuild from the log alone); refused once the cleaner has
        # deleted records that only a snapshot still describes.
        self.use_snapshots = use_snapshots
        self.snapshot_every = snapshot_every
        self._owner: KafkaEngine | None = None  # set on for_org views: the engine that closes
        self._watchers = Watchers()
        opened = time.monotonic()
        self._clients, self.t = Clients.connect(target, self.t, read_only, timeout_s)
        self.admin = self._clients.admin
        self.producer = self._clients.producer
        self._state = ClusterState(target, timeout_s)
        self._chunks = ChunkStore(self.t.log_topic, self._clients.reader, timeout_s)
        self._writer = Writer(self.t, self._clients, self._state, self.stats)
        self._cursors = Cursors(self._state, self._writer)
        self._settings = Settings(self._writer)
        self._snapshots = Snapshots(self.t, self._state, self._writer)
        self._cleaner = Cleaner(self.t, self._clients, self._state, self._snapshots, self._settings)
        self._reading = Reading(self._state, self._chunks)
        self._replay = Replay(
            self.t,
            self._clients,
            self._state,
            self._chunks,
            self._cursors,
            self._settings,
            self._snapshots,
            self._watchers,
        )
        self._replay.recover(use_snapshots)
        self.stats.open_seconds = time.monotonic() - opened
        stop = self._state.stop
        self._threads = [threading.Thread(target=self._replay.loop, name="walfs-kafka-tail", daemon=True)]
        if self.producer is not None:
            self._threads.append(
                threading.Thread(
                    target=self._clients.poll_loop, args=(stop,), name="walfs-kafka-poll", daemon=True
                )
            )
            self._threads.append(
                threading.Thread(
                    target=self._cleaner.loop,
                    args=(self, reclaim_interval_s, snapshot_every),
                    name="walfs-kafka-bg",
                    daemon=True,
                )
            )
        for th in self._threads:
            th.start()

    # -- lifetime -------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._state.closed

    @property
    def failed(self) -> bool:
        return self._state.failed is not None

    def close(self) -> None:
        st = self._state
        if st.closed or self._owner is not None:  # a view is closed by its owner
            return
        try:
            if self.producer is not None:
                self.producer.flush(self.timeout)
        finally:
            st.closed = True
            st.stop.set()
            for th in self._threads:
                th.join(timeout=30)
            self._clients.close()
            with st.applied:
                st.applied.notify_all()
            self._watchers.notify(Change("close", "", -1))

    def _check_open(self, write: bool = False) -> None:
        st = self._state
        if st.closed:
            raise WalClosedError(f"{self.path} is closed")
        if st.failed is not None:
            raise WalError(f"{self.path}: the replay stopped: {st.failed}")
        if write and self.producer is None:
            raise ReadOnlyError(f"{self.path} is open read-only")

    def for_org(self, org_id: int) -> KafkaEngine:
        check_org_id(org_id)
        if org_id == self.org_id:
            return self
        view = copy.copy(self)  # every collaborator, client and thread shared; only the org differs
        view.org_id = org_id
        view._owner = self._owner or self
        return view

    # -- streams ----------------------------------------------------------------------------
    def streams(self, topic: str | None = None) -> list[tuple[str, int]]:
        self._check_open()
        st = self._state
        with st.lock:
            if topic is not None:
                return [(topic, p) for p in sorted(st.by_name.get((self.org_id, topic), {}))]
            return sorted((t, p) for (o, t), ps in st.by_name.items() if o == self.org_id for p in ps)

    def create(self, topic: str, partition: int = 0) -> None:
        self._check_open(True)
        key = stream_key_bytes(self.org_id, topic, check_partition(partition))
        if key not in self._state.streams:
            self._writer.op(self.org_id, topic, partition, b"C")

    def info(self, topic: str, partition: int = 0) -> StreamInfo:
        self._check_open()
        s = self._state.stream(self.org_id, topic, partition)
        h = topic_hash(self.org_id, topic).hex()
        if s is None:
            return StreamInfo(self.org_id, topic, h, partition, 0, 0, 0, 0, 0)
        with self._state.lock:
            return StreamInfo(
                self.org_id, topic, h, partition, s.low, s.next, s.low_byte, s.next_byte, s.next
            )

    def delete(self, topic: str, partition: int | None = None) -> list[int]:
        self._check_open(True)
        parts = [p for _t, p in self.streams(topic)] if partition is None else [check_partition(partition)]
        done = []
        for p in parts:
            key = stream_key_bytes(self.org_id, topic, p)
            if key not in self._state.streams:
                continue
            self._cursors.forget_stream(key)
            self._writer.op(self.org_id, topic, p, b"X")
            done.append(p)
        if done and not self.streams(topic):
            self._settings.forget_topic(self.org_id, topic)
        return done

    def trim(self, topic: str, partition: int, before_offset: int) -> None:
        self._check_open(True)
        s = self._state.stream(self.org_id, topic, partition)
        low, high = (s.low, s.next) if s else (0, 0)
        if not isinstance(before_offset, int) or before_offset < 0 or before_offset > high:
            raise OffsetOutOfRangeError(f"cannot trim {topic!r}[{partition}] to {before_offset} (0..{high})")
        if before_offset > low:
            self._writer.op(self.org_id, topic, partition, b"T", U64.pack(before_offset))

    # -- appending --------------------------------------------------------------------------
    def append(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any, *, wait: bool = True
    ) -> int:
        # Kafka's acks=all is the only wait there is (docs/cluster.md): every append is
        # durable on return, which honours wait=False too.
        self._check_open(True)
        return self._writer.append(self.org_id, topic, partition, data, meta_lens, value_lens)

    def sync(self) -> None:
        """Every append already returned acknowledged by the cluster (acks=all)."""
        self._check_open()
        if self.producer is not None:
            self.producer.flush(self.timeout)

    # -- change notification ----------------------------------------------------------------
    def watch(self, fn: Callable[[Change], None]) -> Callable[[], None]:
        return self._watchers.add(fn, self.org_id)

    # -- reading ----------------------------------------------------------------------------
    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        buf: Any,
        recs: Any,
        max_records: int = 1 << 20,
        max_bytes: int = 16 << 20,
    ) -> int:
        self._check_open()
        return self._reading.read(self.org_id, topic, partition, offset, buf, recs, max_records, max_bytes)

    def read_bytes(self, topic: str, partition: int, position: int, buf: Any) -> int:
        self._check_open()
        return self._reading.read_bytes(self.org_id, topic, partition, position, buf)

    def locate(
        self,
        topic: str,
        partition: int = 0,
        *,
        offset: int | None = None,
        byte: int | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        self._check_open()
        return self._reading.locate(self.org_id, topic, partition, offset, byte, timestamp_ms)

    # -- consumer cursors (cursors.py) ----------------------------------------------------------
    def committed(self, group: str, topic: str, partition: int = 0) -> tuple[int, str] | None:
        self._check_open()
        return self._cursors.committed(self.org_id, group, topic, partition)

    def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        *,
        advance_only: bool = False,
        metadata: str = "",
    ) -> bool:
        self._check_open(True)
        return self._cursors.commit(self.org_id, group, topic, partition, offset, advance_only, metadata)

    def forget(self, group: str, topic: str | None = None, partition: int = 0) -> bool:
        self._check_open(True)
        if topic is None:
            return self._cursors.forget_group(self.org_id, group)
        return self._cursors.forget_cursor(self.org_id, group, topic, partition)

    def groups(self) -> list[str]:
        self._check_open()
        return self._cursors.groups(self.org_id)

    def create_group(self, group: str) -> None:
        self._check_open(True)
        self._cursors.create_group(self.org_id, group)

    # -- per-topic settings (settings.py) -------------------------------------------------------
    def settings(self, topic: str) -> dict[str, Any]:
        return self._settings.get(self.org_id, topic)

    def set_settings(self, topic: str, **values: Any) -> None:
        self._check_open(True)
        self._settings.set(self.org_id, topic, values)

    # -- the cleaner and snapshots (cleaner.py, snapshots.py) -------------------------------------
    def apply_retention(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        return self._cleaner.apply_retention(self, now_ms)

    def reclaim(self) -> int:
        """The cleaner: for each region whose records below some offset are all trimmed or
        deleted, a snapshot first, then Kafka DeleteRecords below it. Returns how many
        regions it shortened."""
        return self._cleaner.reclaim()

    def snapshot(self, region: int, write: bool = True) -> dict[str, Any]:
        """The region's stream maps at its replay position; written to the meta topic."""
        return self._snapshots.take(region, write)

    def snapshot_due(self) -> int:
        """Snapshots every region whose replay passed `snapshot_every` Kafka records since
        its newest snapshot (the cleaner's periodic part); returns how many it wrote."""
        return self._cleaner.snapshot_due(self.snapshot_every)

    # -- checks ----------------------------------------------------------------------------------
    def report(self) -> dict[str, int]:
        return {
            "streams": len(self._state.streams),
            "regions": self.t.regions,
            "snapshots": len(self._snapshots.blobs),
            "open_ms": int(self.stats.open_seconds * 1000),
            "open_replayed": self._state.open_replayed,  # log records the open replayed after snapshots
        }

    def verify(self, progress: VerifyProgress | None = None) -> list[tuple[str, int, int, str]]:
        return self._reading.verify(self.org_id)
