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
costs"): a stream is one tuple (Stream) in a list by number and one entry of its org's
name map, keyed by the name itself for partition 0 (no key tuple: 80 bytes a stream) and by
(name, partition) for the others; a topic with partition 0 alone (a file of the mount, the
usual topic) has no entry of its own: only a topic with another partition keeps a bitmap of
its streams.
"""

import gc
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
        # org -> (name for partition 0, else (name, partition)) -> its stream: _key()
        self._by_name: dict[int, dict[str | tuple[str, int], Stream]] = {}
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
            names = self._by_name.get(org)
            if names is None:
                names = self._by_name[org] = {}
            names[_key(name, s.partition)] = s
            bm = self._topics.get((org, name))
            if bm is not None:
                bm.add(no)
            elif s.partition != 0:
                bm = self._topics[(org, name)] = BitMap((no,))
                zero = names.get(name)
                if zero is not None:
                    bm.add(zero.stream_no)
            orgs = self._orgs.get(org)
            if orgs is None:
                orgs = self._orgs[org] = BitMap()
            orgs.add(no)

    def add_all(self, streams: Iterable[Stream]) -> int:
        """add() of many (the open's listing of every stream, in number order), under one
        lock; returns how many. The cyclic collector is off meanwhile: 100,000 new tuples
        would run it (each run walking every object) a few dozen times, a third of the
        listing's time; none of these objects is in a cycle."""
        n = 0
        was_on = gc.isenabled()
        gc.disable()
        try:
            with self._lock:
                n = self._add_all(streams)
        finally:
            if was_on:
                gc.enable()
        return n

    def _add_all(self, streams: Iterable[Stream]) -> int:
        n = 0
        by_no, by_name, topics = self._by_no, self._by_name, self._topics
        nos: dict[int, list[int]] = {}
        names: dict[str | tuple[str, int], Stream] = {}
        names_org = None
        for s in streams:
            no, org, name, partition = s.stream_no, s.org_id, s.name, s.partition
            if no >= len(by_no):
                if no > len(by_no):
                    by_no.extend([None] * (no - len(by_no)))
                by_no.append(s)
            else:
                by_no[no] = s
            if org != names_org:
                of_org = by_name.get(org)
                if of_org is None:
                    of_org = by_name[org] = {}
                names, names_org = of_org, org
            if partition == 0:
                names[name] = s
            else:
                names[(name, partition)] = s
            if partition != 0 or (org, name) in topics:
                bm = topics.get((org, name))
                if bm is None:
                    bm = topics[(org, name)] = BitMap()
                    zero = names.get(name)
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
            names = self._by_name.get(s.org_id)
            key = _key(s.name, s.partition)
            if names is not None and names.get(key) is s:
                del names[key]
            for bm in (self._topics.get((s.org_id, s.name)), self._orgs.get(s.org_id)):
                if bm is not None:
                    bm.discard(s.stream_no)

    def get(self, org_id: int, name: str, partition: int) -> Stream | None:
        names = self._by_name.get(org_id)
        if names is None:
            return None
        return names.get(name if partition == 0 else (name, partition))

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
                return [0] if name in self._by_name.get(org_id, {}) else []
            by_no = self._by_no
            return sorted(s.partition for s in map(by_no.__getitem__, bm) if s is not None)


def _key(name: str, partition: int) -> str | tuple[str, int]:
    """A stream's key in its org's name map: its name for partition 0, else (name, partition)."""
    return name if partition == 0 else (name, partition)


def drop_legacy_snapshot(dir_path: str) -> None:
    """Deletes an index.snap left by an older release (derived data, never read now)."""
    for name in (LEGACY_SNAPSHOT, LEGACY_SNAPSHOT + ".tmp"):
        path = os.path.join(dir_path, name)
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        log.info("removed %s: offsets now come from the core's index alone", path)
