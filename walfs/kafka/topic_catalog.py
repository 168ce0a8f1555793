"""Which topics exist and how many partitions each has.

A walfs topic exists once one of its streams has a record (the mount and plain
``wal.append`` create them that way). Kafka also has empty topics with a declared
partition count (CreateTopics, auto-creation). walfs.Wal has no call to create an
empty stream, so the declared partitions are recorded in the engine's cursor store
under a reserved group: ``commit_offset(DECLARED_GROUP, topic, 0, partition=p)`` for
each declared p. That is durable, costs no records, and leaves every stream and the
file view untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from walfs import Wal

DECLARED_GROUP = "__walfs_kafka_partitions"
# Auto-created topics (produce or metadata for an unknown topic) get one partition,
# as with Kafka's num.partitions default.
DEFAULT_PARTITIONS = 1
MAX_PARTITIONS = 10_000


class TopicCatalog:
    def __init__(self, wal: Wal) -> None:
        self._wal = wal
        self._declared: dict[str, int] = {}

    def _declared_count(self, topic: str) -> int:
        n = self._declared.get(topic)
        if n is None:
            # After a restart: probe the cursor store for partitions declared then.
            n = 0
            while n < MAX_PARTITIONS and (self._wal.committed_offset(DECLARED_GROUP, topic, n) is not None):
                n += 1
            self._declared[topic] = n
        return n

    def partition_count(self, topic: str) -> int:
        """0 for a topic that does not exist."""
        stored = self._wal.partitions(topic)
        return max((max(stored) + 1) if stored else 0, self._declared_count(topic))

    def topics(self) -> list[str]:
        names = set(self._wal.topics())
        names.update(t for t, n in self._declared.items() if n > 0)
        return sorted(names)

    def declare(self, topic: str, partitions: int) -> None:
        """Make the topic exist with at least ``partitions`` partitions (durable)."""
        have = self._declared_count(topic)
        for p in range(have, partitions):
            self._wal.commit_offset(DECLARED_GROUP, topic, 0, p)
        self._declared[topic] = max(have, partitions)

    def forget(self, topic: str) -> None:
        self._declared[topic] = 0
