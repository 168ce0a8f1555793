"""LocalEngine: the local C core behind the engine interface (walfs/engine/contract.py).

It owns the C core binding (walfs/local/core.py: the one source of truth for offsets and
watermarks), the topic index (names -> streams), the cursor store (the one commit rule),
the per-topic settings, and a background duty: retention, then segment reclamation."""

import copy
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from walfs._core import ffi
from walfs.common.metrics import TALLY_FOLD, WalStats
from walfs.engine import settings as retention
from walfs.engine.names import check_partition, stream_key, topic_bytes, topic_hash
from walfs.engine.settings import Policy
from walfs.engine.types import REC_SIZE, Appender, Change, StreamInfo, VerifyProgress
from walfs.engine.watchers import Watchers
from walfs.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    WalClosedError,
    WalCorruptError,
    WalIOError,
)
from walfs.local.core import Engine
from walfs.local.cursors import CursorStore
from walfs.local.settings_file import TopicSettings
from walfs.local.topic_index import Stream, TopicIndex, drop_legacy_snapshot

log = logging.getLogger("walfs")
# The summary line of every open (log_recovery): the daemons show it at their default level.
RECOVERY_LOG = logging.getLogger("walfs.recovery")

# Geometry of a new WAL (an existing one keeps what it was created with). The environment
# can change the defaults: WALFS_SEGMENT_SIZE, WALFS_BLOCK_SIZE (bytes).
DEFAULT_SEGMENT_SIZE = 1 << 30
DEFAULT_BLOCK_SIZE = 10 << 20
MAX_U32 = 2**32 - 1

assert ffi.sizeof("walfs_rec_t") == REC_SIZE and ffi.offsetof("walfs_rec_t", "buf_pos") == 32


