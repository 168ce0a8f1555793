"""Wal: the public face of walfs. See docs/api.md.

It owns the engine (C core, the one source of truth for offsets and watermarks), the
topic index (names -> streams), the cursor store (one commit rule for every face), and a
background duty: segment reclamation."""

import array
import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from walfs.consumer import Consumer, CursorStore
from walfs.engine import Engine
from walfs.errors import OffsetOutOfRangeError, RecordTooLargeError, WalClosedError, WalCorruptError
from walfs.metrics import WalStats
from walfs.names import check_partition, stream_key, topic_bytes, topic_hash
from walfs.records import Header, Record, decode_meta, encode_meta
from walfs.retention import Policy, TopicSettings
from walfs.topic_index import Stream, TopicIndex, drop_legacy_snapshot

log = logging.getLogger("walfs")

DEFAULT_MAX_BYTES = 16 << 20
_ZERO = array.array("I", (0,))  # meta lengths of one plain record
# Geometry of a new WAL (an existing one keeps what it was created with). The environment
# can change the defaults: WALFS_SEGMENT_SIZE, WALFS_BLOCK_SIZE (bytes).
DEFAULT_SEGMENT_SIZE = 1 << 30
DEFAULT_BLOCK_SIZE = 10 << 20
MAX_U32 = 2**32 - 1


@dataclass(frozen=True, slots=True)
class StreamInfo:
    org_id: int
    topic: str
    topic_hash: str
    partition: int
    low_watermark: int
    high_watermark: int
    low_byte: int
    byte_size: int


