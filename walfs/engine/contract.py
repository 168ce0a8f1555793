"""The engine interface: the one face that every walfs face (the mount, the Kafka listener,
the Spark source and sink, `walfs fsck/info`) uses, and that every storage engine stands
behind: today the local C core (walfs/local/engine.py); issue 16 adds a Kafka cluster.

Modelled on SQLite's VFS: a small contract, written down beside each call, that several
implementations honour and one test suite checks (tests/test_engine_conformance.py).
docs/architecture.md says why each call exists.

Streams are named (topic, partition) inside the engine's org (`LogEngine.org_id`); names
obey walfs.engine.names.topic_bytes and check_partition (InvalidTopicError / InvalidPartitionError
before anything else happens). Offsets are dense from the low watermark to the high
watermark. Every exception is a walfs.errors.WalError.

Contract words used below:
- *published*: readable by every reader of this engine (in this process and others that
  open the same log) once the call returns.
- *durable*: survives a crash of the process or the machine (power loss) once the call
  returns, under the engine's fsync policy: "always" (every append), "interval" (within
  the interval; `sync()` forces it), "never" (only `sync()` and `close()` do).
- Every call is safe from any thread. One writer process per log (the engine takes a
  lock: a second writer gets WalLockedError); any number of read-only engines on the same
  log in other processes see what was published before they opened.

This module imports nothing of an engine's internals: open_engine() and repair() pick
the engine for a target and import it late.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from walfs.engine.records import Record, decode_meta, encode_meta, value_is_null
from walfs.errors import BufferTooSmallError, OffsetOutOfRangeError, RecordTooLargeError

if TYPE_CHECKING:
    from walfs.common.metrics import WalStats
    from walfs.engine.settings import Policy

FSYNC_POLICIES = ("never", "interval", "always")
# Kafka's offset.metadata.max.bytes default: the longest metadata string a commit keeps.
MAX_METADATA_BYTES = 4096
DEFAULT_MAX_BYTES = 16 << 20
MAX_RECORD_BYTES = 2**32 - 2  # a value (and a meta section) is at most this long

# One record descriptor of LogEngine.read, 40 bytes, little-endian (numpy-style fields, for
# callers that view the descriptor array as a structured array). The local engine checks
# that its C layout (walfs_rec_t) is this one.
REC_LAYOUT = [
    ("gid", "<u8"),  # the engine's global sequence number of the record (-1 if none)
    ("offset", "<u8"),
    ("timestamp_ms", "<i8"),  # the append time (a producer time travels in the meta section)
    ("meta_len", "<u4"),
    ("value_len", "<u4"),
    ("buf_pos", "<u8"),  # where the record's body (meta || value) starts in buf
]
REC_SIZE = 40
NO_GID = 2**64 - 1  # a descriptor's gid when the engine has none (the -1 above)


# verify()'s progress: (streams done, streams, records checked, their bytes).
VerifyProgress = Callable[[int, int, int, int], None]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """One stream's identity and marks, as one call reads them (LogEngine.info)."""

    org_id: int
    topic: str
    topic_hash: str  # walfs.engine.names.topic_hash, hex
    partition: int
    low_watermark: int  # the first offset still stored (trims raise it)
    high_watermark: int  # the end: the offset the next append gets
    low_byte: int  # the byte view's position of low_watermark
    byte_size: int  # the byte view's size (the position of high_watermark)
    durable_watermark: int = 0  # every record below survives power loss


ChangeKind = Literal["append", "trim", "create", "delete", "close"]


@dataclass(frozen=True, slots=True)
class Change:
    """What LogEngine.watch reports: `kind` happened to (topic, partition) of org_id;
    "close" (topic "", partition -1, org_id -1): the engine closed, the last call a
    watcher gets. A watcher is called only for its engine's org (and for org_id -1)."""

    kind: ChangeKind
    topic: str
    partition: int
    org_id: int = -1


