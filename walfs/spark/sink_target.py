"""Where the sink appends: the data directory itself (the engine, walfs.engine_api) when no daemon owns it,
or a walfs daemon's Kafka listener (option "bootstrap") when one does.

Both give the sink the same four things: an atomic, durable append of one chunk of
records to one stream; the stream's end; a durable per-group cursor (the WAL's one
commit rule, LogEngine.commit, which the listener's OffsetCommit also calls); and a scan
of the records past an offset with their headers, to find the sink's own chunks again.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

from walfs import Record, WalLockedError
from walfs.engine_api import LogEngine, encode_records, open_engine, read_records
from walfs.kafka.record_batch import BATCH_OVERHEAD, BatchError, decode_batches, encode_batch
from walfs.records import Header
from walfs.spark.options import SinkOptions, WalfsOptionError
from walfs.spark.remote import LATEST, RemoteError, RemoteWal

# (key, value, headers) of one record to append.
Row = tuple[bytes | None, bytes, Sequence[Header]]

SCAN_RECORDS = 4096


# A Produce batch must fit the daemon's message.max.bytes (Kafka's default, 1,048,588, is
# the listener's): the sink's chunks for a daemon stay under it, per-record overhead included.
REMOTE_CHUNK_BYTES = 900 << 10


class SinkTarget(Protocol):
    # The largest chunk (one atomic append) the target takes; None: the sink's own.
    max_chunk_bytes: int | None

    def ensure(self, topic: str, partitions: int) -> None: ...
    def append(self, topic: str, partition: int, rows: Sequence[Row]) -> int: ...
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


class LocalTarget:
    max_chunk_bytes: int | None = None

    def __init__(self, wal: LogEngine) -> None:
        self.wal = wal

    def ensure(self, topic: str, partitions: int) -> None:
        pass  # an append creates the stream

    def append(self, topic: str, partition: int, rows: Sequence[Row]) -> int:
        first = self.wal.append(topic, partition, *encode_records((k, v, h, None) for k, v, h in rows))
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
        off = start
        while off < end:
            recs = read_records(self.wal, topic, partition, off, min(SCAN_RECORDS, end - off))
            if not recs:
                return
            for r in recs:
                yield r.offset, r.headers
            off = recs[-1].offset + 1

    def close(self) -> None:
        self.wal.close()


class RemoteTarget:
    max_chunk_bytes: int | None = REMOTE_CHUNK_BYTES

    def __init__(self, remote: RemoteWal) -> None:
        self.remote = remote
        self._counts: dict[str, int] | None = None

    def ensure(self, topic: str, partitions: int) -> None:
        """Kafka numbers partitions 0..n-1 and a Produce to a partition the daemon does
        not have fails: a new topic is created with `partitions` partitions; an existing
        one must have them already (Kafka's wire cannot add partitions to it here)."""
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

    def append(self, topic: str, partition: int, rows: Sequence[Row]) -> int:
        now = int(time.time() * 1000)
        batch = encode_batch([Record(i, now, v, k, h) for i, (k, v, h) in enumerate(rows)])
        return self.remote.produce(topic, partition, batch)

    def end(self, topic: str, partition: int) -> int:
        return self.remote.list_offsets([(topic, partition)], LATEST)[(topic, partition)]

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        return self.remote.committed(group, topic, partition)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.remote.commit(group, topic, partition, offset)

    def scan(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[int, Sequence[Header]]]:
        off = start
        while off < end:
            raw = self.remote.fetch(topic, partition, off)
            if not raw:
                return
            before = off
            for base, batch in split_batches(raw):
                try:
                    records = [r for b in decode_batches(batch) for r in b.records]
                except BatchError as e:
                    raise RemoteError(f"{topic!r}[{partition}] at {base}: {e}") from e
                for i, rec in enumerate(records):
                    o = base + i
                    if off <= o < end:
                        yield o, rec.headers
                    off = max(off, o + 1)
            if off == before:
                raise RemoteError(
                    f"{topic!r}[{partition}]: the daemon sent no record at offset {off} (end {end})"
                )

    def close(self) -> None:
        self.remote.close()


_BASE_AND_LENGTH = struct.Struct(">qi")


def split_batches(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(base offset, whole batch) of each record batch in a fetch answer; a batch cut
    short at the end of the answer (Kafka allows that) is dropped."""
    pos = 0
    while len(raw) - pos >= BATCH_OVERHEAD:
        base, length = _BASE_AND_LENGTH.unpack_from(raw, pos)
        end = pos + 12 + length
        if length < BATCH_OVERHEAD - 12:
            raise RemoteError(f"malformed record batch in a fetch answer (length {length})")
        if end > len(raw):
            return
        yield base, raw[pos:end]
        pos = end
