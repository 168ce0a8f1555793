"""The engine contract's types and limits: what a call takes and gives (walfs.engine.contract)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

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
# The gid of a record that has none (the descriptor's first word; every bit set).
NO_GID = 2**64 - 1


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
