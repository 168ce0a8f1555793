"""The replay: how an engine learns its namespace, at open and after. Opening (`recover`)
reads the meta topic (cursors, settings, snapshots), loads each region's newest snapshot and
replays the log after it, up to what the cluster had acknowledged at open; then one thread
(`loop`) follows both topics. Every record is applied in its partition's order, so every
engine gives a stream's records the same offsets (a record's rank in its stream).

Meta records go to the module that owns their kind (cursors.py, settings.py, snapshots.py);
log records are applied here: a data record (chunks.py) extends its stream, "C" makes it,
"T" (u64 before) trims it, "X" deletes it. A record that does not parse stops the replay
with WalCorruptError naming topic, partition and offset; nothing is repaired.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from walfs.cluster.chunks import ChunkStore, to_chunk
from walfs.cluster.clients import Clients, take
from walfs.cluster.cursors import KINDS as CURSOR_KINDS
from walfs.cluster.cursors import Cursors
from walfs.cluster.layout import HEAD, KEY, U64, VERSION, Target
from walfs.cluster.settings import KIND as SETTINGS_KIND
from walfs.cluster.settings import Settings
from walfs.cluster.snapshots import KIND as SNAPSHOT_KIND
from walfs.cluster.snapshots import Snapshots
from walfs.cluster.state import ClusterState, StreamState
from walfs.engine.types import Change
from walfs.engine.watchers import Watchers
from walfs.errors import WalCorruptError, WalError

log = logging.getLogger("walfs")

_ASSIGNED_KEPT = 65536  # ClusterState.assigned's newest entries


class Replay:
    def __init__(
        self,
        t: Target,
        clients: Clients,
        state: ClusterState,
        chunks: ChunkStore,
        cursors: Cursors,
        settings: Settings,
        snapshots: Snapshots,
        watchers: Watchers,
    ) -> None:
        self.t = t
        self.clients = clients
        self.state = state
        self.chunks = chunks
        self.cursors = cursors
        self.settings = settings
        self.snapshots = snapshots
        self.watchers = watchers

    # -- the open ---------------------------------------------------------------------------
    def recover(self, use_snapshots: bool) -> None:
        """Meta first (cursors, settings, snapshots), then each region from its newest
        snapshot on (from its first record without `use_snapshots`); returns when everything
        the cluster had acknowledged at open is applied."""
        from confluent_kafka import TopicPartition

        t, st = self.t, self.state
        meta_lo, meta_hi = self.clients.ends(t.meta_topic, range(1))[0]
        ends = self.clients.ends(t.log_topic, range(t.regions))
        st.meta_pos = meta_lo
        self.clients.tail.assign([TopicPartition(t.meta_topic, 0, meta_lo)])
        self._drain({("m", 0): meta_hi})
        assigns = [TopicPartition(t.meta_topic, 0, st.meta_pos)]
        for r in range(t.regions):
            lo, _hi = ends[r]
            start = self.snapshots.load(r) if use_snapshots else 0
            if lo > start and not use_snapshots:
                raise WalError(
                    f"{t.log_topic}[{r}] starts at {lo}: the cleaner deleted records below it that "
                    f"only the region's snapshot describes; open with snapshots (use_snapshots=True)"
                )
            if lo > start:
                raise WalCorruptError(
                    f"{t.log_topic}[{r}] starts at {lo}, but the newest snapshot covers only up "
                    f"to {start}: records between were deleted outside walfs; nothing was repaired"
                )
            st.pos[r] = start
            assigns.append(TopicPartition(t.log_topic, r, start))
        self.clients.tail.assign(assigns)
        st.open_replayed = sum(max(0, ends[r][1] - st.pos[r]) for r in range(t.regions))
        self._drain({("l", r): ends[r][1] for r in range(t.regions)})

    def _drain(self, until: dict[tuple[str, int], int]) -> None:
        deadline = time.monotonic() + max(self.clients.timeout, 300)
        while True:
            pending = {k: v for k, v in until.items() if self._position(k) < v}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise WalError(
                    f"{self.state.path}: replay did not reach the cluster's end in time ({pending})"
                )
            self.apply_batch(take(self.clients.tail, 0.5))

    def _position(self, k: tuple[str, int]) -> int:
        return self.state.meta_pos if k[0] == "m" else self.state.pos.get(k[1], 0)

    # -- after the open: one thread ---------------------------------------------------------
    def loop(self) -> None:
        """Follows both topics until the engine closes; a record that does not parse marks
        the engine failed (its calls raise) and ends the replay."""
        st = self.state
        while not st.stop.is_set():
            try:
                msgs = take(self.clients.tail, 0.1)
                if msgs:
                    self.apply_batch(msgs)
            except WalCorruptError as e:
                log.error("%s", e)
                st.failed = e
                with st.applied:
                    st.applied.notify_all()
                return
            except Exception:
                if st.stop.is_set():
                    return
                log.exception("walfs kafka replay failed; retrying")
                time.sleep(0.5)

    def apply_batch(self, msgs: list[Any]) -> None:
        changes: list[Change] = []
        st = self.state
        with st.applied:
            for m in msgs:
                if m.error():
                    err = m.error()
                    if err.fatal():
                        raise WalError(f"{st.path}: {err}")
                    continue
                if m.topic() == self.t.meta_topic:
                    self._apply_meta(m)
                    st.meta_pos = m.offset() + 1
                else:
                    r = m.partition()
                    if m.offset() < st.pos.get(r, 0):
                        continue  # seen already (a snapshot covered it)
                    self._apply_log(r, m, changes)
                    st.pos[r] = m.offset() + 1
            st.applied.notify_all()
        for c in changes:
            self.watchers.notify(c)

    def _apply_meta(self, m: Any) -> None:
        key, value = m.key() or b"", m.value()
        kind, rest = key[:1], key[1:]
        where = f"{self.t.meta_topic}@{m.offset()}"
        if kind in CURSOR_KINDS:
            self.cursors.apply(kind, rest, value, where)
        elif kind == SETTINGS_KIND:
            self.settings.apply(rest, value, where)
        elif kind == SNAPSHOT_KIND:
            self.snapshots.apply(rest, value)
        else:
            raise WalCorruptError(f"{where}: unknown meta record {key[:16]!r}")

    def _apply_log(self, r: int, m: Any, changes: list[Change]) -> None:
        st = self.state
        key, value = m.key(), m.value()
        where = f"{self.t.log_topic}[{r}]@{m.offset()}"
        if key is None or len(key) <= KEY.size or value is None or len(value) < HEAD.size:
            raise WalCorruptError(f"{where}: not a walfs record (key or value missing or short)")
        op, version, _zero = HEAD.unpack_from(value)
        if version != VERSION:
            raise WalCorruptError(f"{where}: record version {version}, this walfs reads {VERSION}")
        org, partition = KEY.unpack_from(key)
        try:
            topic = key[KEY.size :].decode("utf-8")
        except UnicodeDecodeError:
            raise WalCorruptError(f"{where}: topic name is not UTF-8") from None
        s = st.streams.get(key)
        if op == ord("X"):
            if s is not None:
                st.drop_stream(key, s)
                self.cursors.stream_deleted(key)
                changes.append(Change("delete", topic, partition, org))
            return
        if s is None:
            s = StreamState(org, topic, partition, r)
            st.add_stream(key, s)
            changes.append(Change("create", topic, partition, org))
        if op == ord("C"):
            return
        if op == ord("T"):
            if len(value) != HEAD.size + U64.size:
                raise WalCorruptError(f"{where}: trim record of {len(value)} bytes")
            (before,) = U64.unpack_from(value, HEAD.size)
            self._trim_state(s, min(before, s.next))
            changes.append(Change("trim", topic, partition, org))
            return
        if op != ord("D"):
            raise WalCorruptError(f"{where}: unknown op {op}")
        ts = m.timestamp()[1]
        chunk = to_chunk(value, ts, where)
        s.first.append(s.next)
        s.koff.append(m.offset())
        s.byte.append(s.next_byte)
        s.ts.append(ts)
        st.assigned[(r, m.offset())] = s.next
        if len(st.assigned) > _ASSIGNED_KEPT:
            st.assigned.popitem(last=False)
        s.next += len(chunk.lens)
        s.next_byte += sum(v for _m, v in chunk.lens) + len(chunk.lens)
        self.chunks.put((r, m.offset()), chunk)
        changes.append(Change("append", topic, partition, org))

    def _trim_state(self, s: StreamState, before: int) -> None:
        if before <= s.low:
            return
        if before == s.next:
            low_byte = s.next_byte
        else:
            i = s.chunk_index(before)
            chunk = self.chunks.get(s.region, s.koff[i])
            low_byte = s.byte[i] + sum(v + 1 for _m, v in chunk.lens[: before - s.first[i]])
        keep = max(0, s.chunk_index(before)) if before < s.next else len(s.first)
        del s.first[:keep], s.koff[:keep], s.byte[:keep], s.ts[:keep]
        s.low, s.low_byte = before, low_byte