class LocalEngine:
    """A walfs.engine.contract.LogEngine on a local data directory (see that module for the
    contract of each call)."""

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
        backpressure_s: float = 5.0,
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
        self.core = Engine(
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
        _inject_env_faults(self.core)
        self.fsync = fsync
        self.segment_size = self.core.segment_size
        # How long an append past its stream's size limit + one segment waits for a
        # retention pass to make room before it fails with ENOSPC (backpressure).
        self.backpressure_s = backpressure_s
        legacy = self.core.recovery_report()["catalog_version"] < 2  # no cursor manifest yet
        self.cursors = CursorStore(self.path, read_only, legacy=legacy)
        # The WAL's default retention (None: keep everything) and per-topic overrides.
        self.retention_default = Policy(retention_ms, retention_bytes, tuple(retention_groups))
        try:
            self.topics_conf = TopicSettings(self.path, read_only)
        except BaseException:
            self.core.close()
            raise
        self._lock = threading.Lock()  # the stream maps
        self._retention_lock = threading.Lock()  # apply_retention
        self._watchers = Watchers()
        # [n], bumped by delete() (of any org view): Appender handles re-resolve their stream
        self._generation = [0]
        self._owner: LocalEngine | None = None  # set on for_org views: the engine that closes
        self._index = TopicIndex()
        live = 0
        for no in range(self.core.stream_count()):
            info = self.core.stream_info(no)
            if not info.deleted:
                self._index.add(Stream(no, info.org_id, info.partition, info.topic_hash, info.name))
                live += 1
        log_recovery(self.path, self.core.recovery_report(), live, self.stats.open_seconds, read_only)
        self._stop = threading.Event()
        # Wakes the background thread early: a stream with a size limit is charged for more
        # segment files than a pass keeps (retention.file_budget), or an append waits.
        self._wake = threading.Event()
        self._size_limits: dict[int, int | None] = {}  # stream_no -> retention bytes (a cache)
        self._grown: dict[int, int] = {}  # stream_no -> bytes appended since the last look
        # A size-limited stream's files are counted after every this many appended bytes.
        self._growth_step = max(self.segment_size // 16, 4096)
        # [background passes done (ok or failed), the last one's error], under _pass_done;
        # a list so that for_org views share it with the owner
        self._passes: list[Any] = [0, None]
        self._pass_done = threading.Condition()
        self._worker: threading.Thread | None = None
        if not read_only:
            for s in self._index.org_streams_all():
                self._limit_of(s)  # sets the stream's file cap before any append
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
    def close(self) -> None:
        if self.core.closed or self._owner is not None:  # a view is closed by its owner
            return
        self.stop_background()
        try:
            self.core.close()
        finally:
            self._notify(Change("close", "", -1))  # wakes wait_for callers

    def stop_background(self) -> None:
        """Stops the retention/reclamation thread (close(), and walfs.local.debug's power cut)."""
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join()

    @property
    def closed(self) -> bool:
        return self.core.closed

    def for_org(self, org_id: int) -> "LocalEngine":
        if not isinstance(org_id, int) or isinstance(org_id, bool) or not 0 <= org_id < 2**63:
            raise ValueError(f"org_id must be an int in 0..2**63-1, not {org_id!r}")
        if org_id == self.org_id:
            return self
        view = copy.copy(self)  # every lock, map and thread shared; only the org differs
        view.org_id = org_id
        view._owner = self._owner or self
        return view

    @property
    def failed(self) -> bool:
        return self.core.failed

    def _background(self, reclaim_every: float) -> None:
        """Retention, then reclamation, every reclaim_every seconds, or at once when a
        size-limited stream is charged for more files than a pass keeps or an append waits
        for room (retention.file_budget)."""
        while True:
            self._wake.wait(reclaim_every)
            self._wake.clear()
            if self._stop.is_set():
                self._pass_finished(None)
                return
            error: BaseException | None = None
            try:
                self.apply_retention()
                self.stats.reclaimed_segments += self.core.reclaim()
            except WalClosedError:
                self._pass_finished(None)
                return
            except Exception as e:  # a background failure must not kill the worker silently
                log.exception("walfs background work failed")
                error = e
            self._pass_finished(error)

    def _pass_finished(self, error: BaseException | None) -> None:
        with self._pass_done:
            self._passes[0] += 1
            self._passes[1] = error
            self._pass_done.notify_all()

    def _with_room(self, s: Stream, attempt: Callable[[], Any]) -> Any:
        """Runs an append; while the core refuses it because its stream is at its file cap
        (EDQUOT: nothing was appended; retention.file_budget), wakes the background pass and
        waits for it to trim and reclaim, then tries again, for up to backpressure_s. Past
        that the append fails with WalIOError(ENOSPC) naming the last pass's error:
        appends wait for retention rather than take the disk past the bound."""
        deadline = None
        while True:
            try:
                return attempt()
            except WalIOError as e:
                if e.errno != errno.EDQUOT:
                    raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.backpressure_s
                self.stats.backpressure_waits += 1
            if now >= deadline or self._stop.is_set() or self._worker is None:
                limit = self._size_limits.get(s.stream_no)
                last_error = self._passes[1]
                why = f": the last pass failed: {last_error}" if last_error else ""
                raise WalIOError(
                    errno.ENOSPC,
                    f"append to {s.name!r}[{s.partition}]: the stream is at its size limit "
                    f"({limit} bytes) plus one segment ({self.segment_size} bytes) and "
                    f"retention made no room within {self.backpressure_s} s{why}",
                )
            self._wait_for_pass(deadline - now)

    def _wait_for_pass(self, timeout: float) -> None:
        """Wakes the background pass and waits for the next one to end (or the timeout)."""
        passes = self._passes
        with self._pass_done:
            seen = passes[0]
            self._wake.set()
            self._pass_done.wait_for(lambda: passes[0] > seen, timeout)

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
                no = self.core.stream_open(self.org_id, partition, thash, raw, True)
                assert no is not None
                s = Stream(no, self.org_id, partition, thash, topic)
                self._limit_of(s)  # its file cap, before its first append
                self._index.add(s)
                created = True
            else:
                created = False
        if created:
            self._notify(Change("create", topic, partition, self.org_id))
        return s

    def streams(self, topic: str | None = None) -> list[tuple[str, int]]:
        if topic is not None:
            return [(topic, p) for p in self._index.partitions(self.org_id, topic)]
        return sorted((s.name, s.partition) for s in self._index.org_streams(self.org_id))

    def create(self, topic: str, partition: int = 0) -> None:
        self._stream(topic, partition, True)

    def info(self, topic: str, partition: int = 0) -> StreamInfo:
        s = self._stream(topic, partition, False)
        if s is None:
            return StreamInfo(
                self.org_id, topic, topic_hash(self.org_id, topic).hex(), partition, 0, 0, 0, 0, 0
            )
        low, high, durable, next_byte, _durable_byte = self.core.marks(s.stream_no)
        low_byte = 0
        if low:
            try:
                low_byte = self.core.byte_position(s.stream_no, low)
            except OffsetOutOfRangeError:  # trimmed since marks(): read both under one lock
                i = self.core.stream_info(s.stream_no)
                low, high, low_byte, next_byte = i.low_offset, i.next_offset, i.low_byte, i.next_byte
        return StreamInfo(
            self.org_id, topic, s.topic_hash.hex(), partition, low, high, low_byte, next_byte, durable
        )

    def delete(self, topic: str, partition: int | None = None) -> list[int]:
        parts = (
            self._index.partitions(self.org_id, topic) if partition is None else [check_partition(partition)]
        )
        done = []
        for p in parts:
            s = self._stream(topic, p, False)
            if s is None:
                continue
            with self._lock:
                self.core.stream_delete(s.stream_no)
                self._index.remove(s)
                self._generation[0] += 1
            self.cursors.forget(stream_key(s.org_id, s.topic_hash, s.partition))
            done.append(p)
            self._notify(Change("delete", topic, p, self.org_id))
        if (
            done
            and not self._index.partitions(self.org_id, topic)
            and self.topics_conf.overrides(self.org_id, topic)
        ):
            self._size_limits.clear()
            self.topics_conf.forget(self.org_id, topic)
        return done

    # -- appending ------------------------------------------------------------------
    def append(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any, *, wait: bool = True
    ) -> int:
        return self._append_batch(topic, partition, data, meta_lens, value_lens, wait)

    def append_nowait(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any
    ) -> int | None:
        n = _check_lengths(len(data), meta_lens, value_lens)
        s = self._stream(topic, partition, False)
        if s is None:  # creating a stream writes and syncs the catalog
            return None
        try:
            got = self.core.append_nowait(s.stream_no, data, meta_lens, value_lens)
        except WalIOError as e:  # EDQUOT: at its file cap, retention must make room first
            if e.errno != errno.EDQUOT:
                raise
            return None
        if got is None:
            return None
        _gid, offset, ticket = got
        self._appended(s, ticket, n, len(data), False)
        return offset

    def _append_batch(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any, wait: bool
    ) -> int:
        core = self.core
        return self._append_bodies(
            topic,
            partition,
            len(data),
            meta_lens,
            value_lens,
            lambda stream_no: core.append(stream_no, data, meta_lens, value_lens),
            wait,
        )

    def append_pieces(
        self, topic: str, partition: int, pieces: Sequence[Any], meta_lens: Any, value_lens: Any
    ) -> int:
        core = self.core
        return self._append_bodies(
            topic,
            partition,
            sum(memoryview(p).nbytes for p in pieces),
            meta_lens,
            value_lens,
            lambda stream_no: core.append_pieces(stream_no, pieces, meta_lens, value_lens),
            True,  # durable on return under fsync="always", as append_batch
        )

    def _append_bodies(
        self,
        topic: str,
        partition: int,
        nbytes: int,
        meta_lens: Any,
        value_lens: Any,
        call: Callable[[int], tuple[int, int, int]],
        wait: bool,
    ) -> int:
        """The one path of a batch append: lengths checked against the `nbytes` of bodies,
        the stream made, `call(stream_no)` under the room rule, then the bookkeeping."""
        n = _check_lengths(nbytes, meta_lens, value_lens)
        s = self._stream(topic, partition, True)
        assert s is not None
        _gid, offset, ticket = self._with_room(s, lambda: call(s.stream_no))
        self._appended(s, ticket, n, nbytes, wait)
        return offset

    def append_lines(self, topic: str, partition: int, data: Any) -> tuple[int, int]:
        if not data:
            raise ValueError("append_lines needs at least one byte")
        s = self._stream(topic, partition, True)
        assert s is not None
        core = self.core
        try:  # _with_room only once refused: this is every mount WRITE's path
            _gid, offset, ticket, n = core.append_lines(s.stream_no, data)
        except WalIOError as e:  # EDQUOT: at its size limit + one segment (backpressure)
            if e.errno != errno.EDQUOT:
                raise
            _gid, offset, ticket, n = self._with_room(s, lambda: core.append_lines(s.stream_no, data))
        self._appended(s, ticket, n, len(data))
        return offset, n

    def appender(self, topic: str, partition: int = 0) -> Appender:
        return LocalAppender(self, topic, partition)

    def _appended(self, s: Stream, ticket: int, n: int, nbytes: int, wait: bool = True) -> None:
        self.stats.appended(s.name, s.partition, n, nbytes)
        if self._size_limits.get(s.stream_no, -1) is not None:  # None: no size limit (the usual case)
            self._note_growth(s, nbytes)
        if self._watchers.active:  # an attribute: __bool__ would cost each append a frame
            self._notify(Change("append", s.name, s.partition, s.org_id))
        if wait and self.fsync == "always":
            # Appenders of the same stream share the next fsync (group commit).
            with self.stats.durable_waits.time("append"):
                self.core.wait_durable(ticket)

    def _limit_of(self, s: Stream) -> int | None:
        """The stream's size limit (cached), with its file cap set in the core."""
        limit = self._size_limits.get(s.stream_no, -1)
        if limit == -1:
            limit = self.topics_conf.policy(s.org_id, s.name, self.retention_default).bytes
            cap = 0 if limit is None else retention.file_budget(limit, self.segment_size)[1]
            self.core.set_file_cap(s.stream_no, min(cap, MAX_U32))
            self._size_limits[s.stream_no] = limit
        return limit

    def _note_growth(self, s: Stream, nbytes: int) -> None:
        """Wakes the background pass as soon as a size-limited stream is charged for more
        segment files than a pass keeps (counted every _growth_step appended bytes)."""
        limit = self._limit_of(s)
        if limit is not None:
            grown = self._grown.get(s.stream_no, 0) + nbytes
            if grown >= self._growth_step:
                grown = 0
                files = self.core.stream_files(s.stream_no)[0]
                if files > retention.file_budget(limit, self.segment_size)[0]:
                    self._wake.set()
            self._grown[s.stream_no] = grown

    def sync(self) -> None:
        with self.stats.durable_waits.time("sync"):
            self.core.sync()

    # -- change notification --------------------------------------------------------
    def watch(self, fn: Callable[[Change], None]) -> Callable[[], None]:
        return self._watchers.add(fn, self.org_id)

    def _notify(self, change: Change) -> None:
        self._watchers.notify(change)

    # -- reading --------------------------------------------------------------------
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
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
        s = self._stream(topic, partition, False)
        if s is None:
            if offset == 0:
                return 0
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {topic!r} (empty)")
        try:
            return self.core.read_into(s.stream_no, offset, buf, recs, max_records, max_bytes)
        except CorruptRecordError as e:
            raise self._damaged(s, e) from None
        except OffsetOutOfRangeError:
            low, high = self.core.marks(s.stream_no)[:2]
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {low}..{high} of {topic!r}[{partition}]"
            ) from None

    def read_kafka_batch(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> bytes | bytearray | memoryview:
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
        s = self._stream(topic, partition, False)
        if s is None:
            if offset == 0:
                return b""
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {topic!r} (empty)")
        try:
            return self.core.read_kafka_batch(s.stream_no, offset, max_records, max_bytes)
        except CorruptRecordError as e:
            raise self._damaged(s, e) from None
        except OffsetOutOfRangeError:
            low, high = self.core.marks(s.stream_no)[:2]
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {low}..{high} of {topic!r}[{partition}]"
            ) from None

    def read_bytes(self, topic: str, partition: int, position: int, buf: Any) -> int:
        if position < 0:
            raise OffsetOutOfRangeError("position must not be negative")
        s = self._stream(topic, partition, False)
        if s is None:
            return 0
        try:
            return self.core.read_bytes_into(s.stream_no, position, buf, len(buf))
        except CorruptRecordError as e:
            raise self._damaged(s, e) from None

    def _damaged(self, s: Stream, e: CorruptRecordError) -> CorruptRecordError:
        """A read met a damaged record: names it in the error, and logs it (with what to
        do) and counts it (walfs_corrupt_records_total) the first time."""
        e.topic, e.partition = s.name, s.partition
        offset = -1 if e.offset is None else e.offset
        where = f"record at offset {offset} of {s.name!r} partition {s.partition}"
        e.args = (f"{where} is corrupt (fails its checksum): run `walfs fsck {self.path}`",)
        if self.stats.corrupt.first(s.stream_no, offset):
            log.error(
                "damaged record: topic %r partition %d offset %d fails its checksum; reads that "
                "reach it fail (EIO on the mount, CORRUPT_MESSAGE to Kafka), the records before "
                "it are served; run `walfs fsck %s` (docs/operations.md)",
                s.name, s.partition, offset, self.path,
            )
        return e

    def locate(
        self,
        topic: str,
        partition: int = 0,
        *,
        offset: int | None = None,
        byte: int | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        if (offset is None) + (byte is None) + (timestamp_ms is None) != 2:
            raise ValueError("locate takes exactly one of offset=, byte=, timestamp_ms=")
        s = self._stream(topic, partition, False)
        if offset is not None:
            if not isinstance(offset, int) or offset < 0:
                raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
            if s is None:
                if offset == 0:
                    return 0
                raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {topic!r} (empty)")
            return self.core.byte_position(s.stream_no, offset)
        if byte is not None:
            if byte < 0:
                raise OffsetOutOfRangeError("position must not be negative")
            return self.core.offset_at_byte(s.stream_no, byte) if s else 0
        assert timestamp_ms is not None
        return self.core.offset_for_time(s.stream_no, timestamp_ms) if s else 0

    def resident(self, topic: str, partition: int, position: int, size: int) -> bool:
        s = self._stream(topic, partition, False)
        return True if s is None or position < 0 else self.core.bytes_resident(s.stream_no, position, size)

    # -- trims ------------------------------------------------------------------------
    def trim(self, topic: str, partition: int, before_offset: int) -> None:
        s = self._stream(topic, partition, False)
        if s is None:
            if before_offset == 0:
                return
            raise OffsetOutOfRangeError(f"cannot trim empty topic {topic!r} to {before_offset}")
        low, high = self.core.marks(s.stream_no)[:2]
        if not isinstance(before_offset, int) or before_offset < 0 or before_offset > high:
            raise OffsetOutOfRangeError(f"cannot trim {topic!r}[{partition}] to {before_offset} (0..{high})")
        if before_offset > low:
            self.core.trim(s.stream_no, before_offset)  # syncs first past the durable mark
            self._notify(Change("trim", topic, partition, self.org_id))

    # -- consumer cursors -----------------------------------------------------------
    def _key(self, topic: str, partition: int) -> str:
        return stream_key(self.org_id, topic_hash(self.org_id, topic), check_partition(partition))

    def committed(self, group: str, topic: str, partition: int = 0) -> tuple[int, str] | None:
        return self.cursors.get_entry(group, self._key(topic, partition))

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
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"cannot commit offset {offset!r} of {topic!r}[{partition}]")
        s = self._stream(topic, partition, False)
        high, durable = self.core.marks(s.stream_no)[1:3] if s else (0, 0)
        if offset > high:
            raise OffsetOutOfRangeError(
                f"cannot commit offset {offset} of {topic!r}[{partition}]: the end is {high}"
            )
        if offset > durable:
            self.core.sync()
        return self.cursors.put(
            group, self._key(topic, partition), offset, advance_only=advance_only, metadata=metadata
        )

    def forget(self, group: str, topic: str | None = None, partition: int = 0) -> bool:
        if topic is None:
            return self.cursors.delete_group(group, self.org_id)
        return self.cursors.delete(group, self._key(topic, partition))

    def groups(self) -> list[str]:
        return self.cursors.groups(self.org_id)

    def create_group(self, group: str) -> None:
        self.cursors.create_group(group, self.org_id)

    def _clamp_cursors(self) -> None:
        """A cursor past its stream's end (the log lost its tail: a power cut under an
        older release, a restored backup) would make the group skip the records that reuse
        those offsets. It is set back to the end, and logged."""
        ends = {}
        for s in self._index.org_streams_all():
            ends[stream_key(s.org_id, s.topic_hash, s.partition)] = (s, self.core.marks(s.stream_no)[1])
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
                        group,
                        name,
                        offset,
                        end,
                        end,
                    )
                    self.cursors.put(group, key, end)

    # -- per-topic settings, retention and reclamation --------------------------------
    def settings(self, topic: str) -> dict[str, Any]:
        return self.topics_conf.overrides(self.org_id, topic)

    def set_settings(self, topic: str, **values: Any) -> None:
        topic_bytes(topic)
        self.topics_conf.set(self.org_id, topic, **values)
        self._size_limits.clear()
        for p in self._index.partitions(self.org_id, topic):
            s = self._index.get(self.org_id, topic, p)
            if s is not None:
                self._limit_of(s)  # the new file cap, before the next append
        self._wake.set()  # a lower limit is enforced now, not at the next timer

    def apply_retention(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        """Trims every stream (of every org) to what its policy keeps; returns the new low
        watermarks of the streams it trimmed. The background thread runs it."""
        if self.read_only:
            return {}
        now = retention.now_ms() if now_ms is None else now_ms
        out = {}
        with self._retention_lock:  # one pass at a time (the background one and callers')
            for s in self._index.org_streams_all():
                policy = self.topics_conf.policy(s.org_id, s.name, self.retention_default)
                if policy.unlimited:
                    continue
                try:
                    target = self._retention_target(s, policy, now)
                except OffsetOutOfRangeError:
                    # A trim from another face (setfattr, DeleteRecords) moved the low
                    # watermark past what this pass had read: the next pass looks again.
                    continue
                if target is not None:
                    self.core.trim(s.stream_no, target)
                    out[(s.org_id, s.name, s.partition)] = target
                    self._notify(Change("trim", s.name, s.partition, s.org_id))
        return out

    def _retention_target(self, s: Stream, policy: Policy, now: int) -> int | None:
        low, high = self.core.marks(s.stream_no)[:2]
        if high == low:
            return None
        target = low
        if policy.ms is not None:
            target = max(target, self.core.offset_for_time(s.stream_no, now - policy.ms))
        cap = low  # what the size limit alone demands
        if policy.bytes is not None:
            # Whole segment files (retention.file_budget): the stream keeps its newest `keep`
            # files, from the first record of the oldest of them.
            keep = retention.file_budget(policy.bytes, self.segment_size)[0]
            files, firsts = self.core.stream_files(s.stream_no, 64)
            if files > keep:
                cap = max(low, firsts[files - keep])
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
                        s.name,
                        s.partition,
                        policy.bytes,
                        cap,
                        ",".join(policy.groups),
                        safe,
                    )
        target = min(target, high)
        return target if target > low else None

    def disk_use(self, topic: str, partition: int = 0) -> int:
        """The bytes of the segment files the stream is charged for (csrc/budget.c: whole
        files holding its kept runs, or only its runs): what retention_bytes bounds."""
        s = self._stream(topic, partition, False)
        return 0 if s is None else self.core.stream_files(s.stream_no)[0] * self.segment_size

    def reclaim(self) -> int:
        """Deletes segment files that hold only trimmed data; returns how many."""
        n = self.core.reclaim()
        self.stats.reclaimed_segments += n
        return n

    # -- checks -----------------------------------------------------------------------
    def report(self) -> dict[str, int]:
        return self.core.recovery_report()

    def disk_stats(self) -> dict[str, Any]:
        """The fsync histogram and write bytes of walfs.common.metrics (walfs_disk_stats)."""
        return self.core.disk_stats()

    def verify(self, progress: VerifyProgress | None = None) -> list[tuple[str, int, int, str]]:
        out = []
        for no, offset, what in self.core.verify(progress):
            s = self._index.by_no(no)
            out.append((s.name if s else f"#{no}", s.partition if s else -1, offset, what))
        return out


