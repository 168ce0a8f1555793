"""What an engine knows of its namespace, as replayed: each stream's marks and chunk lists
(`StreamState`), the streams by key and by name, each region's replay position, and the
engine's life (closed, failed, the meta topic's replay position). One `ClusterState` is
shared by every collaborator of an engine and by its for_org views, under one lock whose
condition the replay signals after every batch it applied.

The replay (replay.py) is the only writer of these maps; the other modules read them, and
wait on the condition for a record they produced to be applied.
"""

from __future__ import annotations

import bisect
import threading
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from walfs.cluster.layout import stream_key_bytes
from walfs.engine.names import check_partition
from walfs.errors import WalError, WalIOError


@dataclass
class StreamState:
    """One stream as replayed: its marks, and one entry per data record (chunk) of the log
    that holds records at or after the low watermark."""

    org: int
    topic: str
    partition: int
    region: int
    low: int = 0
    next: int = 0
    low_byte: int = 0
    next_byte: int = 0
    first: array = field(default_factory=lambda: array("q"))  # stream offset of the chunk's 1st record
    koff: array = field(default_factory=lambda: array("q"))  # the chunk's Kafka offset
    byte: array = field(default_factory=lambda: array("q"))  # view position of its 1st record
    ts: array = field(default_factory=lambda: array("q"))  # its append time (LogAppendTime)

    def chunk_index(self, offset: int) -> int:
        return bisect.bisect_right(self.first, offset) - 1

    def to_json(self) -> dict[str, Any]:
        return {
            "org": self.org,
            "topic": self.topic,
            "partition": self.partition,
            "marks": [self.low, self.next, self.low_byte, self.next_byte],
            "chunks": [list(self.first), list(self.koff), list(self.byte), list(self.ts)],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], region: int) -> StreamState:
        s = cls(int(d["org"]), str(d["topic"]), int(d["partition"]), region)
        s.low, s.next, s.low_byte, s.next_byte = (int(x) for x in d["marks"])
        f, k, b, t = d["chunks"]
        s.first, s.koff, s.byte, s.ts = array("q", f), array("q", k), array("q", b), array("q", t)
        if not (len(s.first) == len(s.koff) == len(s.byte) == len(s.ts)) or not (
            0 <= s.low <= s.next and 0 <= s.low_byte <= s.next_byte
        ):
            raise ValueError("inconsistent marks or chunk lists")
        return s


class ClusterState:
    """The replayed streams and positions of one engine (and its views), with the lock
    that guards them and the condition the replay signals."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.lock = threading.Lock()
        self.applied = threading.Condition(self.lock)
        self.stop = threading.Event()  # set by close: every background thread ends
        self.closed = False
        self.failed: BaseException | None = None  # why the replay stopped
        self.meta_pos = 0  # the next meta topic offset the replay applies
        self.pos: dict[int, int] = {}  # region -> next Kafka offset to apply
        self.streams: dict[bytes, StreamState] = {}
        self.by_name: dict[tuple[int, str], dict[int, bytes]] = {}
        # (region, Kafka offset) -> the stream offset the replay gave a data record's first
        # record, for the append that waits on it (the newest 65,536; older: in the stream)
        self.assigned: OrderedDict[tuple[int, int], int] = OrderedDict()
        self.open_replayed = 0  # log records the open replayed after the snapshots

    def stream(self, org: int, topic: str, partition: int) -> StreamState | None:
        return self.streams.get(stream_key_bytes(org, topic, check_partition(partition)))

    def add_stream(self, key: bytes, s: StreamState) -> None:
        self.streams[key] = s
        self.by_name.setdefault((s.org, s.topic), {})[s.partition] = key

    def drop_stream(self, key: bytes, s: StreamState) -> None:
        del self.streams[key]
        parts = self.by_name.get((s.org, s.topic), {})
        parts.pop(s.partition, None)
        if not parts:
            self.by_name.pop((s.org, s.topic), None)

    def wait_applied(self, region: int, koff: int) -> None:
        """Until the replay has applied the log record at `koff` of `region`."""
        deadline = time.monotonic() + self.timeout
        with self.applied:
            while self.pos.get(region, 0) <= koff:
                if self.failed is not None:
                    raise WalError(f"{self.path}: the replay stopped: {self.failed}")
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise WalIOError(5, f"record {region}@{koff} was acknowledged but not replayed in time")
                self.applied.wait(left)

    def wait_meta(self, moff: int) -> None:
        """Until the replay has applied the meta record at `moff`."""
        deadline = time.monotonic() + self.timeout
        with self.applied:
            while self.meta_pos <= moff:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise WalIOError(5, f"meta record {moff} was acknowledged but not replayed in time")
                self.applied.wait(left)