class Wal:
    def __init__(
        self,
        path: str | os.PathLike[str],
        fsync: str = "interval",
        org_id: int = 1,
        *,
        fsync_interval_ms: int = 100,
        segment_size: int | None = None,
        block_size: int | None = None,
        read_only: bool = False,
        reclaim_interval_s: float = 10.0,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        retention_groups: Sequence[str] = (),
        min_free_bytes: int = 0,
        test_mode: bool = False,
        io_uring: bool = True,
    ) -> None:
        if not isinstance(org_id, int) or not 0 <= org_id < 2**63:
            raise ValueError(f"org_id must be an int in 0..2**63-1, not {org_id!r}")
        self.path = os.fspath(path)
        self.org_id = org_id
        self.read_only = read_only
        self.stats = WalStats()
        opened = time.monotonic()
        self.engine = Engine(
            self.path,
            fsync=fsync,
            fsync_interval_ms=fsync_interval_ms,
            segment_size=segment_size or int(os.environ.get("WALFS_SEGMENT_SIZE", DEFAULT_SEGMENT_SIZE)),
            block_size=block_size or int(os.environ.get("WALFS_BLOCK_SIZE", DEFAULT_BLOCK_SIZE)),
            read_only=read_only,
            test_mode=test_mode,
            io_uring=io_uring,
            min_free_bytes=min_free_bytes,
        )
        self.stats.open_seconds = time.monotonic() - opened
        self.fsync = fsync
        self.cursors = CursorStore(self.path, read_only)
        # The WAL's default retention (None: keep everything) and per-topic overrides.
        self.retention_default = Policy(retention_ms, retention_bytes, tuple(retention_groups))
        try:
            self.settings = TopicSettings(self.path, read_only)
        except BaseException:
            self.engine.close()
            raise
        self._lock = threading.Lock()  # the stream maps
        self._data = threading.Condition()  # notified after appends while someone waits
        self._waiting = 0  # threads in wait_for (changed under self._data)
        self._listeners: list[tuple[int, Callable[[str, int], None]]] = []  # (org_id, fn)
        self._index = TopicIndex()
        for no in range(self.engine.stream_count()):
            info = self.engine.stream_info(no)
            if not info.deleted:
                self._index.add(Stream(no, info.org_id, info.partition, info.topic_hash, info.name))
        self._stop = threading.Event()
        # Wakes the background thread early: a stream with a size limit grew by an eighth
        # of it since the last pass (so disk use stays near the limit at any append rate).
        self._wake = threading.Event()
        self._size_limits: dict[int, int | None] = {}  # stream_no -> retention bytes (a cache)
        self._grown: dict[int, int] = {}  # stream_no -> bytes appended since the last wake
        self._worker: threading.Thread | None = None
        if not read_only:
            drop_legacy_snapshot(self.path)
            self._clamp_cursors()
            self._worker = threading.Thread(
                target=self._background,
                args=(reclaim_interval_s,),
                name="walfs-bg",
                daemon=True,
            )
            self._worker.start()

    # -- lifetime -------------------------------------------------------------------
    def __enter__(self) -> "Wal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Makes everything durable and releases the lock."""
        if self.engine.closed:
            return
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join()
        try:
            self.engine.close()
        finally:
            with self._data:
                self._data.notify_all()

    @property
    def closed(self) -> bool:
        return self.engine.closed

    @property
    def failed(self) -> bool:
        """True once an fsync failed: appends are refused until the WAL is reopened (the
        daemons then stop with a non-zero status so that systemd restarts them)."""
        return self.engine.failed

    def debug_power_cut(self, seed: int, keep_permille: int = 0) -> None:
        """Test mode only: simulates power loss. Every page written since its file's last
        sync reverts (except keep_permille/1000 of them, chosen by seed), and the WAL is
        abandoned without syncing, snapshotting or closing cleanly."""
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join()
        self.engine.power_cut(seed, keep_permille)

    def _background(self, reclaim_every: float) -> None:
        """Retention, then reclamation, every reclaim_every seconds, or at once when a
        size-limited stream has grown by an eighth of its limit."""
        while True:
            self._wake.wait(reclaim_every)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.apply_retention()
                self.stats.reclaimed_segments += self.engine.reclaim()
            except WalClosedError:
                return
            except Exception:  # a background failure must not kill the worker silently
                log.exception("walfs background work failed")

    # -- streams --------------------------------------------------------------------
    def _stream(self, topic: str, partition: int, create: bool) -> Stream | None:
        check_partition(partition)
        s = self._index.get(self.org_id, topic, partition)
        if s is not None or not create:
            if s is None:
                topic_bytes(topic)
            return s
        raw = topic_bytes(topic)
        with self._lock:
            s = self._index.get(self.org_id, topic, partition)
            if s is None:
                thash = topic_hash(self.org_id, topic)
                no = self.engine.stream_open(self.org_id, partition, thash, raw, True)
                assert no is not None
                s = Stream(no, self.org_id, partition, thash, topic)
                self._index.add(s)
            return s

    def create_partition(self, topic: str, partition: int = 0) -> None:
        """Makes an empty stream exist (it shows as an empty file; Kafka's CreateTopics)."""
        self._stream(topic, partition, True)

    def topics(self) -> list[str]:
        return self._index.topics(self.org_id)

    def streams(self) -> list[tuple[str, int]]:
        """Every (topic, partition) of this org, in one pass."""
        return sorted((s.name, s.partition) for s in self._index.org_streams(self.org_id))

    def partitions(self, topic: str) -> list[int]:
        return self._index.partitions(self.org_id, topic)

    def stream_info(self, topic: str, partition: int = 0) -> StreamInfo:
        s = self._stream(topic, partition, False)
        thash = topic_hash(self.org_id, topic)
        if s is None:
            return StreamInfo(self.org_id, topic, thash.hex(), partition, 0, 0, 0, 0)
        info = self.engine.stream_info(s.stream_no)
        return StreamInfo(
            self.org_id,
            topic,
            thash.hex(),
            partition,
            info.low_offset,
            info.next_offset,
            info.low_byte,
            info.next_byte,
        )

    def stream_key(self, topic: str, partition: int = 0) -> str:
        return stream_key(self.org_id, topic_hash(self.org_id, topic), check_partition(partition))

    # -- appending ------------------------------------------------------------------
    def append(
        self,
        topic: str,
        data: bytes,
        partition: int = 0,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        if key is None and not headers and timestamp_ms is None:
            if len(data) >= MAX_U32:
                raise RecordTooLargeError("a record is larger than 4 GiB")
            return self._append(topic, partition, data, _ZERO, array.array("I", (len(data),)))
        return self.append_records(topic, [(key, data, headers, timestamp_ms)], partition)

    def append_batch(self, topic: str, records: Sequence[bytes], partition: int = 0) -> int:
        """Appends values as one batch (all or none survive a crash); returns the first offset."""
        if isinstance(records, bytes | bytearray | memoryview):
            raise TypeError("append_batch takes a sequence of records; use append() for one")
        n = len(records)
        if n == 0:
            raise ValueError("append_batch needs at least one record")
        lens = array.array("I", map(len, records)) if n > 1 else array.array("I", [len(records[0])])
        if max(lens) >= MAX_U32:
            raise RecordTooLargeError("a record is larger than 4 GiB")
        data = records[0] if n == 1 else b"".join(records)
        return self._append(topic, partition, data, array.array("I", bytes(4 * n)), lens)

    def append_lines(self, topic: str, data: bytes, partition: int = 0) -> tuple[int, int]:
        """Appends each line of data (split on b"\\n" in C; a final newline ends the last line)
        as one batch of plain records; returns (first offset, number of records)."""
        if not data:
            raise ValueError("append_lines needs at least one byte")
        s = self._stream(topic, partition, True)
        assert s is not None
        _gid, offset, ticket, n = self.engine.append_lines(s.stream_no, data)
        self._appended(s, ticket, n, len(data))
        return offset, n

    def append_records(self, topic: str, records: Iterable[Any], partition: int = 0) -> int:
        """Appends (key, value, headers, timestamp_ms) tuples or Record-like objects as one batch."""
        bodies: list[bytes] = []
        metas = array.array("I")
        values = array.array("I")
        for r in records:
            if isinstance(r, tuple):
                key, value, headers, ts = r
            else:
                key, value, headers, ts = r.key, r.value, r.headers, getattr(r, "timestamp_ms", None)
            meta = encode_meta(key, headers, ts)
            bodies.append(meta + bytes(value) if meta else bytes(value))
            metas.append(len(meta))
            if len(value) >= MAX_U32:
                raise RecordTooLargeError("a record is larger than 4 GiB")
            values.append(len(value))
        if not bodies:
            raise ValueError("append_records needs at least one record")
        return self._append(topic, partition, b"".join(bodies), metas, values)

    def _append(self, topic: str, partition: int, data: Any, metas: array.array, values: array.array) -> int:
        """The one append path of the facade: len(metas) bodies, back to back in data."""
        s = self._stream(topic, partition, True)
        assert s is not None
        _gid, offset, ticket = self.engine.append(s.stream_no, data, metas, values)
        self._appended(s, ticket, len(metas), len(data))
        return offset

    def append_bodies(
        self, topic: str, data: Any, meta_lens: array.array, value_lens: array.array, partition: int = 0
    ) -> int:
        """Appends records already in the stored layout (each body is its meta section, as
        walfs.records.encode_meta makes it, then its value; bodies back to back in data) as
        one batch; returns the first offset. The Kafka listener's produce path."""
        n = len(meta_lens)
        if n == 0 or len(value_lens) != n:
            raise ValueError("append_bodies needs one meta and one value length per record")
        if sum(meta_lens) + sum(value_lens) != len(data):
            raise ValueError("the lengths do not add up to the data")
        return self._append(topic, partition, data, meta_lens, value_lens)

    def add_append_listener(self, fn: Callable[[str, int], None]) -> None:
        """Calls fn(topic, partition) after every append of this org's streams, in the
        appending thread, once the records are readable. It must be quick and must not
        raise (the mount uses it to notice appends made by its Kafka listener)."""
        self._listeners.append((self.org_id, fn))

    def _appended(self, s: Stream, ticket: int, n: int, nbytes: int) -> None:
        self.stats.appended(s.name, s.partition, n, nbytes)
        limit = self._size_limits.get(s.stream_no, -1)
        if limit == -1:
            limit = self._size_limits[s.stream_no] = self.settings.policy(
                s.org_id, s.name, self.retention_default
            ).bytes
        if limit is not None:
            grown = self._grown.get(s.stream_no, 0) + nbytes
            if grown > max(limit // 8, 1 << 20):
                grown = 0
                self._wake.set()
            self._grown[s.stream_no] = grown
        for org_id, fn in self._listeners:
            if org_id == s.org_id:  # appends of other orgs (Kafka tenants) are not its
                fn(s.name, s.partition)
        if self._waiting:  # most appends have no one in wait_for to wake
            with self._data:
                self._data.notify_all()
        if self.fsync == "always":
            # Appenders of the same stream share the next fsync (group commit).
            with self.stats.durable_waits.time("append"):
                self.engine.wait_durable(ticket)

    def sync(self) -> None:
        """Makes every append that returned before this call durable."""
        with self.stats.durable_waits.time("sync"):
            self.engine.sync()

    # -- reading --------------------------------------------------------------------
    def high_watermark(self, topic: str, partition: int = 0) -> int:
        """The end of the stream: what appends have published (readers of the file view
        and Wal.read see up to here; see durable_watermark for what survives power loss)."""
        s = self._stream(topic, partition, False)
        return self.engine.marks(s.stream_no)[1] if s else 0

    def low_watermark(self, topic: str, partition: int = 0) -> int:
        s = self._stream(topic, partition, False)
        return self.engine.marks(s.stream_no)[0] if s else 0

    def durable_watermark(self, topic: str, partition: int = 0) -> int:
        """Every record below this offset survives power loss (the last successful sync's
        end of the stream). Consumers are handed, and cursors commit, only up to here."""
        s = self._stream(topic, partition, False)
        return self.engine.marks(s.stream_no)[2] if s else 0

    def durable_end(self, topic: str, offset: int, partition: int = 0) -> int:
        """The durable watermark for a consumer at `offset`: if records were published
        beyond a durable mark at or below `offset`, they are made durable first (one
        group-committed sync), so a consumer never waits for the interval syncer and never
        sees a record that a power cut could take back."""
        s = self._stream(topic, partition, False)
        if s is None:
            return 0
        _low, high, durable, _nb, _db = self.engine.marks(s.stream_no)
        if durable <= offset < high:
            self.engine.sync()
            durable = self.engine.marks(s.stream_no)[2]
        return durable

    def _start(self, topic: str, offset: int, partition: int) -> Stream | None:
        """The stream to read from `offset` on; None when there is nothing to read there."""
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
        s = self._stream(topic, partition, False)
        if s is None:
            if offset == 0:
                return None
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {topic!r} (empty)")
        low, high = self.engine.marks(s.stream_no)[:2]
        if offset < low or offset > high:
            raise OffsetOutOfRangeError(f"offset {offset} is outside {low}..{high} of {topic!r}[{partition}]")
        return s if offset < high else None

    def read(
        self,
        topic: str,
        offset: int,
        partition: int = 0,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[bytes]:
        s = self._start(topic, offset, partition)
        if s is None:
            return []
        return self.engine.read_values(s.stream_no, offset, max_records, max_bytes)

    def read_records(
        self,
        topic: str,
        offset: int,
        partition: int = 0,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[Record]:
        s = self._start(topic, offset, partition)
        if s is None:
            return []
        out = []
        for r in self.engine.read(s.stream_no, offset, max_records, max_bytes):
            key, headers, ts = decode_meta(r.meta)
            out.append(Record(r.offset, r.timestamp_ms if ts is None else ts, r.value, key, headers, r.gid))
        return out

    def read_into(
        self,
        topic: str,
        offset: int,
        buf: Any,
        recs: Any,
        partition: int = 0,
        max_records: int = 1 << 20,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> int:
        """Zero-copy reads for columnar consumers (the Spark source): fills `buf` with the
        records' bodies (meta || value, back to back) and `recs` with one descriptor per
        record (walfs.engine.REC_LAYOUT, 40 bytes: gid, offset, timestamp_ms, meta_len,
        value_len, buf_pos); returns how many. Raises BufferTooSmallError(needed) when the
        first record does not fit in `buf`."""
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
        s = self._stream(topic, partition, False)
        if s is None:
            if offset == 0:
                return 0
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {topic!r} (empty)")
        return self.engine.read_into(s.stream_no, offset, buf, recs, max_records, max_bytes)

    def byte_size(self, topic: str, partition: int = 0) -> int:
        s = self._stream(topic, partition, False)
        return self.engine.next_byte(s.stream_no) if s else 0

    def read_bytes(self, topic: str, position: int, size: int, partition: int = 0) -> bytes:
        if position < 0 or size < 0:
            raise OffsetOutOfRangeError("position and size must not be negative")
        s = self._stream(topic, partition, False)
        if s is None:
            return b""
        return self.engine.read_bytes(s.stream_no, position, size)

    def bytes_resident(self, topic: str, position: int, size: int, partition: int = 0) -> bool:
        """A hint: True when the records behind these view bytes are in the page cache, so
        a read returns without waiting for the disk (the mount reads cold data off its loop)."""
        s = self._stream(topic, partition, False)
        return True if s is None or position < 0 else self.engine.bytes_resident(s.stream_no, position, size)

    def read_bytes_into(self, topic: str, position: int, buf: Any, partition: int = 0) -> int:
        """read_bytes without the new bytes object: fills the writable buffer buf (up to
        its length) and returns how many bytes it holds (0 at the end)."""
        if position < 0:
            raise OffsetOutOfRangeError("position must not be negative")
        s = self._stream(topic, partition, False)
        if s is None:
            return 0
        return self.engine.read_bytes_into(s.stream_no, position, buf, len(buf))

    def byte_position(self, topic: str, offset: int, partition: int = 0) -> int:
        """Where record `offset` starts in the byte view (byte_size for the high watermark)."""
        s = self._stream(topic, partition, False)
        if s is None:
            if offset == 0:
                return 0
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {topic!r} (empty)")
        return self.engine.byte_position(s.stream_no, offset)

    def offset_at_byte(self, topic: str, position: int, partition: int = 0) -> int:
        """The offset of the record holding byte `position` of the view (the number of
        records that end at or before it); the high watermark at or past the end."""
        if position < 0:
            raise OffsetOutOfRangeError("position must not be negative")
        s = self._stream(topic, partition, False)
        return self.engine.offset_at_byte(s.stream_no, position) if s else 0

    def offset_for_timestamp(self, topic: str, timestamp_ms: int, partition: int = 0) -> int:
        s = self._stream(topic, partition, False)
        return self.engine.offset_for_time(s.stream_no, timestamp_ms) if s else 0

    def wait_for(self, topic: str, offset: int, partition: int = 0, timeout: float | None = None) -> bool:
        """Blocks until the high watermark passes `offset`; False on timeout or close."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._data:
            self._waiting += 1
            try:
                while self.high_watermark(topic, partition) <= offset:
                    if self.closed:
                        return False
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    # Bounded wait: an append that checked _waiting just before we
                    # incremented it does not notify; we see its record on the next turn.
                    self._data.wait(0.05 if left is None else min(left, 0.05))
                return True
            finally:
                self._waiting -= 1

    # -- consumers ------------------------------------------------------------------
    def consumer(
        self, group: str, topic: str, partition: int = 0, mode: str = "at_least_once", persist_every: int = 0
    ) -> Consumer:
        return Consumer(self, group, topic, partition, mode, persist_every)

    def committed_offset(self, group: str, topic: str, partition: int = 0) -> int | None:
        return self.cursors.get(group, self.stream_key(topic, partition))

    def commit_offset(
        self, group: str, topic: str, offset: int, partition: int = 0, *, advance_only: bool = False
    ) -> bool:
        """The one cursor-commit rule, for every face (Consumer, consumer files, Kafka
        OffsetCommit). The offset must lie in 0..high watermark (OffsetOutOfRangeError
        otherwise). A commit beyond the durable watermark first makes those records
        durable (a group-committed sync), so that a committed cursor never points past
        what a power cut leaves. With advance_only (commits that follow reads), a commit
        at or below the current cursor changes nothing, atomically, so two readers of one
        group cannot move it backwards by racing; without it (seeks, resets) the cursor
        is set as asked. Returns whether the cursor changed."""
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"cannot commit offset {offset!r} of {topic!r}[{partition}]")
        s = self._stream(topic, partition, False)
        high, durable = self.engine.marks(s.stream_no)[1:3] if s else (0, 0)
        if offset > high:
            raise OffsetOutOfRangeError(
                f"cannot commit offset {offset} of {topic!r}[{partition}]: the end is {high}"
            )
        if offset > durable:
            self.engine.sync()
        return self.cursors.put(group, self.stream_key(topic, partition), offset, advance_only=advance_only)

    def _clamp_cursors(self) -> None:
        """A cursor past its stream's end (the log lost its tail: a power cut under an
        older release, a restored backup) would make the group skip the records that reuse
        those offsets. It is set back to the end, and logged."""
        ends = {}
        for s in self._index.org_streams_all():
            ends[stream_key(s.org_id, s.topic_hash, s.partition)] = (s, self.engine.marks(s.stream_no)[1])
        for group in self.cursors.groups():
            for key in self.cursors.keys(group):
                try:
                    offset = self.cursors.get(group, key)
                except WalCorruptError as e:
                    log.error("%s", e)
                    continue
                s_end = ends.get(key)
                end = s_end[1] if s_end else 0
                if offset is not None and offset > end:
                    name = f"{s_end[0].name!r}[{s_end[0].partition}]" if s_end else key
                    log.warning(
                        "cursor of group %r on %s was past the end (%d > %d): set back to %d",
                        group, name, offset, end, end,
                    )
                    self.cursors.put(group, key, end)

    def consumer_groups(self) -> list[str]:
        """The consumer groups of this org (another org's groups are not listed, even
        under the same name: their cursors are on other streams)."""
        return self.cursors.groups(self.org_id)

    def create_group(self, group: str) -> None:
        """Makes a consumer group exist in this org (durably) before its first commit:
        `mkdir .consumers/NAME` on the mount. A no-op for an existing group."""
        self.cursors.create_group(group, self.org_id)

    def for_org(self, org_id: int) -> "Wal":
        """This WAL as another org (a Kafka tenant) sees it: the same engine, streams,
        cursors and settings, with topic and group names scoped to org_id. The view is
        never closed itself: its owner closes this Wal. (A wait_for on a view is woken by
        appends through that view at once, by other appends within its 50 ms poll.)"""
        if not isinstance(org_id, int) or not 0 <= org_id < 2**63:
            raise ValueError(f"org_id must be an int in 0..2**63-1, not {org_id!r}")
        if org_id == self.org_id:
            return self
        view = copy.copy(self)
        view.org_id = org_id
        view._waiting = 0
        return view

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of a group in this org: {(topic, partition): offset}."""
        keys = set(self.cursors.keys(group))
        out = {}
        for s in self._index.org_streams(self.org_id):
            key = stream_key(s.org_id, s.topic_hash, s.partition)
            if key in keys:
                offset = self.cursors.get(group, key)
                if offset is not None:
                    out[(s.name, s.partition)] = offset
        return out

    # -- trim and reclamation -------------------------------------------------------
    def trim(self, topic: str, before_offset: int, partition: int = 0) -> None:
        """Raises the low watermark to before_offset (durable when this returns)."""
        s = self._stream(topic, partition, False)
        if s is None:
            if before_offset == 0:
                return
            raise OffsetOutOfRangeError(f"cannot trim empty topic {topic!r} to {before_offset}")
        low, high = self.engine.marks(s.stream_no)[:2]
        if not isinstance(before_offset, int) or before_offset < 0 or before_offset > high:
            raise OffsetOutOfRangeError(f"cannot trim {topic!r}[{partition}] to {before_offset} (0..{high})")
        if before_offset > low:
            self.engine.trim(s.stream_no, before_offset)  # syncs first past the durable mark

    def retention(self, topic: str) -> Policy:
        """The policy in force for a topic of this org: its overrides over the WAL's default."""
        return self.settings.policy(self.org_id, topic, self.retention_default)

    def set_retention(self, topic: str, **values: Any) -> None:
        """Per-topic overrides, persisted in the data directory (survive restarts):
        retention_ms=, retention_bytes= (int, or None for no limit), retention_groups=
        (group names); the string "default" removes an override."""
        topic_bytes(topic)
        self.settings.set(self.org_id, topic, **values)
        self._size_limits.clear()

    def apply_retention(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        """Trims every stream (of every org) to what its policy keeps; returns the new low
        watermarks of the streams it trimmed. The daemons' background thread runs it."""
        if self.read_only:
            return {}
        now = int(time.time() * 1000) if now_ms is None else now_ms
        out = {}
        for s in self._index.org_streams_all():
            policy = self.settings.policy(s.org_id, s.name, self.retention_default)
            if policy.unlimited:
                continue
            target = self._retention_target(s, policy, now)
            if target is not None:
                self.engine.trim(s.stream_no, target)
                out[(s.org_id, s.name, s.partition)] = target
        return out

    def _retention_target(self, s: Stream, policy: Policy, now: int) -> int | None:
        low, high, _durable, next_byte, _db = self.engine.marks(s.stream_no)
        if high == low:
            return None
        target = low
        if policy.ms is not None:
            target = max(target, self.engine.offset_for_time(s.stream_no, now - policy.ms))
        cap = low  # what the size limit alone demands
        if policy.bytes is not None:
            keep_from = next_byte - policy.bytes
            if keep_from > self.engine.byte_position(s.stream_no, low):
                cap = self.engine.offset_at_byte(s.stream_no, keep_from)
                if cap < high and self.engine.byte_position(s.stream_no, cap) < keep_from:
                    cap += 1
            target = max(target, cap)
        if policy.groups and target > low:
            key = stream_key(s.org_id, s.topic_hash, s.partition)
            safe = min(self.cursors.get(g, key) or 0 for g in policy.groups)
            if target > safe:
                target = max(safe, cap)
                if cap > safe:
                    log.warning(
                        "retention of %r[%d]: the size limit (%d bytes) trims to %d, past what "
                        "consumer groups %s have committed (%d)",
                        s.name, s.partition, policy.bytes, cap, ",".join(policy.groups), safe,
                    )
        target = min(target, high)
        return target if target > low else None

    def delete_topic(self, topic: str, partition: int | None = None) -> list[int]:
        """Deletes a topic (every partition, or one): durable when this returns. Its records
        go (reclamation frees their space), its committed offsets and settings go, and the
        name can be used again: appends to it make a new stream from offset 0, as Kafka
        does. Readers of the deleted stream see its end. Returns the partitions deleted."""
        parts = self.partitions(topic) if partition is None else [check_partition(partition)]
        done = []
        for p in parts:
            s = self._stream(topic, p, False)
            if s is None:
                continue
            with self._lock:
                self.engine.stream_delete(s.stream_no)
                self._index.remove(s)
            self.cursors.forget(stream_key(s.org_id, s.topic_hash, s.partition))
            done.append(p)
        if done and not self.partitions(topic) and self.settings.overrides(self.org_id, topic):
            self._size_limits.clear()
            self.settings.set(
                self.org_id, topic,
                **{k: "default" for k in ("retention_ms", "retention_bytes", "retention_groups")},
            )
        return done

    def reclaim(self) -> int:
        """Deletes segment files that hold only trimmed data; returns how many."""
        n = self.engine.reclaim()
        self.stats.reclaimed_segments += n
        return n

    # -- checks -----------------------------------------------------------------------
    def recovery_report(self) -> dict[str, int]:
        return self.engine.recovery_report()

    def verify(self) -> list[tuple[str, int, int, str]]:
        """Reads every stored record; returns (topic, partition, offset, problem) per bad one."""
        out = []
        for no, offset, what in self.engine.verify():
            s = self._index.by_no(no)
            out.append((s.name if s else f"#{no}", s.partition if s else -1, offset, what))
        return out
