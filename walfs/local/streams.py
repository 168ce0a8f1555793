"""The stream map of the local engine: which of the C core's streams are which (org, topic,
partition) (the topic index, walfs/local/topic_index.py), loaded from the core's catalog at
open; opening a new stream and deleting one, under one lock. A look-up of an existing
stream is LocalEngine._stream's own few lines (every append and read starts with it)."""

import threading
from collections.abc import Callable
from typing import Any

from walfs.engine.names import topic_bytes, topic_hash
from walfs.engine.types import Change
from walfs.local.core import Engine
from walfs.local.topic_index import Stream, TopicIndex


class StreamMap:
    """Shared by an engine's org views (each passes its org)."""

    def __init__(
        self, core: Engine, on_new: Callable[[Stream], Any], notify: Callable[[Change], None]
    ) -> None:
        self._core = core
        self._on_new = on_new  # called under the lock before a new stream is listed (its file cap)
        self._notify = notify
        self._lock = threading.Lock()
        self.index = TopicIndex()
        # [n], bumped by every delete (of any org view): Appender handles re-resolve their stream
        self.generation = [0]

    def load(self) -> int:
        """Lists the core's live streams (at open); returns how many."""
        return self.index.add_all(
            Stream(no, org_id, partition, thash, name)
            for no, org_id, partition, thash, name, deleted in self._core.stream_ids()
            if not deleted
        )

    def open(self, org_id: int, topic: str, partition: int) -> Stream:
        """The stream, made (durable, announced to watchers) if it does not exist."""
        raw = topic_bytes(topic)
        with self._lock:
            s = self.index.get(org_id, topic, partition)
            if s is None:
                thash = topic_hash(org_id, topic)
                no = self._core.stream_open(org_id, partition, thash, raw, True)
                assert no is not None
                s = Stream(no, org_id, partition, thash, topic)
                self._on_new(s)
                self.index.add(s)
                created = True
            else:
                created = False
        if created:
            self._notify(Change("create", topic, partition, org_id))
        return s

    def remove(self, s: Stream) -> None:
        """Deletes the stream in the core (durable) and from the map."""
        with self._lock:
            self._core.stream_delete(s.stream_no)
            self.index.remove(s)
            self.generation[0] += 1
