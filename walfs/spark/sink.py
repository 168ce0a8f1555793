"""The sink: df.write.format("walfs") and df.writeStream.format("walfs").

Columns, as in Spark's Kafka sink: `value` (binary or string, required; null is stored
as an empty record), `key` (binary or string, optional), `headers` (array<struct<key:
string, value: binary>>, optional), `topic` (string; the option "topic" overrides it)
and `partition` (int, optional: 0 when absent or null). Other columns are ignored, so
rows read with format("walfs") can be written back as they are.

Batch writes (df.write): each task appends its own rows, chunk by chunk while Spark is
still handing them over (walfs.spark.sink_task: bounded memory). On the driver, before
any task runs, the writer notes where every stream ends. With a path, the target is
the directory itself when no daemon owns it, else the daemon that owns it, through its
local socket (walfs.spark.sink_target.open_target; each task asks again when it
starts). Each stream's rows are cut into chunks of at most
sink_task.TASK_CHUNK_BYTES (or what the target takes: a daemon's Produce batches stay
under message.max.bytes) as they arrive, each chunk one atomic append whose first
record carries the header ``walfs.sink = "<job id>:<partition id>:<chunk>:<count>"``
(the job id is a fresh uuid per write). With a path, tasks append in turns: a task takes
the data directory's lock when it has sink_task.TASK_TURN_BYTES of chunks ready (or its
input has ended) and no other task holds it, appends them, syncs them and releases the
lock (a task that finds the lock taken keeps up to sink_task.TASK_BUFFER_BYTES of
chunks, then waits); through a daemon, its Produce requests go out as they fill, a few
unanswered at once. A task's rows are durable when it ends: with a path each turn ends
with a sync (its chunks were appended under the engine's fsync policy), through a
daemon every Produce is answered with acks=all. It sends the
driver only (stream, first offset, rows) per stream. A retried task (attempt number >
0: an earlier attempt failed, possibly after appending) searches each of its streams,
from where it ended when the job began, for its partition's markers and appends only
the chunks not found, so a task's rows are appended once however often Spark retries
it. In a stream, each task's rows keep their order; tasks' rows follow each other in
the order the tasks append (together per turn with a path: a task's rows under
sink_task.TASK_HOLD_BYTES in one turn; through a daemon, together per Produce request).

What a failed job leaves: the rows of every task that appended before the job failed,
each exactly once: a task that completed, all of its rows; a task that failed (an error
in its query, a lost executor) after its first chunks were appended, whole chunks, a
prefix of its rows (its retry appends the rest). Spark's abort cannot take them back: a
WAL's appends are final. Speculative execution (spark.speculation, off by default) runs
two attempts of a task at once, and both may append.

Streaming writes are exactly-once. A micro-batch's commit runs, per stream:

1. cursor := committed offset of group "spark-sink.<query id>" on the stream: where the
   query's previous batch began there; the first time, the stream's end, committed
   durably before anything is appended;
2. scan the records from cursor to the end for the header
   ``walfs.sink = "<query id>:<batch id>:<chunk>:<count>"`` that the sink puts on the
   first record of each chunk it appends: chunks found were appended by an earlier
   attempt of this batch (a driver that died after appending, before Spark recorded the
   batch as done) and are not appended again;
3. append the missing chunks, then move the cursor to this batch's first record.

Spark replays only the last batch it planned (it plans batch n+1 once batch n is
recorded as committed), so a scan from where the previous batch began always reaches
the replayed batch's records; it reads one batch of the query's own rows plus what other
writers appended meanwhile.

So a replayed batch (same query, same batch id) appends nothing twice, and since a
streaming write's tasks never append (they hand the driver their rows in their commit
messages, an Arrow IPC stream, and the driver's commit appends them), rows of a failed
batch are never visible. The query id is Spark's (stable across restarts from one
checkpoint: `<checkpointLocation>/metadata`), or the option "queryId".

The one marker header per chunk (batch and streaming writes) is visible to readers
(Kafka clients, the `headers` column); values and keys are untouched, so the mount's
files show exactly the rows.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from walfs.spark.columnar import _empty_lists, _repeated_string
from walfs.spark.options import SinkOptions, WalfsOptionError
from walfs.spark.schema import HEADER_TYPE
from walfs.spark.sink_phases import Phases
from walfs.spark.sink_rows import (
    MARKER,
    Chunk,
    chunk_limit,
    cuts,
    encode_chunk,
    marker_reserve,
    row_costs,
    split_streams,
)

if TYPE_CHECKING:
    from walfs.spark.sink_target import SinkTarget

GROUP_PREFIX = "spark-sink."

# The rows, normalized: what a batch write's task appends, and what a streaming write's
# tasks send to the driver.
STAGED_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
    ]
)


# Streaming writes: the rows travel task -> JVM -> driver -> the commit's Python worker, each hop a copy:
# lz4 (Arrow's IPC buffer compression) makes them smaller when they compress, and costs
# several times the copies it saves when they do not (hex, media, encrypted data). A
# task compresses when a sample of its first values shrinks below COMPRESS_BELOW.
COMPRESS_BELOW = 0.75
COMPRESS_SAMPLE = 256 << 10


@dataclass
class StagedRows(WriterCommitMessage):
    """One streaming write task's rows (an Arrow IPC stream in STAGED_SCHEMA, buffers
    lz4-compressed when they compress well) and how many."""

    ipc: bytes
    rows: int


def compresses(b: pa.RecordBatch) -> bool:
    """Whether lz4 shrinks a sample of the (normalized) rows' values enough to pay."""
    data = b.column("value").buffers()[2]
    if data is None or data.size < 4096:
        return False
    sample = data.slice(0, min(data.size, COMPRESS_SAMPLE))
    return len(pa.Codec("lz4").compress(sample)) < COMPRESS_BELOW * sample.size