class LocalAppender:
    """engine_api.Appender on the local core: the stream is resolved once; an append is
    one C call (walfs_append_one: the record copied into the segment's mapping, the
    fsync="always" wait inside the same call) and no lock: the counters take the byte
    count through the stream's tally (metrics.WalStats.stream_tally). `append` is a
    closure over what it needs (at about 2 us a call, each attribute look-up it saves is
    a few percent); when a delete() bumps the engine's generation, it resolves the stream
    again, rebinding its own variables, so a reference to it taken earlier stays right."""

    append: Callable[[bytes], int]

    def __init__(self, engine: LocalEngine, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        eng = engine
        wait = eng.fsync == "always"
        append_one = eng.core.append_one
        stats = eng.stats
        limits = eng._size_limits
        watchers = eng._watchers

        gen = eng._generation  # [n], shared by the engine's org views

        def resolve() -> tuple[int, Stream, int, list[int]]:
            generation = gen[0]
            s = eng._stream(topic, partition, True)
            assert s is not None
            return generation, s, s.stream_no, stats.stream_tally(s.name, s.partition)

        generation, s, no, tally = resolve()

        def append(value: bytes) -> int:
            nonlocal generation, s, no, tally
            if gen[0] != generation:  # a stream was deleted: maybe this one
                generation, s, no, tally = resolve()
            n = len(value)
            if n >= MAX_U32:
                raise RecordTooLargeError("a record is larger than 4 GiB")
            try:
                if wait:
                    with stats.durable_waits.time("append"):
                        offset = append_one(no, value, True)
                else:
                    offset = append_one(no, value, False)
            except WalIOError as e:  # EDQUOT: at its size limit + one segment (backpressure)
                if e.errno != errno.EDQUOT:
                    raise
                offset = eng._with_room(s, lambda: append_one(no, value, wait))
            tally.append(n)
            if len(tally) >= TALLY_FOLD:
                stats.fold()
            if limits.get(no, -1) is not None:  # None: no size limit (the usual case)
                eng._note_growth(s, n)
            if watchers.active:
                eng._notify(Change("append", s.name, s.partition, s.org_id))
            return offset

        self.append = append


def _check_lengths(size: int, meta_lens: Any, value_lens: Any) -> int:
    """The number of records of a batch append whose bodies take `size` bytes, once its
    lengths are checked."""
    n = len(meta_lens)
    if n == 0 or len(value_lens) != n:
        raise ValueError("append needs one meta and one value length per record, at least one record")
    if sum(meta_lens) + sum(value_lens) != size:
        raise ValueError("the lengths do not add up to the data")
    return n


def log_recovery(path: str, report: dict[str, int], streams: int, seconds: float, read_only: bool) -> None:
    """The summary line of an open (walfs_recovery_report): what recovery found and what it
    cut. A warning when a writer's open cut anything (the tail a crash left; the core names
    each stream it cut just before), information otherwise. A read-only open changes
    nothing on disk: what it leaves out of its view is only information."""
    cut = bool(report["cut_records"] or report["cut_bytes"] or report["freed_blocks"])
    outcome = (
        f"cut {report['cut_records']} torn or unfinished records ({report['cut_bytes']} bytes; "
        f"{report['freed_blocks']} blocks freed)"
        if cut
        else "nothing cut"
    )
    RECOVERY_LOG.log(
        logging.WARNING if cut and not read_only else logging.INFO,
        "recovered %s%s: %d streams, %d records in %d segments (%d runs, %d records checked by CRC); %s; "
        "took %.0f ms",
        path,
        " (read-only: nothing changed on disk)" if read_only else "",
        streams,
        report["records"],
        report["segments"],
        report["blocks"],
        report["verified_records"],
        outcome,
        seconds * 1000,
    )


def _inject_env_faults(core: Engine) -> None:
    """TEST ONLY: WALFS_TEST_FAULT="op:errno:after" (op write|sync|alloc|reclaim) makes the core
    fail that operation after `after` successes, for the daemon tests (the mount and
    `walfs serve` open their engine themselves). Never set it in production; it is logged
    loudly when set."""
    if os.environ.get(retention.CLOCK_FILE_ENV) and not core.read_only:
        log.warning("%s is set: retention reads its clock from a file (tests only)", retention.CLOCK_FILE_ENV)
    spec = os.environ.get("WALFS_TEST_FAULT")
    if not spec or core.read_only:
        return
    op, err, after = spec.split(":")
    log.warning("WALFS_TEST_FAULT=%s: injecting faults (tests only)", spec)
    core.inject_fault(op, int(err), after=int(after))
