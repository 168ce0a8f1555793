"""A batch write's task (df.write.format("walfs")): its rows appended chunk by chunk while
Spark is still handing them over, in bounded memory (walfs.spark.sink's doc).

Rows arrive as Arrow batches. Each stream's rows wait in `pending` until they fill a
chunk (TASK_CHUNK_BYTES of row bytes, sink_rows.row_costs, or less when the target takes
less); the chunk is cut then and there and encoded with its marker, and only the rows of
a chunk not yet full stay behind. The task holds its chunks until its input ends (then
a task that fails in its input leaves nothing) unless they pass TASK_HOLD_BYTES: from
then on they go to the target's outlet as they are cut. Cuts are the
greedy ones of sink_rows.cuts over the stream's rows in order, whatever the batches' sizes,
so a retried attempt makes the same chunks and finds the ones an earlier attempt
appended by their markers.

Outlets:
- `path`, no daemon serving it (_LocalOutlet): the data directory's lock belongs to one process, so tasks
  append in turns, and a task's turns run in its own appender thread while the task's
  thread goes on taking and encoding rows (the engine's calls release the GIL). The
  task's thread queues its chunks; the appender takes the lock (opens the directory)
  once TASK_TURN_BYTES of chunks are queued (or the task waits for its queue, or its
  input has ended), waiting for it if another task holds it, appends every chunk
  queued (those queued during the turn too, never waiting for more), syncs them and
  releases the lock (closes): it never holds
  the lock while it waits for the task's next rows, so the job's other tasks append
  meanwhile. The task's thread waits only while more than TASK_BUFFER_BYTES are queued.
  An error in the appender thread ends it (what it appended in that turn synced by the
  close) and is raised in the task's thread, at its next chunk or at its end; the task
  reports to the driver only after the appender has appended and synced every chunk.
  Each turn's chunks are durable (synced) before the lock is released: closing
  without the sync would be faster, but the next opener's recovery takes the records
  it finds for durable and writes durable-end marks for them, which a power cut before
  the first task's own fsync would leave pointing past the disk's contents.
- `bootstrap`, or `path` of a directory a daemon owns, through its local socket
  (_RemoteOutlet; walfs.spark.sink_target.daemon_target, asked when the task starts):
  chunks (one Kafka record batch each) go out in Produce
  requests of up to SEND_BYTES as soon as one is full, up to IN_FLIGHT of them
  unanswered on the connection, so the daemon appends and syncs the task's rows while
  the task receives the next ones.

Memory a task holds: per stream, less than a chunk of pending rows (plus the batch that
filled it); up to TASK_HOLD_BYTES of held chunks; then with `path`, at most
TASK_BUFFER_BYTES plus one chunk queued and the one chunk being appended (when its
held chunks go to the queue at once, up to TASK_HOLD_BYTES plus one chunk, and the task
waits until the queue is back under TASK_BUFFER_BYTES); with `bootstrap`, at most
IN_FLIGHT + 1 requests of SEND_BYTES per stream.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from walfs.spark.options import SinkOptions, WalfsOptionError
from walfs.spark.sink_phases import Phases
from walfs.spark.sink_rows import Chunk, cuts, encode_chunk, row_costs

if TYPE_CHECKING:
    from walfs.spark.remote import ProduceInFlight
    from walfs.spark.sink_remote import RemoteTarget
    from walfs.spark.sink_target import LocalTarget

# The most row bytes of one chunk a batch write's task appends (less when the target
# takes less in one append: a daemon's max.message.bytes).
TASK_CHUNK_BYTES = 8 << 20
# A task holds its chunks until its input ends, so that a task that fails in its input
# (an error in the query, its executor lost) leaves nothing: atomic per task. Past this
# many encoded bytes it appends what it holds and each chunk from then on as it is cut,
# trading that atomicity for bounded memory: a larger task that fails leaves whole chunks,
# a prefix of its rows, which its retry completes (docs/spark.md).
TASK_HOLD_BYTES = 64 << 20
# With a path: the most encoded bytes a task queues for its appender thread; past them
# the task waits (for another task's turn, and its own appends) before taking more rows.
TASK_BUFFER_BYTES = 64 << 20
# Through a daemon: the most record batch bytes of one Produce request, and how many
# requests a task has unanswered at once.
SEND_BYTES = 8 << 20
IN_FLIGHT = 4
# With a path, past the hold: a task's appender thread appends its chunks in turns of at
# least this many encoded bytes (or what is left at its end), taking the data directory's
# lock for each turn and releasing it after (an open and a close, with its sync, per turn).
TASK_TURN_BYTES = 32 << 20
# How long a task waits for the data directory's lock: the job's other tasks hold it in
# turn (the writer found no daemon holding it before any task ran).
TASK_LOCK_WAIT_S = 600.0
# How often at most a task's appender tries the lock while another task holds it: the
# lock passes between tasks at most this late (a failed try, a LOCK file's flock that
# another process holds, costs ~25 us of CPU: 2.5% of a core while waiting).
TASK_LOCK_POLL_S = 0.001


@dataclass
class TaskStream:
    """One stream a task writes: its rows waiting for a chunk, what it appended."""

    topic: str
    partition: int
    limit: int  # the most row bytes of one chunk (marker reserved)
    pending: list[pa.Table] = field(default_factory=list)
    cost: int = 0
    chunks: int = 0  # chunks cut so far
    rows: int = 0
    first: int | None = None  # offset of the first record the task's rows have
    found: dict[int, int] | None = None  # a retry's: chunks an earlier attempt appended

    def appended(self, offset: int) -> None:
        self.first = offset if self.first is None else min(self.first, offset)


class _LocalOutlet:
    """Chunks into the data directory, in turns, by the task's appender thread: the
    directory's lock is taken for each turn of appends and released after it, while the
    task's own thread goes on reading and encoding rows (module doc)."""

    def __init__(self, opts: SinkOptions, ph: Phases) -> None:
        self.opts = opts
        self.ph = ph
        self.queue: deque[tuple[TaskStream, Chunk]] = deque()
        self.queued = 0  # encoded bytes in `queue`
        self.ended = False  # no more chunks: the last turn appends what is queued
        self.stopping = False  # the task failed: append nothing more
        self.error: BaseException | None = None  # what ended the appender thread
        self.cond = threading.Condition()
        # Held by whichever thread has the data directory open: a turn, or a retry's scan.
        self.dir = threading.Lock()
        self.thread: threading.Thread | None = None
        self.waited = 0.0  # seconds the last _open paused for the lock (phases' turns)

    @contextmanager
    def holding(self) -> Iterator[LocalTarget]:
        """The target for a retry's scan (in the task's thread, between turns), its lock
        waited for if need be and released after."""
        with self.dir:
            target = self._open()
            try:
                yield target
            finally:
                with self.ph("close"):
                    target.close()

    def _open(self) -> LocalTarget:
        """Opens the data directory once its lock is free (another task's turn may hold
        it): tried every TASK_LOCK_POLL_S at most, up to TASK_LOCK_WAIT_S; given up as
        soon as the task fails."""
        from walfs.spark.sink_target import LocalTarget, open_target

        def pause(s: float) -> None:
            t = time.perf_counter()
            with self.cond:
                if self.stopping:
                    raise _Stopped
                self.cond.wait(s)
            self.waited += time.perf_counter() - t

        self.waited = 0.0
        with self.ph("lock"):
            target = open_target(self.opts, TASK_LOCK_WAIT_S, max_pause=TASK_LOCK_POLL_S, pause=pause)
        if not isinstance(target, LocalTarget):
            target.close()
            raise WalfsOptionError(
                f"a walfs daemon began serving {self.opts.path} while this task appended to it: "
                "a retry of the task writes through the daemon"
            )
        return target

    def put(self, st: TaskStream, chunk: Chunk) -> None:
        """Queues a chunk for the appender thread (started at the first one)."""
        with self.cond:
            self._raise()
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="walfs-sink-appender", daemon=True)
                self.thread.start()
            self.queue.append((st, chunk))
            self.queued += chunk.nbytes
            if self.queued >= TASK_TURN_BYTES:
                self.cond.notify_all()

    def offer(self) -> None:
        """Waits while more than TASK_BUFFER_BYTES are queued (the appender thread takes
        its turns by itself); raises what failed the appender."""
        with self.cond:
            if self.queued > TASK_BUFFER_BYTES and self.error is None:
                self.cond.notify_all()  # a turn is due now, whatever TASK_TURN_BYTES says
                with self.ph("backlog"):
                    while self.queued > TASK_BUFFER_BYTES and self.error is None:
                        self.cond.wait()
            self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        """The appender thread: a turn each time TASK_TURN_BYTES are queued, the task
        waits for the queue (past TASK_BUFFER_BYTES), or its input has ended; ends after
        the last turn, or at the first error (kept for the task's thread to raise)."""
        try:
            while True:
                with self.cond:
                    while not (
                        self.stopping
                        or self.ended
                        or self.queued >= TASK_TURN_BYTES
                        or self.queued > TASK_BUFFER_BYTES
                    ):
                        self.cond.wait()
                    if self.stopping or not self.queue:
                        return
                self._turn()
        except _Stopped:
            pass
        except BaseException as e:  # raised in the task's thread (_raise)
            with self.cond:
                self.error = e
        finally:
            with self.cond:
                self.cond.notify_all()

    def _turn(self) -> None:
        """Takes the lock, appends every chunk queued (those queued meanwhile too, never
        waiting for more), syncs them and releases the lock."""
        with self.dir:
            asked = time.time()
            target = self._open()
            got = time.time()
            nbytes = 0
            synced = 0.0
            try:
                while True:
                    with self.cond:
                        if self.stopping or not self.queue:
                            break
                        st, chunk = self.queue.popleft()
                        self.queued -= chunk.nbytes
                        self.cond.notify_all()
                    nbytes += chunk.nbytes
                    with self.ph("append"):
                        st.appended(target.append_chunk(st.topic, st.partition, chunk))
                    del chunk
                # The turn's chunks are durable before the lock goes to the next task: a
                # close that skipped its sync would let the next opener take the records
                # in the page cache for durable ones and write durable-end marks past
                # them (docs/spark.md). (On an error, the close syncs what was appended.)
                synced = time.perf_counter()
                with self.ph("sync"):
                    target.engine.sync()
                synced = time.perf_counter() - synced
            finally:
                with self.ph("close"):
                    target.close()
            self.ph.turn(
                asked=asked,
                got=got,
                released=time.time(),
                waited=self.waited,
                mib=nbytes / (1 << 20),
                sync=synced,
            )

    def finish(self) -> None:
        """Lets the last turn append what is queued; returns once every chunk is
        appended and synced, or raises what failed the appender."""
        with self.cond:
            self.ended = True
            self.cond.notify_all()
        if self.thread is not None:
            with self.ph("drain"):
                self.thread.join()
        self._raise()

    def close(self) -> None:
        """Stops the appender thread (after the chunk it is appending, with its turn's
        sync and close) and waits for it; chunks still queued are dropped."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()


class _Stopped(Exception):
    """The task failed while its appender waited for the data directory's lock."""