class Appender(Protocol):
    """A stream handle for the cheapest single-record append: the name work is done once,
    when LogEngine.appender makes it. Same contract as LogEngine.append. If the stream is
    deleted, the handle's next append creates the new stream of that name, as
    LogEngine.append would."""

    topic: str
    partition: int

    def append(self, value: bytes) -> int:
        """Appends one plain record (no key, headers or producer time); returns its offset."""
        ...


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
    def append(self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any) -> int:
        """Appends len(meta_lens) records as one batch (all or none survive a crash),
        creating the stream if needed; returns the first record's offset. Each record's
        body is its meta section (walfs.engine.records.encode_meta; empty for a plain value) then
        its value, bodies back to back in the buffer `data`; meta_lens and value_lens are
        array("I"). Published when this returns, durable under the fsync policy.
        Errors: ValueError (no records, lengths that do not add up), RecordTooLargeError,
        ReadOnlyError, WalFailedError, WalIOError (ENOSPC: nothing was appended)."""
        ...

    def append_pieces(
        self, topic: str, partition: int, pieces: Sequence[Any], meta_lens: Any, value_lens: Any
    ) -> int:
        """As append, but the bodies lie back to back in the concatenation of the buffers
        `pieces` (a body may span pieces), which the caller need not join: the local
        engine writes each body from its piece and copies only a body that spans pieces.
        For a caller whose records are already in several buffers: the Spark sink's chunk
        is a marker's meta section, then the values of one or more Arrow buffers. Same
        contract and errors as append (ValueError when the pieces' bytes are not the
        bodies' bytes)."""
        ...

    def append_unsynced(self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any) -> int:
        """As append, but it never waits for durability, whatever the fsync policy: the
        records are published when it returns and durable once a sync() called after it
        returns (or the policy's own sync). For a caller that reports durability itself
        after such a sync, and reads its next request meanwhile: the Kafka listener's
        acks=all under fsync="always", whose pipelined answers then share one fsync
        (walfs/kafka/produce.py). Same errors as append."""
        ...

    def append_nowait(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any
    ) -> int | None:
        """As append_unsynced, but only if the engine can append without waiting (on the
        disk, the network, retention or another appender): the first offset, or None with
        nothing appended, after which the caller appends the usual way (in a thread). It
        never creates the stream. For a caller on an event loop: the Kafka listener
        appends a produce in place, not in a worker thread, when this takes it
        (walfs/kafka/produce.py). The local engine refuses a batch that needs a new
        segment or a new gid epoch (both fsync), a stream at its file cap, or a lock held
        by another thread; the cluster engine refuses every batch (its append is a
        round trip). Same errors as append otherwise."""
        ...

    def append_lines(self, topic: str, partition: int, data: Any) -> tuple[int, int]:
        """Appends each line of `data` (split on b"\\n" by the engine; a final newline ends
        the last line) as one batch of plain records: the file face's write. Returns
        (first offset, number of records). Same contract as append."""
        ...

    def appender(self, topic: str, partition: int = 0) -> Appender:
        """A handle for cheap single appends to one stream (creates the stream)."""
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

    def read_kafka_batch(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> bytes | bytearray | memoryview:
        """The Kafka face's fetch: published records from `offset` on as one uncompressed
        Kafka record batch (magic v2, walfs.wire.batch_codec's layout: key, headers and
        producer timestamp from each record's meta, the append time otherwise), in a
        buffer of its own; b"" at the high watermark. At least one record when any
        exists (even one larger than max_bytes), then up to max_records and about
        max_bytes. Every record's checksum is verified before its bytes are used; a
        damaged record after the first ends the batch before it (the next call reports
        it). Errors: OffsetOutOfRangeError, CorruptRecordError (the first record),
        ValueError (the first record's meta section does not parse)."""
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

    def resident(self, topic: str, partition: int, position: int, size: int) -> bool:
        """A hint: True when reading these view bytes will not wait for a disk or the
        network (the mount then reads on its event loop). Engines that cannot tell: False."""
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

    def committed(self, group: str, topic: str, partition: int = 0) -> int | None:
        """The group's cursor on the stream, None if it never committed there."""
        ...

    def committed_metadata(self, group: str, topic: str, partition: int = 0) -> str:
        """The metadata the group's last commit on the stream carried ("" for none)."""
        ...

    def delete_cursor(self, group: str, topic: str, partition: int = 0) -> bool:
        """Forgets the group's cursor on one stream (Kafka's OffsetDelete), durably; False
        when there was none."""
        ...

    def delete_group(self, group: str) -> bool:
        """Deletes the org's group and every cursor it has on the org's streams (Kafka's
        DeleteGroups; the mount's `.consumers/NAME` goes too), durably; False when the org
        had no such group. Another org's group of the same name is untouched."""
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
    def retention(self, topic: str) -> Policy:
        """The retention in force for a topic: its overrides over the engine's default."""
        ...

    def topic_settings(self, topic: str) -> dict[str, Any]:
        """The topic's own overrides (walfs.engine.settings.SETTING_KEYS: retention and the Kafka
        topic configs walfs honours), without the engine's defaults."""
        ...

    def set_retention(self, topic: str, **values: Any) -> None:
        """Per-topic overrides (retention_ms=, retention_bytes=, retention_groups=; the
        string "default" removes one), durable and applied by the engine from then on."""
        ...

    # -- checks -----------------------------------------------------------------------------
    def report(self) -> dict[str, int]:
        """The engine's own figures (the local engine: its recovery report)."""
        ...

    def verify(self, progress: VerifyProgress | None = None) -> list[tuple[str, int, int, str]]:
        """Reads every stored record; (topic, partition, offset, problem) per bad one.
        `progress(streams_done, streams, records, bytes)` is called now and then on the way
        (an engine that cannot tell may never call it)."""
        ...


# -- engine-neutral rules over the interface (one home each) --------------------------------
def is_local(target: str) -> bool:
    """The one rule for what a target names: URL-like targets (kafka://...) are remote
    engines; anything else is a local data directory."""
    return "://" not in target


def normalize_target(target: str) -> str:
    """A target as faces store and show it: local directories absolute, URLs unchanged."""
    import os

    return os.path.abspath(target) if is_local(target) else target


def prepare_target(target: str) -> None:
    """Creates a local data directory if missing (remote engines make their own topics)."""
    import os

    if is_local(target):
        os.makedirs(target, exist_ok=True)


class Watchers:
    """The watch() registry both engines use: copy on write, so notify() reads without a
    lock from any thread; truthy while anyone watches (appends skip the work otherwise).
    `active` says the same as a plain attribute, for the single-append hot path (a
    __bool__ call costs that path a Python frame)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fns: list[tuple[int, Callable[[Change], None]]] = []  # (org_id, fn)
        self.active = False

    def __bool__(self) -> bool:
        return self.active

    def add(self, fn: Callable[[Change], None], org_id: int) -> Callable[[], None]:
        """fn gets the changes of org_id's streams (and those of org -1: the close)."""
        entry = (org_id, fn)
        with self._lock:
            self._fns = [*self._fns, entry]
            self.active = True

        def stop() -> None:
            with self._lock:
                self._fns = [w for w in self._fns if w is not entry]
                self.active = bool(self._fns)

        return stop

    def notify(self, change: Change) -> None:
        for org_id, fn in self._fns:
            if change.org_id in (org_id, -1):
                fn(change)


def open_engine(target: str, **options: Any) -> LogEngine:
    """The engine for `target`: a data directory is the local C core (options as
    walfs.Wal's); kafka://HOST:PORT[,...]/NAMESPACE is a Kafka cluster
    (walfs/cluster/engine.py)."""
    if target.startswith("kafka://"):
        from walfs.cluster.engine import KafkaEngine

        return KafkaEngine(target, **options)
    from walfs.local.engine import LocalEngine

    return LocalEngine(target, **options)


def repair(damaged: str, into: str) -> Any:
    """`walfs fsck --repair`: copies what is intact of a damaged log into a new one
    (the local engine: walfs/local/salvage.py). Returns its SalvageReport."""
    from walfs.local.salvage import salvage

    return salvage(damaged, into)


def durable_end(engine: LogEngine, topic: str, partition: int, offset: int) -> int:
    """Where a consumer at `offset` may read up to: the durable watermark, after syncing
    if records were published beyond a durable mark at or below `offset` (one shared
    fsync), so a consumer never waits for the interval syncer and never sees a record
    that a power cut could take back."""
    return durable_info(engine, topic, partition, offset).durable_watermark


def durable_info(engine: LogEngine, topic: str, partition: int, offset: int) -> StreamInfo:
    """The partition's info once durable_end's sync (if one is due) is done: its
    durable_watermark is durable_end's answer, read with the other marks in one call."""
    i = engine.info(topic, partition)
    if i.durable_watermark <= offset < i.high_watermark:
        engine.sync()
        i = engine.info(topic, partition)
    return i


def encode_records(records: Iterable[Any]) -> tuple[bytes, array, array]:
    """(key, value, headers, timestamp_ms) tuples or Record-like objects in the stored
    layout LogEngine.append takes: (bodies, meta lengths, value lengths). A None value is
    a null (a Kafka tombstone): stored empty, marked in the meta section."""
    bodies: list[bytes] = []
    metas = array("I")
    values = array("I")
    for r in records:
        if isinstance(r, tuple):
            key, value, headers, ts = r
        else:
            key, value, headers, ts = r.key, r.value, r.headers, getattr(r, "timestamp_ms", None)
        meta = encode_meta(key, headers, ts, null_value=value is None)
        value = b"" if value is None else bytes(value)
        if len(value) > MAX_RECORD_BYTES:
            raise RecordTooLargeError("a record is larger than 4 GiB")
        bodies.append(meta + value if meta else value)
        metas.append(len(meta))
        values.append(len(value))
    if not bodies:
        raise ValueError("no records to append")
    return b"".join(bodies), metas, values


def committed_offsets(engine: LogEngine, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of a group in the engine's org: {(topic, partition): offset}."""
    out = {}
    for t, p in engine.streams():
        offset = engine.committed(group, t, p)
        if offset is not None:
            out[(t, p)] = offset
    return out


def group_start(engine: LogEngine, group: str, topic: str, partition: int = 0) -> int:
    """Where a group's next record is: its committed offset, or the low watermark when
    that is further (trimmed records are gone for everyone); 0 for a new group. The one
    rule for every face (the Python Consumer, the mount's consumer files)."""
    committed = engine.committed(group, topic, partition)
    return max(committed or 0, engine.info(topic, partition).low_watermark)


def wait_for(
    engine: LogEngine, topic: str, partition: int, offset: int, timeout: float | None = None
) -> bool:
    """Blocks until the high watermark passes `offset` (True), the timeout passes or the
    engine closes (False). Woken by watch(), not by polling."""
    woken = threading.Event()

    def on_change(c: Change) -> None:
        if c.kind == "close" or (c.topic == topic and c.partition == partition):
            woken.set()

    stop = engine.watch(on_change)
    try:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if engine.closed:
                return False
            if engine.info(topic, partition).high_watermark > offset:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            woken.wait(left)
            woken.clear()
    finally:
        stop()


class _ReadBuffers(threading.local):
    buf: bytearray
    recs: bytearray

    def __init__(self) -> None:
        # Empty until a read in this thread needs them (read_raw grows them): nothing is
        # allocated at import.
        self.buf = bytearray()
        self.recs = bytearray()


_bufs = _ReadBuffers()


def read_raw(
    engine: LogEngine, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
) -> tuple[int, memoryview, list[int]]:
    """One read into this thread's buffers (grown as needed): (n, buf, the descriptors as
    five 64-bit words each: gid, offset, timestamp_ms, meta_len | value_len << 32, buf_pos)."""
    if not isinstance(offset, int) or offset < 0:
        raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
    max_records = max(1, min(max_records, 1 << 20))
    t = _bufs
    if len(t.recs) < max_records * REC_SIZE:
        t.recs = bytearray(max_records * REC_SIZE)
    want = max(min(max_bytes, 16 << 20), 64 << 10)
    if len(t.buf) < want:
        t.buf = bytearray(want)
    while True:
        try:
            n = engine.read(topic, partition, offset, t.buf, t.recs, max_records, max_bytes)
        except BufferTooSmallError as e:
            t.buf = bytearray(e.needed)
            continue
        words = memoryview(t.recs)[: n * REC_SIZE].cast("Q").tolist()
        return n, memoryview(t.buf), words


def read_records(
    engine: LogEngine,
    topic: str,
    partition: int,
    offset: int,
    max_records: int = 1000,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[Record]:
    """read() as Record objects (keys, headers and producer times decoded)."""
    n, mv, w = read_raw(engine, topic, partition, offset, max_records, max_bytes)
    out = []
    for k in range(0, 5 * n, 5):
        pos, lens = w[k + 4], w[k + 3]
        split = pos + (lens & 0xFFFFFFFF)
        meta = mv[pos:split].tobytes()
        key, headers, ts = decode_meta(meta)
        append_ts = w[k + 2] - (1 << 64) if w[k + 2] >= 1 << 63 else w[k + 2]
        out.append(
            Record(
                w[k + 1],
                append_ts if ts is None else ts,
                None if value_is_null(meta) else mv[split : split + (lens >> 32)].tobytes(),
                key,
                headers,
                w[k],
            )
        )
    return out


def read_values(
    engine: LogEngine,
    topic: str,
    partition: int,
    offset: int,
    max_records: int = 1000,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[bytes]:
    """read() as values only (the fast path of walfs.Wal.read)."""
    n, mv, w = read_raw(engine, topic, partition, offset, max_records, max_bytes)
    out = []
    for k in range(3, 5 * n, 5):
        start = w[k + 1] + (w[k] & 0xFFFFFFFF)
        out.append(mv[start : start + (w[k] >> 32)].tobytes())
    return out
