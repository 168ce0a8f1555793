"""LocalEngine: the local C core behind the engine interface (walfs/engine/contract.py).

This module is the engine's lifetime (open, org views, close) and its composition: the C
core binding (core.py: the one source of truth for offsets and watermarks), the stream
map (streams.py over topic_index.py), the cursor store and its one commit rule
(commit.py), the per-topic settings, backpressure (backpressure.py), the retention pass
(retention.py) and the background thread that runs it, then reclamation (background.py).
The calls every append and read makes (the stream look-up, the appends, the reads) stay
methods of the engine, reaching their collaborators' state through attributes bound at
open: a call through another object would cost each a Python frame. LocalAppender is in
appending.py; the open's summary line in recovery_log.py."""

import copy
import errno
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from walfs._core import ffi
from walfs.common.metrics import WalStats
from walfs.engine.names import check_org_id, check_partition, stream_key, topic_bytes, topic_hash
from walfs.engine.settings import Policy
from walfs.engine.types import REC_SIZE, Appender, Change, StreamInfo, VerifyProgress
from walfs.engine.watchers import Watchers
from walfs.errors import CorruptRecordError, OffsetOutOfRangeError, WalCorruptError, WalIOError
from walfs.local.appending import LocalAppender, check_lengths
from walfs.local.background import Background
from walfs.local.backpressure import Room
from walfs.local.commit import CommitRule, cursor_key
from walfs.local.core import Engine
from walfs.local.cursors import CursorStore
from walfs.local.env_faults import inject_env_faults
from walfs.local.recovery_log import Heals, log_recovery
from walfs.local.retention import RetentionPass
from walfs.local.settings_file import TopicSettings
from walfs.local.streams import StreamMap
from walfs.local.topic_index import Stream, drop_legacy_snapshot

log = logging.getLogger("walfs")

