"""Wal: the friendly Python face of walfs (docs/api.md), a thin layer over the engine
contract (walfs/engine/contract.py). Every call here is a few lines over one or two engine
calls or walfs.engine.rules: the shapes callers like (one record, a list of values,
Record objects, consumers) mapped onto the contract's few. At most 25 public names
(tests/test_wal_api.py); everything else is on `wal.engine` (the contract, its optional
capabilities: walfs/engine/capabilities.py) or in walfs.engine.rules. It keeps no state of
its own but append handles."""

import array
import copy
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from walfs.consumer import Consumer
from walfs.engine.contract import LogEngine
from walfs.engine.records import Header, Record
from walfs.engine.rules import (
    append_lines,
    appender,
    encode_records,
    read_records,
    read_values,
    retention,
    wait_for,
)
from walfs.engine.settings import Policy
from walfs.engine.types import DEFAULT_MAX_BYTES, MAX_RECORD_BYTES, Appender, StreamInfo
from walfs.errors import OffsetOutOfRangeError, RecordTooLargeError
from walfs.open import open_engine

__all__ = ["DEFAULT_MAX_BYTES", "StreamInfo", "Wal"]

_ONE_RECORD = (bytes, bytearray, memoryview)


class Wal:
    """Opens the engine for `path` (a data directory: the local C core; a kafka:// URL: a
    Kafka cluster; options as walfs.local.engine.LocalEngine's) and offers the friendly
    calls. `wal.engine` is the engine contract itself: what the mount, the Kafka listener
    and Spark take, the zero-copy reads, the optional capabilities and maintenance
    (`wal.engine.reclaim()`), and the engine's attributes (path, org_id, read_only, fsync,
    stats, failed)."""

    def __init__(
        self, path: str | os.PathLike[str], fsync: str = "interval", org_id: int = 1, **options: Any
    ) -> None:
        self.engine: LogEngine = open_engine(os.fspath(path), fsync=fsync, org_id=org_id, **options)
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

    def for_org(self, org_id: int) -> "Wal":
        """This WAL as another org (a Kafka tenant) sees it: the same engine, with topic
        and group names scoped to org_id (LogEngine.for_org). The view is never closed
        itself: its owner closes this Wal."""
        view = copy.copy(self)
        view.engine = self.engine.for_org(org_id)
        view._appends = {}  # handles are per org: never the owner's
        return view

    # -- streams --------------------------------------------------------------------
    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.engine.streams()})

    def streams(self, topic: str | None = None) -> list[tuple[str, int]]:
        """Every (topic, partition) of this org, sorted; only `topic`'s with a topic."""
        return self.engine.streams(topic)

    def info(self, topic: str, partition: int = 0) -> StreamInfo:
        """The stream's marks in one call: low/high/durable watermark, low_byte, byte_size."""
        return self.engine.info(topic, partition)

    def create(self, topic: str, partition: int = 0) -> None:
        """Makes an empty stream exist (it shows as an empty file; Kafka's CreateTopics)."""
        self.engine.create(topic, partition)

    def delete(self, topic: str, partition: int | None = None) -> list[int]:
        """Deletes a topic (every partition, or one): durable when this returns. Its records
        go, its committed offsets and settings go, and the name can be used again from
        offset 0, as Kafka does. Returns the partitions deleted."""
        self._appends.clear()
        return self.engine.delete(topic, partition)

    # -- appending ------------------------------------------------------------------
    def append(
        self,
        topic: str,
        data: Any,
        partition: int = 0,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """Appends one record (`data` bytes-like) or one batch (any other iterable: values,
        or (key, value, headers, timestamp_ms) tuples / Record-like objects; a None value
        is a null, a Kafka tombstone). A batch survives a crash whole or not at all.
        Returns the (first) record's offset."""
        if type(data) is bytes or isinstance(data, _ONE_RECORD):
            if key is None and not headers and timestamp_ms is None:
                slot = topic if partition == 0 else (topic, partition)
                append = self._appends.get(slot)
                if append is None:
                    append = self._appends[slot] = appender(self.engine, topic, partition).append
                return append(data)  # type: ignore[arg-type]  # any bytes-like value
            return self.engine.append(topic, partition, *encode_records([(key, data, headers, timestamp_ms)]))
        if key is not None or headers or timestamp_ms is not None:
            raise TypeError("key, headers and timestamp_ms are for one record; a batch has them per record")
        if isinstance(data, str):
            raise TypeError("append takes bytes (one record) or an iterable of records, not str")
        return self._append_batch(topic, partition, data)

    def _append_batch(self, topic: str, partition: int, records: Iterable[Any]) -> int:
        items = records if isinstance(records, list | tuple) else list(records)
        n = len(items)
        if n == 0:
            raise ValueError("append needs at least one record")
        try:  # plain values, the common case: their lengths and bytes, in C
            if n == 1:
                data = items[0]
                if not isinstance(data, _ONE_RECORD):
                    raise TypeError
                lens = array.array("I", [len(data)])
            else:
                lens = array.array("I", map(len, items))
                data = b"".join(items)
        except TypeError:  # tuples or Record-like objects among them
            bodies = encode_records((None, r, None, None) if isinstance(r, _ONE_RECORD) else r for r in items)
            return self.engine.append(topic, partition, *bodies)
        if max(lens) > MAX_RECORD_BYTES:
            raise RecordTooLargeError("a record is larger than 4 GiB")
        return self.engine.append(topic, partition, data, array.array("I", bytes(4 * n)), lens)

    def append_lines(self, topic: str, data: bytes, partition: int = 0) -> tuple[int, int]:
        """Appends each line of data as one batch of plain records; (first offset, count)."""
        return append_lines(self.engine, topic, partition, data)

    def appender(self, topic: str, partition: int = 0) -> Appender:
        """A stream handle whose append(value) skips the per-call name work."""
        return appender(self.engine, topic, partition)

    def sync(self) -> None:
        """Makes every append that returned before this call durable."""
        self.engine.sync()

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

    def read_bytes(self, topic: str, position: int, size: int, partition: int = 0) -> bytes:
        """Up to `size` bytes of the stream's byte view from `position` (fewer at the end)."""
        if size < 0 or position < 0:
            raise OffsetOutOfRangeError("position and size must not be negative")
        # A buffer no larger than what the view holds past `position` (bounded memory).
        buf = bytearray(max(0, min(size, self.engine.info(topic, partition).byte_size - position)))
        return bytes(memoryview(buf)[: self.engine.read_bytes(topic, partition, position, buf)])

    def locate(
        self,
        topic: str,
        partition: int = 0,
        *,
        offset: int | None = None,
        byte: int | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """offset= -> its byte position in the view; byte= -> the offset of the record
        holding it; timestamp_ms= -> the first offset appended at or after it."""
        return self.engine.locate(topic, partition, offset=offset, byte=byte, timestamp_ms=timestamp_ms)

    def wait_for(self, topic: str, offset: int, partition: int = 0, timeout: float | None = None) -> bool:
        """Blocks until the high watermark passes `offset`; False on timeout or close."""
        return wait_for(self.engine, topic, partition, offset, timeout)

    # -- consumers ------------------------------------------------------------------
    def consumer(
        self, group: str, topic: str, partition: int = 0, mode: str = "at_least_once", persist_every: int = 0
    ) -> Consumer:
        return Consumer(self.engine, group, topic, partition, mode, persist_every)

    def commit(
        self,
        group: str,
        topic: str,
        offset: int,
        partition: int = 0,
        *,
        advance_only: bool = False,
        metadata: str = "",
    ) -> bool:
        """The one cursor-commit rule (LogEngine.commit); `metadata` is Kafka's commit
        metadata, kept with the offset (wal.engine.committed gives it back)."""
        return self.engine.commit(
            group, topic, partition, offset, advance_only=advance_only, metadata=metadata
        )

    def committed(self, group: str, topic: str, partition: int = 0) -> int | None:
        """The group's committed offset on the stream; None if it never committed there."""
        got = self.engine.committed(group, topic, partition)
        return None if got is None else got[0]

    def groups(self) -> list[str]:
        """This org's consumer groups."""
        return self.engine.groups()

    def forget(self, group: str, topic: str | None = None, partition: int = 0) -> bool:
        """Forgets, durably, a group's committed offset on one stream (Kafka's OffsetDelete),
        or with no topic the whole group (Kafka's DeleteGroups). Whether there was one."""
        return self.engine.forget(group, topic, partition)

    # -- trim and retention ---------------------------------------------------------
    def trim(self, topic: str, before_offset: int, partition: int = 0) -> None:
        """Raises the low watermark to before_offset (durable when this returns)."""
        self.engine.trim(topic, partition, before_offset)

    def retention(self, topic: str, **changes: Any) -> Policy:
        """Sets the given per-topic overrides durably (retention_ms=, retention_bytes= (int,
        or None for no limit), retention_groups= (group names), and the Kafka topic configs
        walfs.engine.settings keeps; the string "default" removes one), then returns the
        retention policy in force."""
        if changes:
            self.engine.set_settings(topic, **changes)
        return retention(self.engine, topic)
