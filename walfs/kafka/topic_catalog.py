"""Which topics exist and how many partitions each has.

A walfs topic exists once it has a stream: a record appended through the mount or
``wal.append``, or an empty stream made by ``wal.create_partition`` (CreateTopics and
auto-creation here). Kafka numbers partitions 0..n-1, so a topic whose only stream
is partition 2 (made through the mount) has 3 partitions; the missing ones read as
empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine

# Auto-created topics get the broker's num.partitions (walfs.kafka.broker_config).
MAX_PARTITIONS = 10_000


class TopicCatalog:
    def __init__(self, engine: LogEngine) -> None:
        self._engine = engine

    def partition_count(self, topic: str) -> int:
        """0 for a topic that does not exist."""
        stored = [p for _, p in self._engine.streams(topic)]
        return max(stored) + 1 if stored else 0

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self._engine.streams()})

    def declare(self, topic: str, partitions: int) -> None:
        """Make the topic exist with at least ``partitions`` partitions, durably: the
        client is told the topic exists, so it must still exist after a crash."""
        for p in range(partitions):
            self._engine.create(topic, p)
        self._engine.sync()
