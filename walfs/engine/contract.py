"""The engine contract: the calls every walfs face (the mount, the Kafka listener, the
Spark source and sink, the command line) uses, and that every storage engine implements
for real: the local C core (walfs/local/) and the Kafka cluster (walfs/cluster/).

Modelled on SQLite's VFS: twenty core calls, each with its contract written beside it,
that every engine honours and one test suite checks (tests/test_engine_conformance.py).
What only some engines can do is an optional capability (walfs/engine/capabilities.py),
which walfs/engine/rules.py tests for, with a fallback built on these calls; a face never
asks which engine it has. walfs/open.py is the one module that knows the engines.

Streams are named (topic, partition) inside the engine's org (`LogEngine.org_id`); names
obey walfs.engine.names.topic_bytes and check_partition (InvalidTopicError /
InvalidPartitionError before anything else happens). Offsets are dense from the low
watermark to the high watermark. Every exception is a walfs.errors.WalError.

Contract words used below:
- *published*: readable by every reader of this engine (in this process and others that
  open the same log) once the call returns.
- *durable*: survives a crash of the process or the machine (power loss) once the call
  returns, under the engine's fsync policy: "always" (every append), "interval" (within
  the interval; `sync()` forces it), "never" (only `sync()` and `close()` do).
- Every call is safe from any thread. One writer process per log (the engine takes a
  lock: a second writer gets WalLockedError); any number of read-only engines on the same
  log in other processes see what was published before they opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from walfs.engine.types import DEFAULT_MAX_BYTES, Change, StreamInfo

if TYPE_CHECKING:
    from walfs.common.metrics import WalStats
    from walfs.engine.settings import Policy


class LogEngine(Protocol):
    org_id: int
    path: str  # where the log lives: a data directory, or an engine URL
    read_only: bool
    fsync: str  # one of FSYNC_POLICIES
    stats: WalStats  # counters for walfs.common.metrics (plain integers, read when scraped)
    retention_default: Policy  # the engine-wide retention a topic without overrides gets

    # -- lifetime ---------------------------------------------------------------------
    @property
    def closed(self) -> bool: ...

    @property
    def failed(self) -> bool:
        """True once the engine cannot make appends durable any more (a failed fsync):
        appends raise WalFailedError until it is reopened; the daemons exit with 75."""
        ...

    def close(self) -> None:
        """Makes everything published durable and releases the log; idempotent. Calls in
        other threads finish first; later calls raise WalClosedError; watch() wake-ups
        and wait_for() return."""
        ...

    def for_org(self, org_id: int) -> LogEngine:
        """The same log as another org (a Kafka tenant) sees it: the same engine, with
        stream, group and setting names scoped to org_id (another org's streams, groups
        and changes are not seen; two orgs may use one name for different streams). The
        view shares the engine's lifetime: it is never closed itself, its owner closes
        the engine. ValueError for an org_id outside 0..2**63-1; the engine's own org
        returns the engine itself."""
        ...

    # -- streams ----------------------------------------------------------------------
    def streams(self, topic: str | None = None) -> list[tuple[str, int]]:
        """Every (topic, partition) of the org, sorted; only `topic`'s with a topic. The
        cost follows the answer, not the number of streams in the log."""
        ...

    def create(self, topic: str, partition: int = 0) -> None:
        """Makes an empty stream exist (durable when this returns); a no-op if it exists."""
        ...

    def delete(self, topic: str, partition: int | None = None) -> list[int]:
        """Deletes a topic (every partition, or one), durable when this returns: its records
        (space comes back later), its committed cursors and its settings go; the name can be
        used again from offset 0. Returns the partitions deleted (none: [])."""
        ...

    def info(self, topic: str, partition: int = 0) -> StreamInfo:
        """The stream's identity and marks in one cheap call (the mount asks it on every
        stat). A stream that does not exist reads as empty (every mark 0)."""
        ...

    # -- appending --------------------------------------------------------------------
    def append(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any, *, wait: bool = True
    ) -> int:
        """Appends len(meta_lens) records as one batch (all or none survive a crash),
        creating the stream if needed; returns the first record's offset. Each record's
        body is its meta section (walfs.engine.records.encode_meta; empty for a plain
        value) then its value, bodies back to back in the buffer `data`; meta_lens and
        value_lens are array("I"). Published when this returns; durable under the fsync
        policy. wait=False: the call need not wait for durability whatever the policy;
        the records are durable once a sync() called after it returns (or the policy's
        own sync). For a caller that reports durability itself after such a sync: the
        Kafka listener's acks=all under fsync="always", whose pipelined answers then share
        one fsync (walfs/kafka/produce.py). An engine whose append is always durable on
        return (the cluster's acks=all) honours wait=False by that.
        Errors: ValueError (no records, lengths that do not add up), RecordTooLargeError,
        ReadOnlyError, WalFailedError, WalIOError (ENOSPC: nothing was appended)."""
        ...

    def sync(self) -> None:
        """Makes every append that returned before this call durable (one shared fsync)."""
        ...

    # -- reading ----------------------------------------------------------------------
    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        buf: Any,
        recs: Any,
        max_records: int = 1 << 20,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> int:
        """Reads published records from `offset` on into caller-owned writable buffers:
        their bodies (meta || value) back to back into `buf`, one REC_LAYOUT descriptor
        each into `recs`; returns how many (0 at the high watermark). Stops at
        max_records, len(recs) // REC_SIZE, or before max_bytes (at least one record if
        `buf` holds it). Every record's checksum is verified.
        Errors: OffsetOutOfRangeError (offset outside low..high), BufferTooSmallError
        (the first record does not fit in buf; .needed), CorruptRecordError."""
        ...

    def read_bytes(self, topic: str, partition: int, position: int, buf: Any) -> int:
        """The stream's byte view (each record's value followed by b"\\n"; positions count
        from the stream's first record ever, so a trim does not move them): copies the
        bytes from `position` into the writable buffer (up to its length); returns the
        count, 0 at or past the end. OffsetOutOfRangeError below low_byte or negative;
        CorruptRecordError when a record's checksum fails."""
        ...

    def locate(
        self,
        topic: str,
        partition: int = 0,
        *,
        offset: int | None = None,
        byte: int | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """Maps one of: offset -> where that record starts in the byte view (byte_size for
        the high watermark); byte -> the offset of the record holding that view byte (the
        high watermark at or past the end); timestamp_ms -> the first offset whose append
        time is at or after it (the high watermark if none). OffsetOutOfRangeError for an
        offset outside low..high or a negative position."""
        ...

    # -- change notification --------------------------------------------------------
    def watch(self, fn: Callable[[Change], None]) -> Callable[[], None]:
        """Calls fn(change) after every append (once its records are readable), trim,
        stream creation and deletion of the org's streams, in the thread that made the
        change, and once with kind "close" when the engine closes; returns a function
        that stops the calls. fn must be quick and must not
        raise. No polling: wait_for() below is built on it."""
        ...

    # -- trims --------------------------------------------------------------------------
    def trim(self, topic: str, partition: int, before_offset: int) -> None:
        """Raises the low watermark to before_offset (0..high; lower is a no-op), durable
        when this returns (it syncs first past the durable watermark). Space comes back
        later. OffsetOutOfRangeError past the high watermark."""
        ...

    # -- consumer cursors (the one commit rule) -----------------------------------------
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
        """Sets a group's cursor, durable when this returns. The offset must lie in
        0..high watermark (OffsetOutOfRangeError); past the durable watermark the records
        are made durable first, so a cursor never points past what a power cut leaves.
        advance_only: a commit at or below the current cursor changes nothing, atomically
        (racing readers of one group cannot move it back). `metadata` (Kafka's commit
        metadata, at most MAX_METADATA_BYTES of UTF-8, ValueError beyond) is kept with the
        offset. Returns whether it changed."""
        ...

    def committed(self, group: str, topic: str, partition: int = 0) -> tuple[int, str] | None:
        """The group's cursor on the stream and the metadata its last commit carried ("" for
        none); None if the group never committed there."""
        ...

    def forget(self, group: str, topic: str | None = None, partition: int = 0) -> bool:
        """Forgets, durably, the group's cursor on one stream (Kafka's OffsetDelete), or with
        topic None the org's whole group and every cursor it has on the org's streams
        (Kafka's DeleteGroups; the mount's `.consumers/NAME` goes too; another org's
        group of the same name is untouched). False when there was nothing to forget."""
        ...

    def groups(self) -> list[str]:
        """The org's consumer groups: those with a cursor on one of its streams or made by
        create_group in it. (A group of the local engine made before org markers, with no
        cursor, is listed for every org.)"""
        ...

    def create_group(self, group: str) -> None:
        """Makes a group exist in the org (durably) before its first commit; a no-op if it
        exists there."""
        ...

    # -- per-topic settings ----------------------------------------------------------------
    def settings(self, topic: str) -> dict[str, Any]:
        """The topic's own overrides (walfs.engine.settings.SETTING_KEYS: retention and the
        Kafka topic configs walfs honours), without the engine's defaults
        (walfs.engine.rules.retention gives the policy in force)."""
        ...

    def set_settings(self, topic: str, **values: Any) -> None:
        """Per-topic overrides (retention_ms=, retention_bytes=, retention_groups=, and the
        other SETTING_KEYS; the string "default" removes one), durable and applied by the
        engine from then on. ValueError for an unknown key or a bad value."""
        ...
