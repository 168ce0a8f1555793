"""The sink's target through a walfs daemon's Kafka listener (option "bootstrap"): see
walfs.spark.sink_target for what a target does.

Each chunk becomes one Kafka record batch (the C encoder the listener's fetches use,
walfs.wire.batch_codec.encode_kafka_batch_pieces, fed the chunk's pieces in the stored
layout as they are: no join, no Python per record), sized under the topic's
max.message.bytes as the daemon reports it (DescribeConfigs). Batches go together in
Produce requests (acks=all) of up to PRODUCE_BYTES: the daemon appends all batches of
one partition in a request as one atomic, durable append, one fsync.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

from walfs.engine.records import Header
from walfs.spark.options import WalfsOptionError
from walfs.spark.remote import LATEST, RemoteWal
from walfs.spark.remote_read import read_remote
from walfs.spark.sink_rows import Chunk, headed
from walfs.wire.batch_codec import encode_kafka_batch_pieces
from walfs.wire.record_batch import BATCH_OVERHEAD

# The most bytes of record batches in one Produce request: far under the daemon's
# socket.request.max.bytes (Kafka's default, 100 MiB, which the listener enforces).
PRODUCE_BYTES = 32 << 20


def kafka_batch(chunk: Chunk, timestamp_ms: int) -> memoryview:
    """The chunk as one Kafka record batch (v2, the C encoder the listener's fetches
    use, fed the chunk's pieces as they are: no join), every record with CreateTime
    `timestamp_ms`."""
    return encode_kafka_batch_pieces(chunk.pieces, chunk.meta_lens, chunk.value_lens, timestamp_ms)


class RemoteTarget:
    def __init__(self, remote: RemoteWal) -> None:
        self.remote = remote
        self._counts: dict[str, int] | None = None
        self._limits: dict[str, int] = {}
        self._ensured: set[str] = set()

    def ensure(self, topic: str, partitions: int, grow: bool = False) -> None:
        """Kafka numbers partitions 0..n-1 and a Produce to a partition the daemon does
        not have fails: a new topic is created with `partitions` partitions. With
        `grow` (a topic the write's own job created: its tasks race to create it, each
        with the partitions its rows name), a topic with fewer is grown to them
        (CreatePartitions); otherwise it must have them already (Kafka's rule)."""
        self._ensured.add(topic)
        if self._counts is None:
            self._counts = self.remote.topics()
        have = self._counts.get(topic, 0)
        if partitions <= have:
            return
        if have == 0:
            self.remote.create_topic(topic, partitions)
            self._counts = self.remote.topics()
            have = self._counts.get(topic, 0)
        if have < partitions and grow:
            self.remote.add_partitions(topic, partitions)
            self._counts = self.remote.topics()
            have = self._counts.get(topic, 0)
        if have >= partitions:
            return
        raise WalfsOptionError(
            f"topic {topic!r} has {have} partition(s) on the walfs daemon; "
            f"rows name partition {partitions - 1}"
        )

    def chunk_bytes(self, topic: str) -> int | None:
        """What the daemon takes in one Produce batch (the topic's max.message.bytes,
        else the daemon's message.max.bytes: asked once, with DescribeConfigs, for every
        topic this write names), less the batch's own header."""
        if topic not in self._limits:
            self._limits.update(self.remote.max_message_bytes(sorted(self._ensured | {topic})))
        return max(1, self._limits[topic] - BATCH_OVERHEAD)

    def append(self, topic: str, partition: int, chunks: Iterable[Chunk]) -> list[int]:
        """Each chunk is one record batch (under the topic's max.message.bytes); batches
        go together in Produce requests of up to PRODUCE_BYTES, which the daemon appends
        as one atomic, durable append (one fsync for all of them)."""
        firsts: list[int] = []
        batches: list[bytes | bytearray | memoryview] = []
        counts: list[int] = []

        def send() -> None:
            base = self.remote.produce(topic, partition, batches)
            for n in counts:
                firsts.append(base)
                base += n
            batches.clear()
            counts.clear()

        for c in chunks:
            batch = kafka_batch(c, int(time.time() * 1000))
            if batches and sum(map(len, batches)) + len(batch) > PRODUCE_BYTES:
                send()
            batches.append(batch)
            counts.append(len(c))
        if batches:
            send()
        return firsts

    def end(self, topic: str, partition: int) -> int:
        return self.remote.list_offsets([(topic, partition)], LATEST)[(topic, partition)]

    def ends(self, topic: str | None) -> dict[tuple[str, int], int]:
        counts = self.remote.topics()
        pairs = [(t, p) for t, n in sorted(counts.items()) if topic in (None, t) for p in range(n)]
        return self.remote.list_offsets(pairs, LATEST) if pairs else {}

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        return self.remote.committed(group, topic, partition)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.remote.commit(group, topic, partition, offset)

    def scan(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[int, Sequence[Header]]]:
        if start < end:
            yield from headed(read_remote(self.remote, topic, partition, start, end))

    def close(self) -> None:
        self.remote.close()
