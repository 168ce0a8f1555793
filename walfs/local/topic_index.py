"""The topic index: which of the C core's streams show which (org, topic, partition).

Offsets are not kept here. The core's dense index slots are the one source of truth for a
record's offset, the watermarks and the byte view (walfs_stream_marks, walfs_read_offset);
an earlier release also kept per-stream roaring bitmaps of record gids and an
`index.snap` snapshot of them, a second offset index that had to be reconciled with the
core at every open. That file is derived data: a writer's open deletes it (logged).

What stays is the name -> stream map, with roaring bitmaps of stream numbers per org and
per (org, topic) of several partitions, so that partitions(), topics() and an org's
streams are set operations whose cost follows the answer, not the number of streams.

Memory follows the count of streams (100,000 topics: docs/operations.md "What a topic
costs"): a stream is one tuple (Stream) in a list by number and one entry of the name
map; a topic with partition 0 alone (a file of the mount, the usual topic) has no entry
of its own: only a topic with another partition keeps a bitmap of its streams.
"""

import logging
import os
import threading
from collections.abc import Iterable
from typing import NamedTuple

from pyroaring import BitMap

log = logging.getLogger("walfs")

LEGACY_SNAPSHOT = "index.snap"


class Stream(NamedTuple):
    stream_no: int
    org_id: int
    partition: int
    topic_hash: bytes
    name: str


class TopicIndex:
    """Thread-safe for one writer (add) and many readers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_no: list[Stream | None] = []  # stream numbers are dense: the core's table
        self._by_name: dict[tuple[int, str, int], Stream] = {}
        # (org, topic) -> its streams' numbers, for a topic with a partition other than 0
        # only (a topic of partition 0 alone is found in _by_name).
        self._topics: dict[tuple[int, str], BitMap] = {}
        self._orgs: dict[int, BitMap] = {}

    def add(self, s: Stream) -> None:
        with self._lock:
            no = s.stream_no
            if no >= len(self._by_no):
                self._by_no.extend([None] * (no + 1 - len(self._by_no)))
            self._by_no[no] = s
            org, name = s.org_id, s.name
            self._by_name[(org, name, s.partition)] = s
            bm = self._topics.get((org, name))
            if bm is not None:
                bm.add(no)
            elif s.partition != 0:
                bm = self._topics[(org, name)] = BitMap((no,))
                zero = self._by_name.get((org, name, 0))
                if zero is not None:
                    bm.add(zero.stream_no)
            orgs = self._orgs.get(org)
            if orgs is None:
                orgs = self._orgs[org] = BitMap()
            orgs.add(no)

    def add_all(self, streams: Iterable[Stream]) -> int:
        """add() of many (the open's listing of every stream), under one lock; returns
        how many."""
        n = 0
        with self._lock:
            by_no, by_name, topics = self._by_no, self._by_name, self._topics
            nos: dict[int, list[int]] = {}
            for s in streams:
                no, org, name, partition = s.stream_no, s.org_id, s.name, s.partition
                if no >= len(by_no):
                    by_no.extend([None] * (no + 1 - len(by_no)))
                by_no[no] = s
                by_name[(org, name, partition)] = s
                if partition != 0 or (org, name) in topics:
                    bm = topics.get((org, name))
                    if bm is None:
                        bm = topics[(org, name)] = BitMap()
                        zero = by_name.get((org, name, 0))
                        if zero is not None:
                            bm.add(zero.stream_no)
                    bm.add(no)
                org_nos = nos.get(org)
                if org_nos is None:
                    org_nos = nos[org] = []
                org_nos.append(no)
                n += 1
            for org, got in nos.items():
                orgs = self._orgs.get(org)
                if orgs is None:
                    orgs = self._orgs[org] = BitMap()
                orgs.update(got)
        return n

    def remove(self, s: Stream) -> None:
        with self._lock:
            if s.stream_no < len(self._by_no):
                self._by_no[s.stream_no] = None
            if self._by_name.get((s.org_id, s.name, s.partition)) is s:
                del self._by_name[(s.org_id, s.name, s.partition)]
            for bm in (self._topics.get((s.org_id, s.name)), self._orgs.get(s.org_id)):
                if bm is not None:
                    bm.discard(s.stream_no)

    def get(self, org_id: int, name: str, partition: int) -> Stream | None:
        return self._by_name.get((org_id, name, partition))

    def by_no(self, stream_no: int) -> Stream | None:
        return self._by_no[stream_no] if 0 <= stream_no < len(self._by_no) else None

    def org_streams(self, org_id: int) -> list[Stream]:
        with self._lock:
            nos = BitMap(self._orgs.get(org_id, ()))
            by_no = self._by_no
            return [s for s in map(by_no.__getitem__, nos) if s is not None]

    def org_streams_all(self) -> list[Stream]:
        with self._lock:
            return [s for s in self._by_no if s is not None]

    def topics(self, org_id: int) -> list[str]:
        return sorted({s.name for s in self.org_streams(org_id)})

    def partitions(self, org_id: int, name: str) -> list[int]:
        with self._lock:
            bm = self._topics.get((org_id, name))
            if bm is None:
                return [0] if (org_id, name, 0) in self._by_name else []
            by_no = self._by_no
            return sorted(s.partition for s in map(by_no.__getitem__, bm) if s is not None)


def drop_legacy_snapshot(dir_path: str) -> None:
    """Deletes an index.snap left by an older release (derived data, never read now)."""
    for name in (LEGACY_SNAPSHOT, LEGACY_SNAPSHOT + ".tmp"):
        path = os.path.join(dir_path, name)
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        log.info("removed %s: offsets now come from the core's index alone", path)