Counts = list[tuple[TaskStream, int]]


class _RemoteOutlet:
    """Chunks through a daemon's Kafka listener, Produce requests pipelined (module doc)."""

    def __init__(self, target: RemoteTarget, ph: Phases) -> None:
        self.target = target
        self.ph = ph
        # per stream, the request being filled: its batches, (stream, rows) per batch
        self.building: dict[tuple[str, int], tuple[list[bytes | bytearray | memoryview], Counts]] = {}
        self.in_flight: deque[tuple[ProduceInFlight, Counts]] = deque()

    def put(self, st: TaskStream, chunk: Chunk) -> None:
        from walfs.spark.sink_remote import kafka_batch

        with self.ph("encode"):
            batch = kafka_batch(chunk, int(time.time() * 1000))
        key = (st.topic, st.partition)
        batches, counts = self.building.setdefault(key, ([], []))
        if batches and sum(map(len, batches)) + len(batch) > SEND_BYTES:
            self._send(key)
            batches, counts = self.building.setdefault(key, ([], []))
        batches.append(batch)
        counts.append((st, len(chunk)))
        if sum(map(len, batches)) >= SEND_BYTES:
            self._send(key)

    def _send(self, key: tuple[str, int]) -> None:
        batches, counts = self.building.pop(key)
        while len(self.in_flight) >= IN_FLIGHT:
            self._answer()
        with self.ph("append"):
            ahead = self.target.remote.produce_ahead(key[0], key[1], batches)
        self.in_flight.append((ahead, counts))

    def _answer(self) -> None:
        ahead, counts = self.in_flight.popleft()
        with self.ph("wait"):
            base = self.target.remote.produce_result(ahead)
        for st, n in counts:
            st.appended(base)
            base += n

    def offer(self) -> None:
        pass  # put() sends each request as it fills

    def finish(self) -> None:
        for key in list(self.building):
            self._send(key)
        while self.in_flight:
            self._answer()

    def close(self) -> None:
        # A task that fails with requests unanswered waits for their answers first, so
        # that what it leaves is appended before a retry scans for it.
        try:
            while self.in_flight:
                self._answer()
        finally:
            self.target.close()


