"""The topic index: which of the C core's streams show which (org, topic, partition).

Offsets are not kept here. The core's dense index slots are the one source of truth for a
record's offset, the watermarks and the byte view (walfs_stream_marks, walfs_read_offset);
an earlier release also kept per-stream roaring bitmaps of record gids and an
`index.snap` snapshot of them, a second offset index that had to be reconciled with the
core at every open. That file is derived data: a writer's open deletes it (logged).

What stays is the name -> stream map, with roaring bitmaps of stream numbers per
(org, topic) and per org, so that partitions(), topics() and an org's streams are set
operations whose cost follows the answer, not the number of streams in the WAL.
"""

import logging
import os
import threading
from dataclasses import dataclass

from pyroaring import BitMap

log = logging.getLogger("walfs")

LEGACY_SNAPSHOT = "index.snap"


@dataclass(frozen=True)
class Stream:
    stream_no: int
    org_id: int
    partition: int
    topic_hash: bytes
    name: str


class TopicIndex:
    """Thread-safe for one writer (add) and many readers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_no: dict[int, Stream] = {}
        self._by_name: dict[tuple[int, str, int], Stream] = {}
        self._topics: dict[tuple[int, str], BitMap] = {}
        self._orgs: dict[int, BitMap] = {}

    def add(self, s: Stream) -> None:
        with self._lock:
            self._by_no[s.stream_no] = s
            self._by_name[(s.org_id, s.name, s.partition)] = s
            self._topics.setdefault((s.org_id, s.name), BitMap()).add(s.stream_no)
            self._orgs.setdefault(s.org_id, BitMap()).add(s.stream_no)

    def remove(self, s: Stream) -> None:
        with self._lock:
            self._by_no.pop(s.stream_no, None)
            if self._by_name.get((s.org_id, s.name, s.partition)) is s:
                del self._by_name[(s.org_id, s.name, s.partition)]
            for bm in (self._topics.get((s.org_id, s.name)), self._orgs.get(s.org_id)):
                if bm is not None:
                    bm.discard(s.stream_no)

    def get(self, org_id: int, name: str, partition: int) -> Stream | None:
        return self._by_name.get((org_id, name, partition))

    def by_no(self, stream_no: int) -> Stream | None:
        return self._by_no.get(stream_no)

    def org_streams(self, org_id: int) -> list[Stream]:
        with self._lock:
            nos = BitMap(self._orgs.get(org_id, ()))
        return [self._by_no[n] for n in nos]

    def org_streams_all(self) -> list[Stream]:
        with self._lock:
            return list(self._by_no.values())

    def topics(self, org_id: int) -> list[str]:
        return sorted({s.name for s in self.org_streams(org_id)})

    def partitions(self, org_id: int, name: str) -> list[int]:
        with self._lock:
            nos = BitMap(self._topics.get((org_id, name), ()))
        return sorted(self._by_no[n].partition for n in nos)


def drop_legacy_snapshot(dir_path: str) -> None:
    """Deletes an index.snap left by an older release (derived data, never read now)."""
    for name in (LEGACY_SNAPSHOT, LEGACY_SNAPSHOT + ".tmp"):
        path = os.path.join(dir_path, name)
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        log.info("removed %s: offsets now come from the core's index alone", path)