def stage(batches: Iterator[pa.RecordBatch], topic_option: str | None) -> StagedRows:
    """Runs in a streaming write's task: checks and normalizes the rows, appends nothing."""
    sink = pa.BufferOutputStream()
    n = 0
    out: pa.ipc.RecordBatchStreamWriter | None = None
    try:
        for b in batches:
            if b.num_rows == 0:
                continue
            rows = normalize(b, topic_option)
            if out is None:
                compression = "lz4" if compresses(rows) else None
                out = pa.ipc.new_stream(
                    sink, STAGED_SCHEMA, options=pa.ipc.IpcWriteOptions(compression=compression)
                )
            out.write_batch(rows)
            n += b.num_rows
    finally:
        if out is not None:
            out.close()
    return StagedRows(sink.getvalue().to_pybytes() if out is not None else b"", n)


def check_schema(names: Sequence[str], topic_option: str | None) -> None:
    """On the driver, before any task runs: the columns the sink needs are there."""
    if "value" not in names:
        raise WalfsOptionError(
            'format("walfs") writes a "value" column (binary or string); the rows have none'
        )
    if topic_option is None and "topic" not in names:
        raise WalfsOptionError('format("walfs") needs a topic: a "topic" column or .option("topic", NAME)')


def _binary(col: pa.Array, name: str) -> pa.Array:
    if pa.types.is_binary(col.type):
        return col
    if (
        pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_large_binary(col.type)
    ):
        return pc.cast(col, pa.binary())
    raise WalfsOptionError(f"column {name} must be binary or string, not {col.type}")


def normalize(b: pa.RecordBatch, topic_option: str | None) -> pa.RecordBatch:
    names = b.schema.names
    n = b.num_rows
    if "value" not in names:
        raise WalfsOptionError(
            'format("walfs") writes a "value" column (binary or string); the rows have none'
        )
    value = pc.fill_null(_binary(b.column("value"), "value"), b"")
    key = _binary(b.column("key"), "key") if "key" in names else pa.nulls(n, pa.binary())
    if topic_option is not None:
        topic = _repeated_string(topic_option, n)
    else:
        topic = b.column("topic")
        if not pa.types.is_string(topic.type):
            raise WalfsOptionError(f"column topic must be a string, not {topic.type}")
        if topic.null_count:
            raise WalfsOptionError('a row has a null topic (set .option("topic", NAME) or fill the column)')
    if "partition" in names:
        part = b.column("partition")
        if not pa.types.is_integer(part.type):
            raise WalfsOptionError(f"column partition must be an integer, not {part.type}")
        part = pc.cast(pc.fill_null(part, 0), pa.int32())
        if n and pc.min(part).as_py() < 0:
            raise WalfsOptionError("column partition has a negative value")
    else:
        part = pa.array(np.zeros(n, np.int32))
    if "headers" in names:
        headers = b.column("headers")
        try:
            headers = headers.cast(pa.list_(HEADER_TYPE))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise WalfsOptionError(
                f"column headers must be array<struct<key: string, value: binary>>, not {headers.type}"
            ) from e
        if headers.flatten().field("key").null_count:
            raise WalfsOptionError("a header has a null key (Kafka header keys are strings)")
    else:
        headers = _empty_lists(n)
    return pa.RecordBatch.from_arrays([topic, part, key, value, headers], schema=STAGED_SCHEMA)