class TaskWriter:
    """Appends one batch write task's rows (normalized: sink.STAGED_SCHEMA), chunk by
    chunk, as they are added. `starts` (a retried attempt's): where each stream ended
    when the job began, searched for the chunks of an earlier attempt (`prefix`'s
    markers); `existing`: the topics there were when the job began (through a daemon,
    the others are the job's own and grow to the partitions its rows name)."""

    def __init__(
        self,
        opts: SinkOptions,
        prefix: str,
        starts: dict[tuple[str, int], int] | None,
        existing: Collection[str],
        ph: Phases,
    ) -> None:
        from walfs.spark.sink_rows import MARKER, marker_reserve

        self.marker = MARKER
        self.reserve = marker_reserve(prefix)
        self.prefix = prefix
        self.starts = starts
        self.existing = existing
        self.ph = ph
        self.streams: dict[tuple[str, int], TaskStream] = {}
        # Chunks held while the task may still be atomic (TASK_HOLD_BYTES), None once it
        # appends as it goes.
        self.held: list[tuple[TaskStream, Chunk]] | None = []
        self.held_bytes = 0
        self.remote: RemoteTarget | None = None
        self.outlet: _LocalOutlet | _RemoteOutlet
        from walfs.spark.sink_target import daemon_target

        target = None
        if opts.bootstrap:
            from walfs.spark.sink_target import open_target

            target = open_target(opts)
        else:
            target = daemon_target(opts)  # a daemon owns the directory: through it
        if target is not None:
            self.remote = target  # type: ignore[assignment]
            self.outlet = _RemoteOutlet(target, ph)  # type: ignore[arg-type]
        else:
            self.outlet = _LocalOutlet(opts, ph)

    def _stream(self, topic: str, partition: int) -> TaskStream:
        st = self.streams.get((topic, partition))
        if st is None:
            from walfs.spark.sink_rows import chunk_limit

            own = None
            if self.remote is not None:
                self.remote.ensure(topic, partition + 1, grow=topic not in self.existing)
                own = self.remote.chunk_bytes(topic)
            own = TASK_CHUNK_BYTES if own is None else min(own, TASK_CHUNK_BYTES)
            limit = chunk_limit(own, self.reserve)
            st = self.streams[(topic, partition)] = TaskStream(topic, partition, limit)
        return st

    def add(self, rows: pa.RecordBatch) -> None:
        from walfs.spark.sink_rows import split_streams

        for topic, partition, t in split_streams(pa.Table.from_batches([rows])):
            st = self._stream(topic, partition)
            st.pending.append(t)
            st.cost += int(row_costs(t).sum())
            if st.cost > st.limit:
                self._cut(st, final=False)

    def _cut(self, st: TaskStream, final: bool) -> None:
        """Cuts the stream's pending rows into chunks and hands them on; all of them when
        `final`, else all but the last run (it may take more rows)."""
        if not st.pending:
            return
        t = pa.concat_tables(st.pending)
        costs = row_costs(t)
        runs = list(cuts(costs, st.limit))
        keep = None if final else runs.pop()
        for a, b in runs:
            self._chunk(st, t.slice(a, b - a))
        if keep is None:
            st.pending, st.cost = [], 0
        else:
            st.pending, st.cost = [t.slice(keep[0])], int(costs[keep[0] :].sum())

    def _chunk(self, st: TaskStream, t: pa.Table) -> None:
        i = st.chunks
        st.chunks += 1
        st.rows += t.num_rows
        if self.starts is not None:
            if st.found is None:
                st.found = self._scan(st)
            if i in st.found:
                st.appended(st.found[i])
                return
        with self.ph("encode"):
            chunk = encode_chunk(t, (self.marker, f"{self.prefix}{i}:{t.num_rows}".encode()))
        if self.held is None:
            self.outlet.put(st, chunk)
            self.outlet.offer()
            return
        self.held.append((st, chunk))
        self.held_bytes += chunk.nbytes
        if self.held_bytes > TASK_HOLD_BYTES:
            self._release()

    def _release(self) -> None:
        """Appends the chunks held; from now on each chunk goes out as it is cut."""
        held, self.held, self.held_bytes = self.held or [], None, 0
        for st, chunk in held:
            self.outlet.put(st, chunk)
        self.outlet.offer()

    def _scan(self, st: TaskStream) -> dict[int, int]:
        """Chunk number -> offset of this prefix's chunks from where the stream ended
        when the job began."""
        if self.remote is not None:
            return self._scan_in(self.remote, st)
        assert isinstance(self.outlet, _LocalOutlet)
        with self.outlet.holding() as target:
            return self._scan_in(target, st)

    def _scan_in(self, target: LocalTarget | RemoteTarget, st: TaskStream) -> dict[int, int]:
        assert self.starts is not None
        found: dict[int, int] = {}
        start = self.starts.get((st.topic, st.partition), 0)
        with self.ph("scan"):
            end = target.end(st.topic, st.partition)
            for offset, headers in target.scan(st.topic, st.partition, start, end):
                for k, v in headers:
                    if k == self.marker and v is not None and v.startswith(self.prefix.encode()):
                        found[int(v.decode().rsplit(":", 2)[1])] = offset
        return found

    def finish(self) -> list[tuple[str, int, int, int]]:
        """Appends what is left; (topic, partition, first offset, rows) per stream, every
        row durable (under the data directory's or the daemon's fsync policy, then a
        sync: with a path, the task's own)."""
        for st in self.streams.values():
            self._cut(st, final=True)
        self._release()
        self.outlet.finish()
        return [
            (st.topic, st.partition, st.first, st.rows)
            for st in self.streams.values()
            if st.rows and st.first is not None
        ]

    def close(self) -> None:
        self.outlet.close()
