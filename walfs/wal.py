"""Wal: the friendly Python face of walfs (docs/api.md), a thin layer over the engine
interface (walfs/engine/contract.py). Every call here is a few lines over one or two engine
calls: the shapes callers like (one record, a list of values, Record objects, consumers)
mapped onto the interface's few. It keeps no state of its own but append handles."""

import array
import copy
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from walfs.consumer import Consumer
from walfs.engine.contract import LogEngine
from walfs.engine.names import check_partition, stream_key, topic_hash
from walfs.engine.records import Header, Record
from walfs.engine.rules import (
    append_lines,
    appender,
    committed_offset,
    committed_offsets,
    durable_end,
    encode_records,
    read_records,
    read_values,
    resident,
    retention,
    wait_for,
)
from walfs.engine.settings import Policy
from walfs.engine.types import DEFAULT_MAX_BYTES, Appender, Change, StreamInfo
from walfs.errors import OffsetOutOfRangeError, RecordTooLargeError
from walfs.open import open_engine

__all__ = ["DEFAULT_MAX_BYTES", "StreamInfo", "Wal"]

MAX_U32 = 2**32 - 1


class Wal:
    """Opens the engine for `path` (a data directory: the local C core; options as
    walfs.local.engine.LocalEngine's) and offers the friendly calls. `wal.engine` is the
    engine interface itself, what the mount, the Kafka listener and Spark take."""

    def __init__(
        self, path: str | os.PathLike[str], fsync: str = "interval", org_id: int = 1, **options: Any
    ) -> None:
        self.engine: LogEngine = open_engine(os.fspath(path), fsync=fsync, org_id=org_id, **options)
        self.path = self.engine.path
        self.org_id = self.engine.org_id
        self.read_only = self.engine.read_only
        self.fsync = self.engine.fsync
        self.stats = self.engine.stats
        # Stream handles' append, by topic for partition 0 (a str's hash is cached, a
        # tuple's is not: at ~2 us a call, it shows), else by (topic, partition).
        self._appends: dict[str | tuple[str, int], Callable[[bytes], int]] = {}

    # -- lifetime -------------------------------------------------------------------
    def __enter__(self) -> "Wal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Makes everything durable and releases the lock."""
        self.engine.close()

    @property
    def closed(self) -> bool:
        return self.engine.closed

    @property
    def failed(self) -> bool:
        """True once an fsync failed: appends are refused until the WAL is reopened."""
        return self.engine.failed

    # -- streams --------------------------------------------------------------------
    def create_partition(self, topic: str, partition: int = 0) -> None:
        """Makes an empty stream exist (it shows as an empty file; Kafka's CreateTopics)."""
        self.engine.create(topic, partition)

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.engine.streams()})

    def streams(self) -> list[tuple[str, int]]:
        """Every (topic, partition) of this org, in one pass."""
        return self.engine.streams()

    def partitions(self, topic: str) -> list[int]:
        return [p for _, p in self.engine.streams(topic)]

    def stream_info(self, topic: str, partition: int = 0) -> StreamInfo:
        return self.engine.info(topic, partition)

    def stream_key(self, topic: str, partition: int = 0) -> str:
        return stream_key(self.org_id, topic_hash(self.org_id, topic), check_partition(partition))

    def delete_topic(self, topic: str, partition: int | None = None) -> list[int]:
        """Deletes a topic (every partition, or one): durable when this returns. Its records
        go, its committed offsets and settings go, and the name can be used again from
        offset 0, as Kafka does. Returns the partitions deleted."""
        self._appends.clear()
        return self.engine.delete(topic, partition)

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
            slot = topic if partition == 0 else (topic, partition)
            append = self._appends.get(slot)
            if append is None:
                append = self._appends[slot] = appender(self.engine, topic, partition).append
            return append(data)
        return self.append_records(topic, [(key, data, headers, timestamp_ms)], partition)

    def appender(self, topic: str, partition: int = 0) -> Appender:
        """A stream handle whose append(value) skips the per-call name work."""
        return appender(self.engine, topic, partition)

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
        return self.engine.append(topic, partition, data, array.array("I", bytes(4 * n)), lens)

    def append_lines(self, topic: str, data: bytes, partition: int = 0) -> tuple[int, int]:
        """Appends each line of data as one batch of plain records; (first offset, count)."""
        return append_lines(self.engine, topic, partition, data)

    def append_records(self, topic: str, records: Iterable[Any], partition: int = 0) -> int:
        """Appends (key, value, headers, timestamp_ms) tuples or Record-like objects as one
        batch; a None value is a null (a Kafka tombstone)."""
        return self.engine.append(topic, partition, *encode_records(records))

    def append_bodies(
        self, topic: str, data: Any, meta_lens: array.array, value_lens: array.array, partition: int = 0
    ) -> int:
        """Records already in the stored layout (engine_api.LogEngine.append)."""
        return self.engine.append(topic, partition, data, meta_lens, value_lens)

    def add_append_listener(self, fn: Callable[[str, int], None]) -> None:
        """Calls fn(topic, partition) after every append of this org's streams."""

        def on_change(c: Change) -> None:
            if c.kind == "append":
                fn(c.topic, c.partition)

        self.engine.watch(on_change)

    def sync(self) -> None:
        """Makes every append that returned before this call durable."""
        self.engine.sync()

    # -- marks ------------------------------------------------------------------------
    def high_watermark(self, topic: str, partition: int = 0) -> int:
        """The end of the stream: what appends have published (see durable_watermark for
        what survives power loss)."""
        return self.engine.info(topic, partition).high_watermark

    def low_watermark(self, topic: str, partition: int = 0) -> int:
        return self.engine.info(topic, partition).low_watermark

    def durable_watermark(self, topic: str, partition: int = 0) -> int:
        """Every record below this offset survives power loss."""
        return self.engine.info(topic, partition).durable_watermark

    def durable_end(self, topic: str, offset: int, partition: int = 0) -> int:
        """The durable watermark for a consumer at `offset` (engine_api.durable_end)."""
        return durable_end(self.engine, topic, partition, offset)

    def byte_size(self, topic: str, partition: int = 0) -> int:
        return self.engine.info(topic, partition).byte_size

    # -- reading --------------------------------------------------------------------
    def read(
        self,
        topic: str,
        offset: int,
        partition: int = 0,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[bytes]:
        return read_values(self.engine, topic, partition, offset, max_records, max_bytes)

    def read_records(
        self,
        topic: str,
        offset: int,
        partition: int = 0,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[Record]:
        return read_records(self.engine, topic, partition, offset, max_records, max_bytes)

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
        """Zero-copy reads (engine_api.LogEngine.read; descriptors as engine_api.REC_LAYOUT)."""
        return self.engine.read(topic, partition, offset, buf, recs, max_records, max_bytes)

    def read_bytes(self, topic: str, position: int, size: int, partition: int = 0) -> bytes:
        if size < 0 or position < 0:
            raise OffsetOutOfRangeError("position and size must not be negative")
        # A buffer no larger than what the view holds past `position` (bounded memory).
        buf = bytearray(max(0, min(size, self.engine.info(topic, partition).byte_size - position)))
        return bytes(memoryview(buf)[: self.engine.read_bytes(topic, partition, position, buf)])

    def read_bytes_into(self, topic: str, position: int, buf: Any, partition: int = 0) -> int:
        """read_bytes into the writable buffer buf (up to its length); the count."""
        return self.engine.read_bytes(topic, partition, position, buf)

    def bytes_resident(self, topic: str, position: int, size: int, partition: int = 0) -> bool:
        return resident(self.engine, topic, partition, position, size)

    def byte_position(self, topic: str, offset: int, partition: int = 0) -> int:
        """Where record `offset` starts in the byte view (byte_size for the high watermark)."""
        return self.engine.locate(topic, partition, offset=offset)

    def offset_at_byte(self, topic: str, position: int, partition: int = 0) -> int:
        """The offset of the record holding byte `position` of the view."""
        return self.engine.locate(topic, partition, byte=position)

    def offset_for_timestamp(self, topic: str, timestamp_ms: int, partition: int = 0) -> int:
        return self.engine.locate(topic, partition, timestamp_ms=timestamp_ms)

    def wait_for(self, topic: str, offset: int, partition: int = 0, timeout: float | None = None) -> bool:
        """Blocks until the high watermark passes `offset`; False on timeout or close."""
        return wait_for(self.engine, topic, partition, offset, timeout)

    # -- consumers ------------------------------------------------------------------
    def consumer(
        self, group: str, topic: str, partition: int = 0, mode: str = "at_least_once", persist_every: int = 0
    ) -> Consumer:
        return Consumer(self.engine, group, topic, partition, mode, persist_every)

    def committed_offset(self, group: str, topic: str, partition: int = 0) -> int | None:
        return committed_offset(self.engine, group, topic, partition)

    def committed(self, group: str, topic: str, partition: int = 0) -> tuple[int, str] | None:
        """(offset, metadata) of the group's cursor (metadata: the string the last commit
        carried, "" for none), or None when the group never committed on the stream."""
        return self.engine.committed(group, topic, partition)

    def commit_offset(
        self,
        group: str,
        topic: str,
        offset: int,
        partition: int = 0,
        *,
        advance_only: bool = False,
        metadata: str = "",
    ) -> bool:
        """The one cursor-commit rule (engine_api.LogEngine.commit); `metadata` is Kafka's
        commit metadata, kept with the offset (`committed`)."""
        return self.engine.commit(
            group, topic, partition, offset, advance_only=advance_only, metadata=metadata
        )

    def consumer_groups(self) -> list[str]:
        return self.engine.groups()

    def create_group(self, group: str) -> None:
        """Makes a consumer group exist (durably) before its first commit."""
        self.engine.create_group(group)

    def for_org(self, org_id: int) -> "Wal":
        """This WAL as another org (a Kafka tenant) sees it: the same engine, with topic
        and group names scoped to org_id (LogEngine.for_org). The view is never closed
        itself: its owner closes this Wal."""
        view = copy.copy(self)
        view.engine = self.engine.for_org(org_id)
        view.org_id = org_id
        view._appends = {}  # handles are per org: never the owner's
        return view

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of a group in this org: {(topic, partition): offset}."""
        return committed_offsets(self.engine, group)

    def delete_committed_offset(self, group: str, topic: str, partition: int = 0) -> bool:
        """Forgets a group's committed offset on one partition (Kafka's OffsetDelete), durably.
        Returns whether there was one."""
        return self.engine.forget(group, topic, partition)

    def delete_group(self, group: str) -> bool:
        """Deletes a consumer group and every offset it committed (Kafka's DeleteGroups; the
        mount's `.consumers/NAME` goes with it), durably. Returns whether it existed."""
        return self.engine.forget(group)

    # -- trim and retention ---------------------------------------------------------
    def trim(self, topic: str, before_offset: int, partition: int = 0) -> None:
        """Raises the low watermark to before_offset (durable when this returns)."""
        self.engine.trim(topic, partition, before_offset)

    def retention(self, topic: str) -> Policy:
        return retention(self.engine, topic)

    def set_retention(self, topic: str, **values: Any) -> None:
        """Per-topic overrides, persisted (survive restarts): retention_ms=, retention_bytes=
        (int, or None for no limit), retention_groups= (group names), and the Kafka topic
        configs walfs.engine.settings keeps (max_message_bytes=, message_timestamp_type=,
        cleanup_policy=); the string "default" removes an override."""
        self.engine.set_settings(topic, **values)

    def apply_retention(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        """Trims every stream to what its policy keeps (the engine's background duty)."""
        return self._local().apply_retention(now_ms)

    def reclaim(self) -> int:
        """Deletes segment files that hold only trimmed data; returns how many."""
        return self._local().reclaim()

    def disk_use(self, topic: str, partition: int = 0) -> int:
        """The bytes of segment files the stream is charged for: what retention_bytes bounds
        (whole files; docs/operations.md "How much disk a size limit uses")."""
        return int(self._local().disk_use(topic, partition))

    def _local(self) -> Any:
        """The local engine, for the calls that only it has (retention passes, reclaim)."""
        return self.engine

    # -- checks -----------------------------------------------------------------------
    def recovery_report(self) -> dict[str, int]:
        return self._local().report()

    def verify(self) -> list[tuple[str, int, int, str]]:
        """Reads every stored record; returns (topic, partition, offset, problem) per bad one."""
        return self._local().verify()