def staged_table(messages: Sequence[WriterCommitMessage | None]) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    for m in messages:
        if isinstance(m, StagedRows) and m.rows:
            batches.extend(pa.ipc.open_stream(m.ipc).read_all().to_batches())
    return pa.Table.from_batches(batches, STAGED_SCHEMA)


def streams_of(
    target: SinkTarget, table: pa.Table, existing: Collection[str] | None = None
) -> Iterator[tuple[str, int, pa.Table]]:
    """split_streams(table), once the target has every partition the rows name. With
    `existing` (the topics there were before the job), the other topics, which the job's
    own tasks create, are grown to the partitions these rows name."""
    if table.num_rows == 0:
        return
    most = table.group_by("topic").aggregate([("partition", "max")])
    for topic, top in zip(
        most.column("topic").to_pylist(), most.column("partition_max").to_pylist(), strict=True
    ):
        target.ensure(topic, top + 1, grow=existing is not None and topic not in existing)
    yield from split_streams(table)


# A chunk to append: its number and how to encode it (encoded only when appended).
Planned = tuple[int, Callable[[], Chunk]]


def marked_chunks(t: pa.Table, own_limit: int | None, prefix: str) -> list[Planned]:
    """t's rows (one stream's, in order) cut into chunks under the target's limit
    `own_limit`, the first record of chunk i carrying the header MARKER =
    "<prefix><i>:<rows>"."""
    runs = cuts(row_costs(t), chunk_limit(own_limit, marker_reserve(prefix)))
    return [
        (i, partial(encode_chunk, t.slice(a, b - a), (MARKER, f"{prefix}{i}:{b - a}".encode())))
        for i, (a, b) in enumerate(runs)
    ]


def append_marked(
    target: SinkTarget, topic: str, partition: int, chunks: list[Planned], prefix: str, scan_from: int | None
) -> dict[int, int]:
    """Appends the chunks (marked_chunks(..., prefix)) to one stream, one atomic append
    each. With `scan_from`, the records from there to the stream's end are searched for
    this prefix's markers first and the chunks found are not appended again. Returns
    chunk number -> offset of its first record, for every chunk."""
    found: dict[int, int] = {}
    if scan_from is not None:
        for offset, headers in target.scan(topic, partition, scan_from, target.end(topic, partition)):
            for k, v in headers:
                if k == MARKER and v is not None and v.startswith(prefix.encode()):
                    found[int(v.decode().rsplit(":", 2)[1])] = offset
    missing = [(i, make) for i, make in chunks if i not in found]
    firsts = target.append(topic, partition, (make() for _, make in missing))
    found.update(zip((i for i, _ in missing), firsts, strict=True))
    return found


def write_once(target: SinkTarget, table: pa.Table, query_id: str, batch_id: int) -> None:
    """Streaming writes: micro-batch `batch_id` of query `query_id`, exactly once (see the
    module's doc)."""
    group = GROUP_PREFIX + query_id
    prefix = f"{query_id}:{batch_id}:"
    for topic, partition, t in streams_of(target, table):
        cursor = target.committed(group, topic, partition)
        if cursor is None:
            cursor = target.end(topic, partition)
            target.commit(group, topic, partition, cursor)
        chunks = marked_chunks(t, target.chunk_bytes(topic), prefix)
        found = append_marked(target, topic, partition, chunks, prefix, cursor)
        # The next batch's scan starts at this batch's first record: a replay of this
        # batch (the only one Spark can replay once the next has begun) is found there.
        start = min(found.values())
        if start > cursor:
            target.commit(group, topic, partition, start)


