"""Where the sink appends: the data directory itself (the engine, walfs.engine_api) when no daemon owns it,
or a walfs daemon's Kafka listener (option "bootstrap") when one does.

Both give the sink the same four things: an atomic, durable append of one chunk of
records (walfs.spark.sink_rows.Chunk, the stored layout) to one stream; the stream's
end; a durable per-group cursor (the WAL's one commit rule, LogEngine.commit, which the
listener's OffsetCommit also calls); and a scan of the records past an offset that carry
headers, to find the sink's own chunks again. Neither runs Python per record: a chunk
goes to LogEngine.append as it is, or through the C encoder to one Kafka record batch;
scans read Arrow batches (walfs.spark.columnar / remote_read) and decode only the
records that have headers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from walfs import WalLockedError
from walfs.engine_api import LogEngine, open_engine
from walfs.kafka.record_batch import BATCH_OVERHEAD
from walfs.kafka_codec import encode_kafka_batch
from walfs.records import Header
from walfs.spark.columnar import REC_DTYPE, read_range
from walfs.spark.options import SinkOptions, WalfsOptionError
from walfs.spark.remote import LATEST, RemoteWal
from walfs.spark.remote_read import read_remote
from walfs.spark.sink_rows import Chunk


class SinkTarget(Protocol):
    def ensure(self, topic: str, partitions: int) -> None: ...
    def chunk_bytes(self, topic: str) -> int | None:
        """The most row bytes (sink_rows.row_costs) one append to `topic` takes; None:
        no limit of the target's own."""
        ...

    def append(self, topic: str, partition: int, chunk: Chunk) -> int: ...
    def end(self, topic: str, partition: int) -> int: ...
    def committed(self, group: str, topic: str, partition: int) -> int | None: ...
    def commit(self, group: str, topic: str, partition: int, offset: int) -> None: ...
    def scan(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[int, Sequence[Header]]]: ...
    def close(self) -> None: ...


# How long a commit waits for the data directory's lock: a driver that was killed may
# leave a Spark Python worker finishing its commit for a moment; a daemon keeps it.
LOCK_WAIT_S = 20.0


def open_target(opts: SinkOptions) -> SinkTarget:
    if opts.bootstrap:
        return RemoteTarget(RemoteWal(opts.bootstrap))
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return LocalTarget(open_engine(opts.path, org_id=opts.org_id))
        except WalLockedError as e:
            if time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            raise WalfsOptionError(
                f"{opts.path} is owned by a running walfs daemon (walfs mount / walfs serve): write "
                f'through its Kafka listener with .option("bootstrap", "host:port") (start it with '
                f"--kafka-listen): {e}"
            ) from e


def headed(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Sequence[Header]]]:
    """(offset, headers) of the records in the batches (walfs.spark.schema) that have
    headers; only those rows reach Python."""
    for b in batches:
        counts = pc.list_value_length(b.column("headers"))
        rows = b.filter(pc.greater(pc.fill_null(counts, 0), 0))
        if rows.num_rows == 0:
            continue
        offsets = rows.column("offset").to_pylist()
        for off, hs in zip(offsets, rows.column("headers").to_pylist(), strict=True):
            yield off, [(h["key"], h["value"]) for h in hs]


class LocalTarget:
    def __init__(self, wal: LogEngine) -> None:
        self.wal = wal

    def ensure(self, topic: str, partitions: int) -> None:
        pass  # an append creates the stream

    def chunk_bytes(self, topic: str) -> int | None:
        return None

    def append(self, topic: str, partition: int, chunk: Chunk) -> int:
        first = self.wal.append(topic, partition, chunk.data, chunk.meta_lens, chunk.value_lens)
        self.wal.sync()
        return first

    def end(self, topic: str, partition: int) -> int:
        return self.wal.info(topic, partition).high_watermark

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        return self.wal.committed(group, topic, partition)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.wal.commit(group, topic, partition, offset)

    def scan(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[int, Sequence[Header]]]:
        if start < end:
            yield from headed(read_range(self.wal, topic, partition, start, end))

    def close(self) -> None:
        self.wal.close()


class RemoteTarget:
    def __init__(self, remote: RemoteWal) -> None:
        self.remote = remote
        self._counts: dict[str, int] | None = None
        self._limits: dict[str, int] = {}
        self._ensured: set[str] = set()

    def ensure(self, topic: str, partitions: int) -> None:
        """Kafka numbers partitions 0..n-1 and a Produce to a partition the daemon does
        not have fails: a new topic is created with `partitions` partitions; an existing
        one must have them already (Kafka's wire cannot add partitions to it here)."""
        self._ensured.add(topic)
        if self._counts is None:
            self._counts = self.remote.topics()
        have = self._counts.get(topic, 0)
        if partitions <= have:
            return
        if have == 0:
            self.remote.create_topic(topic, partitions)
            self._counts = self.remote.topics()
            if self._counts.get(topic, 0) >= partitions:
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

    def append(self, topic: str, partition: int, chunk: Chunk) -> int:
        n = len(chunk)
        recs = np.zeros(n, REC_DTYPE)
        recs["offset"] = np.arange(n, dtype=np.uint64)
        recs["timestamp_ms"] = int(time.time() * 1000)  # the records' CreateTime
        recs["meta_len"] = np.frombuffer(chunk.meta_lens, np.uint32)
        recs["value_len"] = np.frombuffer(chunk.value_lens, np.uint32)
        sizes = recs["meta_len"].astype(np.uint64) + recs["value_len"]
        recs["buf_pos"][1:] = np.cumsum(sizes)[:-1]
        return self.remote.produce(topic, partition, encode_kafka_batch(chunk.data, recs, n))

    def end(self, topic: str, partition: int) -> int:
        return self.remote.list_offsets([(topic, partition)], LATEST)[(topic, partition)]

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
