"""The cleaner: retention, reclaiming space and periodic snapshots, and the background thread
of every engine that can write, which runs all three every `reclaim_interval_s`.

Trims and deletes are marks in the log; Kafka's space comes back only when the cleaner,
per region, writes a snapshot and then deletes the region's records below the first one
any stream still holds (Kafka DeleteRecords): never before a snapshot that no longer needs
them is stored (docs/cluster.md, "Snapshots and the cleaner").
"""

from __future__ import annotations

import logging

from walfs.cluster.clients import Clients
from walfs.cluster.layout import Target
from walfs.cluster.settings import Settings
from walfs.cluster.snapshots import Snapshots
from walfs.cluster.state import ClusterState
from walfs.engine.contract import LogEngine
from walfs.engine.rules import committed_offset
from walfs.engine.settings import now_ms as retention_now_ms
from walfs.engine.settings import policy_of
from walfs.errors import WalClosedError

log = logging.getLogger("walfs")


class Cleaner:
    def __init__(
        self, t: Target, clients: Clients, state: ClusterState, snapshots: Snapshots, settings: Settings
    ) -> None:
        self.t = t
        self.clients = clients
        self.state = state
        self.snapshots = snapshots
        self.settings = settings

    def apply_retention(
        self, engine: LogEngine, now_ms: int | None = None
    ) -> dict[tuple[int, str, int], int]:
        """Trims each stream of the engine's org to what its topic's policy keeps, through
        the engine's own calls; returns the new low watermarks of the streams it trimmed."""
        if self.clients.producer is None:
            return {}
        now = retention_now_ms() if now_ms is None else now_ms
        out = {}
        for (org, topic), parts in list(self.state.by_name.items()):
            if org != engine.org_id:
                continue
            policy = policy_of(self.settings.overrides(org, topic), engine.retention_default)
            if policy.unlimited:
                continue
            for p in list(parts):
                info = engine.info(topic, p)
                if info.high_watermark == info.low_watermark:
                    continue
                target = info.low_watermark
                if policy.ms is not None:
                    target = max(target, engine.locate(topic, p, timestamp_ms=now - policy.ms))
                cap = info.low_watermark
                if policy.bytes is not None and info.byte_size - policy.bytes > info.low_byte:
                    keep_from = info.byte_size - policy.bytes
                    cap = engine.locate(topic, p, byte=keep_from)
                    if cap < info.high_watermark and engine.locate(topic, p, offset=cap) < keep_from:
                        cap += 1
                    target = max(target, cap)
                if policy.groups and target > info.low_watermark:
                    safe = min(committed_offset(engine, g, topic, p) or 0 for g in policy.groups)
                    target = max(min(target, safe), cap)
                target = min(target, info.high_watermark)
                if target > info.low_watermark:
                    engine.trim(topic, p, target)
                    out[(org, topic, p)] = target
        return out

    def reclaim(self) -> int:
        """For each region whose records below some offset are all trimmed or deleted, a
        snapshot first, then Kafka DeleteRecords below it. Returns how many regions it
        shortened."""
        if self.clients.producer is None:
            return 0
        ends = self.clients.ends(self.t.log_topic, range(self.t.regions))
        done = 0
        for r in range(self.t.regions):
            snap = self.snapshots.take(r, write=False)
            safe = snap["upto"]
            for d in snap["streams"]:
                if d["chunks"][1]:
                    safe = min(safe, d["chunks"][1][0])
            if safe <= ends[r][0]:
                continue
            self.snapshots.take(r)
            self.clients.delete_below(self.t.log_topic, r, safe)
            done += 1
        return done

    def snapshot_due(self, every: int) -> int:
        """Snapshots every region whose replay passed `every` records since its newest
        snapshot (the cleaner's periodic part); returns how many it wrote."""
        if self.clients.producer is None:
            return 0
        return self.snapshots.due(every)

    def loop(self, engine: LogEngine, every: float, snapshot_every: int) -> None:
        """The background thread: retention, reclaim and due snapshots, every `every` s,
        until the engine closes."""
        while not self.state.stop.wait(every):
            try:
                self.apply_retention(engine)
                engine.stats.reclaimed_segments += self.reclaim()
                self.snapshot_due(snapshot_every)
            except WalClosedError:
                return
            except Exception:
                if self.state.stop.is_set():
                    return
                log.exception("walfs kafka background work failed")