def open_target(opts: SinkOptions, lock_wait_s: float | None = None) -> SinkTarget:
    # Imported here: the Kafka client (kio) is slow to import, and only writes through
    # a daemon need it (walfs.spark.sink_target imports it for those only).
    from walfs.spark.sink_target import LOCK_WAIT_S
    from walfs.spark.sink_target import open_target as open_it

    return open_it(opts, LOCK_WAIT_S if lock_wait_s is None else lock_wait_s)


def query_id_of(opts: SinkOptions) -> str:
    """The streaming query's identity: option queryId, else Spark's query id from the
    checkpoint (the same after every restart from that checkpoint)."""
    if opts.query_id:
        return opts.query_id
    where = opts.checkpoint
    if where:
        u = urlparse(where)
        local = u.path if u.scheme == "file" else where if not u.scheme else None
        if local is not None:
            try:
                with open(os.path.join(local, "metadata"), encoding="utf-8") as f:
                    qid = json.loads(f.readline())["id"]
                if isinstance(qid, str) and qid:
                    return qid
            except (OSError, ValueError, KeyError, TypeError):
                pass
    raise WalfsOptionError(
        'writeStream.format("walfs") needs the query\'s identity for exactly-once writes: a local '
        '.option("checkpointLocation", DIR) or .option("queryId", NAME) (stable across restarts)'
    )


@dataclass
class TaskAppended(WriterCommitMessage):
    """What one batch-write task appended: (topic, partition, offset of its first record,
    rows) per stream."""

    streams: list[tuple[str, int, int, int]]


def task_identity() -> tuple[int, int]:
    """(partition id, attempt number) of the Spark task this runs in."""
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("a walfs batch write's rows are appended by Spark tasks (no TaskContext here)")
    return ctx.partitionId(), ctx.attemptNumber()


class WalfsBatchWriter(DataSourceArrowWriter):
    """Made on the driver (WalfsDataSource.writer) before any task runs, then sent to
    every task."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.job_id = uuid.uuid4().hex
        # Where every stream ends now (before any task appends), for retried attempts'
        # scans (through the daemon that owns the directory, if one does).
        target = open_target(opts)
        try:
            self.starts = target.ends(opts.topic)
        finally:
            target.close()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        part, attempt = task_identity()
        return self.write_task(part, attempt, iterator)

    def write_task(self, part: int, attempt: int, iterator: Iterator[pa.RecordBatch]) -> TaskAppended:
        """What `write` does in attempt `attempt` of the task of Spark partition `part`:
        its rows appended chunk by chunk as they arrive (walfs.spark.sink_task)."""
        from walfs.spark.sink_task import TaskWriter

        ph = Phases(self.opts.phases, str(part))
        rows = 0
        writer = TaskWriter(
            self.opts,
            f"{self.job_id}:{part}:",
            self.starts if attempt else None,
            {t for t, _ in self.starts},
            ph,
        )
        try:
            batches = iter(iterator)
            while True:
                with ph("feed"):
                    b = next(batches, None)
                if b is None:
                    break
                if b.num_rows == 0:
                    continue
                with ph("normalize"):
                    normal = normalize(b, self.opts.topic)
                writer.add(normal)
                rows += b.num_rows
            done = writer.finish()
        finally:
            writer.close()
        ph.done(rows=rows)
        fault = self.opts.fail_after_append
        if fault is not None and fault[0] == part and attempt < fault[1]:
            raise RuntimeError(f"walfs.test.failAfterAppend: partition {part}, attempt {attempt}")
        return TaskAppended(done)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every task appended its own rows, durably

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # what tasks appended stays (a WAL takes nothing back): see the module's doc


class WalfsStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage(iterator, self.opts.topic)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        table = staged_table(messages)
        if table.num_rows == 0:
            return
        query_id = query_id_of(self.opts)
        target = open_target(self.opts)
        try:
            write_once(target, table, query_id, batchId)
        finally:
            target.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # tasks appended nothing
