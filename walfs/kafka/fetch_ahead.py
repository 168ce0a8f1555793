"""A connection's next fetch, read while its consumer handles the last answer.

The Java consumer keeps one fetch in flight per broker: it asks again only after it has
taken in the last answer. Each cycle was the server's answer time plus the client's own
work, and walfs sat idle during the latter (docs/notes/2026-11-24-kafka-fetch-path.md, "Fetch read-ahead"). So
once a fetch answer is out whole, and no request waits on the connection, each partition
whose answer ended on its byte limit has its next batch read at once, from where the
answer ended and with the same limit, and kept for that connection's next fetch.

What keeps an answer from the read-ahead identical to a fresh read:
- Only a batch that stopped on its byte limit below the durable watermark is kept. Records
  below that mark never change, and a read from the same offset with the same limit
  stops at the same record.
- The next fetch uses it only for the same partition, offset and limit; whatever that
  fetch does not use is dropped (``take_all``).
- A topic deleted or created since it was read drops everything kept (the broker's
  count of such changes, from LogEngine.watch).
- The offset is still checked against the log's marks at the fetch, as for a fresh
  read, so a trim past it answers offset_out_of_range.

It runs on the event loop, as the fetch's inline read does, and only when that read
would: few partitions, records in the page cache (LogEngine.resident), none past the
durable watermark. A failed read keeps nothing: the next fetch reads and reports it.
What one connection keeps is bounded (``MAX_BYTES``), and all connections of a broker
together too (``Broker.ahead_budget``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from walfs.engine.rules import resident
from walfs.wire.batch_codec import read_kafka_batch
from walfs.wire.record_batch import batch_end

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine
    from walfs.engine.types import Change


class Broker(Protocol):
    """What the read-ahead uses of its broker (walfs.kafka.broker.Broker, which holds a
    connection's NextBatches: a protocol here, so that this module needs not import it)."""

    engine: LogEngine
    ahead_budget: int
    topic_changes: int

    def watch_topic_changes(self) -> int: ...

# What one connection may keep between two fetches (its partitions' next batches).
MAX_BYTES = 4 << 20
# Upper bound on records per partition read (a fetch's, walfs/kafka/fetch.py, and this
# one's); max_bytes is the real limit.
MAX_RECORDS_PER_READ = 100_000

Data = bytes | bytearray | memoryview


def in_page_cache(engine: LogEngine, topic: str, partition: int, offset: int, size: int) -> bool:
    """Whether reading ``size`` bytes of records from ``offset`` on waits for no disk (a
    mincore: LogEngine.resident), so that the read may run on the event loop (the fetch's
    inline read and the read-ahead)."""
    return resident(engine, topic, partition, engine.locate(topic, partition, offset=offset), size)


@dataclass(frozen=True, slots=True)
class Next:
    """One partition's next read, as the next fetch would ask for it."""

    topic: str
    partition: int
    offset: int
    limit: int


@dataclass(frozen=True, slots=True)
class _Kept:
    offset: int
    limit: int
    changes: int  # the broker's topic change count when it was read
    data: Data


class NextBatches:
    """The next batches of one connection's partitions, read ahead (see the module's docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._kept: dict[tuple[str, int], _Kept] = {}
        self._bytes = 0

    def has(self, topic: str, partition: int, offset: int) -> bool:
        """Whether a batch is kept for this partition at this offset (any limit)."""
        kept = self._kept.get((topic, partition))
        return kept is not None and kept.offset == offset

    def take(self, topic: str, partition: int, offset: int, limit: int) -> Data | None:
        """The batch kept for exactly this read, or None."""
        kept = self._kept.get((topic, partition))
        if kept is None or kept.offset != offset or kept.limit != limit:
            return None
        if kept.changes != self.broker.topic_changes:
            return None
        return kept.data

    def take_all(self) -> None:
        """Drops what is kept (the fetch that could use it has taken what it used)."""
        self._kept.clear()
        self.broker.ahead_budget += self._bytes
        self._bytes = 0

    def read(self, plan: list[Next]) -> None:
        """Reads and keeps each planned partition's next batch (event loop; the plan names
        no more partitions than the fetch's inline read may read, fetch._plan_ahead; see
        the module: only records in the page cache, only a batch that stopped on its byte
        limit below the durable watermark)."""
        self.take_all()
        broker = self.broker
        engine = broker.engine
        changes = broker.watch_topic_changes()
        for nxt in plan:
            room = min(MAX_BYTES - self._bytes, broker.ahead_budget)
            if nxt.limit > room:
                break
            try:
                info = engine.info(nxt.topic, nxt.partition)
                durable = info.durable_watermark
                if not info.low_watermark <= nxt.offset < durable:
                    continue
                if not in_page_cache(engine, nxt.topic, nxt.partition, nxt.offset, nxt.limit):
                    continue
                n = min(MAX_RECORDS_PER_READ, durable - nxt.offset)
                data = read_kafka_batch(engine, nxt.topic, nxt.partition, nxt.offset, n, nxt.limit)
                if len(data) == 0 or batch_end(data) >= nxt.offset + n:
                    continue  # it reached the end: the next fetch may find more
            except Exception:
                continue  # the fetch that follows reads it again and reports what fails
            self._kept[(nxt.topic, nxt.partition)] = _Kept(nxt.offset, nxt.limit, changes, data)
            self._bytes += len(data)
            broker.ahead_budget -= len(data)


def on_change(broker: Broker, change: Change) -> None:
    """LogEngine.watch's callback: a topic created or deleted invalidates read-aheads."""
    if change.kind in ("create", "delete", "close"):
        broker.topic_changes += 1

