"""Optional engine capabilities: what only some engines can do, as small protocols.

A face or a rule tests for one with isinstance (each protocol is runtime-checkable), once,
and falls back on the core calls of walfs.engine.contract when the engine lacks it
(walfs/engine/rules.py holds those fallbacks). Like SQLite's optional VFS methods behind
iVersion: an engine adds a capability by implementing its calls for real, never by faking
them. Which engine has which is in docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from walfs.engine.types import Appender, VerifyProgress


@runtime_checkable
class NoWaitAppend(Protocol):
    """An append that never waits (local engine)."""

    def append_nowait(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any
    ) -> int | None:
        """As LogEngine.append(wait=False), but only if the engine can append without
        waiting (on the disk, the network, retention or another appender): the first
        offset, or None with nothing appended, after which the caller appends the usual way
        (in a thread). It never creates the stream. For a caller on an event loop: the
        Kafka listener appends a produce in place when this takes it. The local engine
        refuses a batch that needs a new segment or a new gid epoch (both fsync), a stream
        at its file cap, or a lock held by another thread."""
        ...


@runtime_checkable
class PieceAppend(Protocol):
    """An append whose bodies lie in several buffers, written without joining them."""

    def append_pieces(
        self, topic: str, partition: int, pieces: Sequence[Any], meta_lens: Any, value_lens: Any
    ) -> int:
        """As LogEngine.append, but the bodies lie back to back in the concatenation of the
        buffers `pieces` (a body may span pieces): the engine writes each body from its
        piece and copies only a body that spans pieces. For the Spark sink's chunks (a
        marker's meta section, then the values of Arrow buffers). ValueError when the
        pieces' bytes are not the bodies' bytes."""
        ...


@runtime_checkable
class LineAppend(Protocol):
    """The file face's write done by the engine itself (the local core splits lines in C)."""

    def append_lines(self, topic: str, partition: int, data: Any) -> tuple[int, int]:
        """As walfs.engine.rules.append_lines."""
        ...


@runtime_checkable
class Appenders(Protocol):
    """Stream handles for the cheapest single-record append."""

    def appender(self, topic: str, partition: int = 0) -> Appender:
        """A handle (creates the stream) whose append(value) has LogEngine.append's
        contract for one plain record; the name work is done once, here. If the stream is
        deleted, the handle's next append creates the new stream of that name."""
        ...


@runtime_checkable
class KafkaBatchRead(Protocol):
    """Records read straight into a Kafka record batch (local engine: in C, from the log)."""

    def read_kafka_batch(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> bytes | bytearray | memoryview:
        """Published records from `offset` on as one uncompressed Kafka record batch (magic
        v2, walfs.wire's layout: key, headers and producer timestamp from each record's
        meta, the append time otherwise), in a buffer of its own; b"" at the high
        watermark. At least one record when any exists (even one larger than max_bytes),
        then up to max_records and about max_bytes. Every record's checksum is verified
        before its bytes are used; a damaged record after the first ends the batch before
        it (the next call reports it). Errors: OffsetOutOfRangeError, CorruptRecordError
        (the first record), ValueError (the first record's meta section does not parse)."""
        ...


@runtime_checkable
class ResidentBytes(Protocol):
    """Whether a read of the byte view would wait (local engine: page-cache residency)."""

    def resident(self, topic: str, partition: int, position: int, size: int) -> bool:
        """A hint: True when reading these view bytes will not wait for a disk or the
        network (the mount then reads on its event loop)."""
        ...


@runtime_checkable
class Maintenance(Protocol):
    """Retention and space reclamation on demand (both engines run them in the background)."""

    def apply_retention(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        """One retention pass now: trims every stream past its policy; {(org, topic,
        partition): new low watermark} for the streams it trimmed."""
        ...

    def reclaim(self) -> int:
        """Gives back the space of what trims and deletes left behind; how many units
        (segments, or the cluster's regions) it freed."""
        ...


@runtime_checkable
class DiskUse(Protocol):
    """Bytes on the engine's own disk (local engine)."""

    def disk_use(self, topic: str, partition: int = 0) -> int:
        """The bytes the stream's files hold on disk."""
        ...

    def disk_stats(self) -> dict[str, Any]:
        """The disk's figures for walfs.common.metrics (fsync latencies, bytes written)."""
        ...


@runtime_checkable
class Checks(Protocol):
    """What `walfs fsck` and the metrics ask of an engine about its own health."""

    def report(self) -> dict[str, int]:
        """The engine's own figures (the local engine: its recovery report)."""
        ...

    def verify(self, progress: VerifyProgress | None = None) -> list[tuple[str, int, int, str]]:
        """Reads every stored record; (topic, partition, offset, problem) per bad one.
        `progress(streams_done, streams, records, bytes)` is called now and then on the way
        (an engine that cannot tell may never call it)."""
        ...


@runtime_checkable
class Copies(Protocol):
    """Metadata kept in two copies (issue 36, the local engine): what `walfs fsck` and the
    metrics ask about them."""

    def healed_copies(self) -> list[str]:
        """Each damaged, missing or older copy found since the open, naming the file:
        rewritten from the good copy by a writer, served around by a read-only open."""
        ...

    def check_cursors(self) -> list[str]:
        """Reads every cursor: one bad copy joins healed_copies(); returns the damage that
        has no good copy."""
        ...


@runtime_checkable
class CommitMany(Protocol):
    """Many commits of one group at once (a Kafka OffsetCommit of every partition a
    consumer holds), each under LogEngine.commit's rule, durable when this returns, at the
    cost of about one commit: the local engine writes the cursor files side by side and
    lists the new ones in one change of its manifest."""

    def commit_many(
        self, group: str, entries: Sequence[tuple[str, int, int, str]], *, advance_only: bool = False
    ) -> list[bool | Exception]:
        """entries: (topic, partition, offset, metadata). Per entry, whether it changed,
        or the exception LogEngine.commit would have raised for it (the others are kept)."""
        ...


_known: dict[tuple[type, type], bool] = {}
C = TypeVar("C")


def has(engine: object, capability: type[C]) -> TypeGuard[C]:
    """isinstance(engine, capability), remembered per engine class: a protocol check looks
    up every member each time, and rules on hot paths (a mount WRITE) ask it per call."""
    key = (type(engine), capability)
    got = _known.get(key)
    if got is None:
        got = _known[key] = isinstance(engine, capability)
    return got