# Geometry of a new WAL (an existing one keeps what it was created with). The environment
# can change the defaults: WALFS_SEGMENT_SIZE, WALFS_BLOCK_SIZE (bytes).
DEFAULT_SEGMENT_SIZE = 1 << 30
DEFAULT_BLOCK_SIZE = 10 << 20

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
        check_org_id(org_id)
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
        inject_env_faults(self.core)
        self.fsync = fsync
        self.segment_size = self.core.segment_size
        # How long an append past its stream's size limit + one segment waits for a
        # retention pass to make room before it fails with ENOSPC (backpressure).
        self.backpressure_s = backpressure_s
        legacy = self.core.recovery_report()["catalog_version"] < 2  # no cursor manifest yet
        # The metadata files kept twice (issue 36): a writer's open heals a damaged copy of
        # each (the manifest and topics.conf here, the cursor files as clamp() reads them
        # below), a read-only one serves the good copy; both say so (recovery_log.Heals).
        self._heals = Heals(read_only)
        # The WAL's default retention (None: keep everything) and per-topic overrides.
        self.retention_default = Policy(retention_ms, retention_bytes, tuple(retention_groups))
        try:
            self.cursors = CursorStore(self.path, read_only, legacy=legacy, heals=self._heals)
            self.topics_conf = TopicSettings(self.path, read_only, heals=self._heals)
            if legacy and not read_only:
                self.core.upgrade_catalog()  # after the cursor manifest: version 1 had none
        except BaseException:
            self.core.close()
            raise
        self._owner: LocalEngine | None = None  # set on for_org views: the engine that closes

        # The concerns, one object each, shared by the org views (for_org copies the
        # engine, not them). The hot paths (_stream, the appends, read_bytes, LocalAppender)
        # reach their state through attributes bound here: no extra call or hop.
        self._watchers = Watchers()
        # The retention/reclamation thread (background.py): started last, ended by close().
        self._background = Background(self._maintain)
        # Size limits, the growth count that wakes the pass, the wait for room (backpressure.py).
        room = Room(
            self.core, self.topics_conf, self.retention_default, self._background, self.stats, backpressure_s
        )
        self._size_limits = room.limits  # stream_no -> retention bytes; None: no limit (the usual case)
        self._limit_of = room.limit_of
        self._note_growth = room.note_growth
        self._with_room = room.with_room
        # Names -> streams (streams.py); a new stream gets its file cap before it is listed.
        self._streams = StreamMap(self.core, self._limit_of, self._watchers.notify)
        self._index = self._streams.index
        self._generation = self._streams.generation  # [n], bumped by delete(): Appenders re-resolve
        self._commit_rule = CommitRule(self.core, self.cursors)  # commit.py
        self._retention = RetentionPass(  # retention.py
            self.core,
            self._index,
            self.topics_conf,
            self.retention_default,
            self.cursors,
            self._watchers.notify,
        )
        live = self._streams.load()
        log_recovery(self.path, self.core.recovery_report(), live, self.stats.open_seconds, read_only)
        if not read_only:
            streams = self._index.org_streams_all()
            if self.retention_default.bytes is None:  # only topics' own limits: look at those
                ix = self._index
                limited = [
                    ix.get(org, topic, p)
                    for org, topic in self.topics_conf.topics_setting("retention_bytes")
                    for p in ix.partitions(org, topic)
                ]
                room.caps_at_open(s for s in limited if s is not None)
            else:
                room.caps_at_open(streams)  # the size-limited streams' file caps, before any append
            drop_legacy_snapshot(self.path)
            self._commit_rule.clamp(streams)
            del streams
            self._background.start(reclaim_interval_s)

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
        self._background.stop()

    def _maintain(self) -> None:
        """The background pass (background.py runs it): retention, then reclamation."""
        self.apply_retention()
        self.stats.reclaimed_segments += self.core.reclaim()

    @property
    def closed(self) -> bool:
        return self.core.closed

    def for_org(self, org_id: int) -> "LocalEngine":
        check_org_id(org_id)
        if org_id == self.org_id:
            return self
        view = copy.copy(self)  # every collaborator, map and thread shared; only the org differs
        view.org_id = org_id
        view._owner = self._owner or self
        return view

    @property
    def failed(self) -> bool:
        return self.core.failed

    # -- streams (streams.py) ---------------------------------------------------------
    def _stream(self, topic: str, partition: int, create: bool) -> Stream | None:
        check_partition(partition)
        s = self._index.get(self.org_id, topic, partition)
        if s is not None or not create:
            if s is None:
                topic_bytes(topic)
            return s
        return self._streams.open(self.org_id, topic, partition)

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
            self._streams.remove(s)
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
        n = check_lengths(len(data), meta_lens, value_lens)
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
        n = check_lengths(nbytes, meta_lens, value_lens)
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
                s.name,
                s.partition,
                offset,
                self.path,
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

    # -- consumer cursors: the store (self.cursors) and the one rule (commit.py) -------
    def committed(self, group: str, topic: str, partition: int = 0) -> tuple[int, str] | None:
        return self.cursors.get_entry(group, cursor_key(self.org_id, topic, partition))

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
        return self._commit_rule.commit(
            self._stream, self.org_id, group, topic, partition, offset, advance_only, metadata
        )

    def commit_many(
        self, group: str, entries: Sequence[tuple[str, int, int, str]], *, advance_only: bool = False
    ) -> list[bool | Exception]:
        return self._commit_rule.commit_many(self._stream, self.org_id, group, entries, advance_only)

    def forget(self, group: str, topic: str | None = None, partition: int = 0) -> bool:
        if topic is None:
            return self.cursors.delete_group(group, self.org_id)
        return self.cursors.delete(group, cursor_key(self.org_id, topic, partition))

    def groups(self) -> list[str]:
        return self.cursors.groups(self.org_id)

    def create_group(self, group: str) -> None:
        self.cursors.create_group(group, self.org_id)

    # -- per-topic settings, retention (retention.py) and reclamation -----------------
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
        self._background.wake()  # a lower limit is enforced now, not at the next timer

    def apply_retention(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        """Trims every stream (of every org) to what its policy keeps; returns the new low
        watermarks of the streams it trimmed. The background thread runs it."""
        return self._retention.apply(now_ms)

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
        """The C core's recovery report, and `healed_files`: the metadata copies of the
        Python layer's files (topics.conf, cursors.manifest, cursor files) this writer
        rewrote from their good copy since its open (healed_copies() names them)."""
        return {**self.core.recovery_report(), "healed_files": self._heals.healed}

    def healed_copies(self) -> list[str]:
        """The damaged, missing or older metadata copies found since the open, one line
        each naming the file: rewritten from the good copy by a writer, served around by a
        read-only open (which changes nothing)."""
        return list(self._heals.notes)

    def check_cursors(self) -> list[str]:
        """Reads every cursor file (`walfs fsck`; a writer's open reads them all anyway):
        a damaged slot beside a good one joins healed_copies(); returns the damage that
        has no good copy (a file whose slots both fail, a listed file that is missing)."""
        out = []
        for group in self.cursors.groups():
            for key in self.cursors.keys(group):
                try:
                    self.cursors.get_entry(group, key)
                except WalCorruptError as e:
                    out.append(str(e))
        return out

    def disk_stats(self) -> dict[str, Any]:
        """The fsync histogram and write bytes of walfs.common.metrics (walfs_disk_stats)."""
        return self.core.disk_stats()

    def verify(self, progress: VerifyProgress | None = None) -> list[tuple[str, int, int, str]]:
        out = []
        for no, offset, what in self.core.verify(progress):
            s = self._index.by_no(no)
            out.append((s.name if s else f"#{no}", s.partition if s else -1, offset, what))
        return out
