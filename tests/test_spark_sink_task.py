"""A batch write's task appends its rows chunk by chunk while its input is still arriving
(walfs.spark.sink_task), in bounded memory, into a data directory and through a real
`walfs serve`: rows are visible to readers before the task's iterator ends, the Arrow
memory a task holds stays far below its partition's size, and a task that fails in the
middle of its input leaves nothing while its chunks are under TASK_HOLD_BYTES (atomic per
task) and whole chunks past it, which its retry finds by their markers and does not
append again."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest
import sink_task_child
from kafka_harness import ServeProcess

import walfs
from walfs.local import debug
from walfs.open import open_engine
from walfs.spark import sink_target, sink_task
from walfs.spark.options import parse_sink_options
from walfs.spark.remote import LATEST, RemoteWal
from walfs.spark.sink import MARKER, WalfsBatchWriter
from walfs.spark.sink_rows import Chunk
from walfs.spark.sink_task import TASK_CHUNK_BYTES

VALUE = 1024
BATCH_ROWS = 1024  # 1 MiB of values per Arrow batch, as Spark hands a task 1 KiB rows
BATCHES = 48  # 48 MiB: six chunks of TASK_CHUNK_BYTES, under TASK_HOLD_BYTES
SCHEMA = pa.schema([("topic", pa.string()), ("value", pa.binary())])
PAD = os.urandom(VALUE)
# Rows in the log before the last batch is handed over, at least: all but two chunks.
LAST_BATCH_FLOOR = (BATCHES - 1) * BATCH_ROWS - 2 * TASK_CHUNK_BYTES // VALUE


def value(i: int) -> bytes:
    return b"%012d" % i + PAD[12:]


def batches(check: Callable[[int], None], fail_at: int | None = None) -> Iterator[pa.RecordBatch]:
    """BATCHES Arrow batches of rows 0.. in order; check(batch number) runs before each is
    handed over; raises instead of handing over batch `fail_at`."""
    for k in range(BATCHES):
        check(k)
        if k == fail_at:
            raise RuntimeError(f"the query failed at batch {k}")
        rows = range(k * BATCH_ROWS, (k + 1) * BATCH_ROWS)
        values = pa.array([value(i) for i in rows])
        yield pa.record_batch([pa.array(["t"] * BATCH_ROWS), values], schema=SCHEMA)


class Target:
    """The sink's options and a reader of the stream's end, for a data directory or a
    daemon serving one."""

    def __init__(self, tmp_path: Path, remote: bool) -> None:
        self.data = tmp_path / "data"
        self.serve = ServeProcess(self.data) if remote else None
        where = {"bootstrap": self.serve.bootstrap} if self.serve else {"path": str(self.data)}
        self.options = parse_sink_options(where)

    def end(self) -> int:
        if self.serve is not None:
            with RemoteWal(self.serve.bootstrap) as r:
                if "t" not in r.topics():
                    return 0
                return r.list_offsets([("t", 0)], LATEST)[("t", 0)]
        if not self.data.exists():
            return 0
        with walfs.Wal(self.data, read_only=True) as wal:
            return wal.info("t", 0).high_watermark

    def stored(self) -> list[walfs.Record]:
        if self.serve is not None:
            rc, err = self.serve.stop()
            assert rc == 0, err
        out: list[walfs.Record] = []
        with walfs.Wal(self.data, read_only=True) as wal:
            while got := wal.read_records("t", len(out), 0, 10_000, 64 << 20):
                out.extend(got)
        return out

    def stop(self) -> None:
        if self.serve is not None:
            self.serve.stop()


@pytest.mark.parametrize("remote", [False, True], ids=["path", "daemon"])
def test_a_large_task_appends_before_its_input_ends_in_bounded_memory(
    tmp_path: Path, remote: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task past TASK_HOLD_BYTES (lowered to one chunk here, so that 48 MiB is "large"),
    # appending with a path in turns of one chunk (TASK_TURN_BYTES, lowered to match),
    # its rows waiting for its appender thread to take each chunk (TASK_BUFFER_BYTES 0:
    # the queue's bound is what keeps a task's memory when its appends fall behind).
    monkeypatch.setattr(sink_task, "TASK_HOLD_BYTES", TASK_CHUNK_BYTES)
    monkeypatch.setattr(sink_task, "TASK_TURN_BYTES", TASK_CHUNK_BYTES)
    monkeypatch.setattr(sink_task, "TASK_BUFFER_BYTES", 0)
    target = Target(tmp_path, remote)
    try:
        writer = WalfsBatchWriter(target.options)
        ends: dict[int, int] = {}
        arrow: list[int] = []

        def check(k: int) -> None:
            ends[k] = target.end()
            # What was handed to the log before the last batch: given time to land
            # (a daemon answers what it was sent at its own pace, slower on a loaded
            # machine), it is all there, since no more rows come meanwhile.
            deadline = time.monotonic() + 60
            while k == BATCHES - 1 and ends[k] < LAST_BATCH_FLOOR and time.monotonic() < deadline:
                time.sleep(0.05)
                ends[k] = target.end()
            arrow.append(pa.total_allocated_bytes())

        before = pa.total_allocated_bytes()
        done = writer.write_task(0, 0, batches(check))
        records = target.stored()
    finally:
        target.stop()
    # Before the last batch was handed over, most of the rows were already in the log
    # (the old sink appended only once its iterator had ended).
    assert ends[BATCHES - 1] >= LAST_BATCH_FLOOR, ends
    # The task never held its 48 MiB partition: at most about two chunks of Arrow memory.
    assert max(arrow) - before < 2 * TASK_CHUNK_BYTES + (4 << 20), (max(arrow) - before, before)
    # Every row once, in order, in whole chunks each marked with its rows.
    n = BATCHES * BATCH_ROWS
    assert done.streams == [("t", 0, 0, n)]
    assert [r.value for r in records] == [value(i) for i in range(n)]
    marks = [(r.offset, v.decode()) for r in records for k, v in r.headers if k == MARKER]
    assert len(marks) >= BATCHES * BATCH_ROWS * VALUE // TASK_CHUNK_BYTES
    starts = [o for o, _ in marks]
    counts = [int(m.rsplit(":", 1)[1]) for _, m in marks]
    assert [int(m.rsplit(":", 2)[1]) for _, m in marks] == list(range(len(marks)))
    assert starts == [sum(counts[:i]) for i in range(len(counts))] and sum(counts) == n


@pytest.mark.parametrize("held", [True, False], ids=["under-the-hold", "past-the-hold"])
@pytest.mark.parametrize("remote", [False, True], ids=["path", "daemon"])
def test_a_task_failing_mid_input_leaves_nothing_or_chunks_its_retry_completes(
    tmp_path: Path, remote: bool, held: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 MiB of a 48 MiB task were cut into chunks when its query failed. Under
    TASK_HOLD_BYTES (atomic per task) none was appended; past it (the hold lowered to one
    chunk) a prefix of whole chunks was. Either way the retry leaves every row once."""
    if held:
        assert BATCHES * BATCH_ROWS * VALUE < sink_task.TASK_HOLD_BYTES
    else:
        monkeypatch.setattr(sink_task, "TASK_HOLD_BYTES", TASK_CHUNK_BYTES)
        monkeypatch.setattr(sink_task, "TASK_TURN_BYTES", TASK_CHUNK_BYTES)
        # the appender thread has taken each chunk before the task takes more rows
        monkeypatch.setattr(sink_task, "TASK_BUFFER_BYTES", 0)
    target = Target(tmp_path, remote)
    try:
        writer = WalfsBatchWriter(target.options)
        with pytest.raises(RuntimeError, match="the query failed at batch 30"):
            writer.write_task(0, 0, batches(lambda k: None, fail_at=30))
        left = target.end()
        if held:
            assert left == 0
        else:
            assert 0 < left < 30 * BATCH_ROWS
        done = writer.write_task(0, 1, batches(lambda k: None))
        records = target.stored()
    finally:
        target.stop()
    n = BATCHES * BATCH_ROWS
    assert done.streams == [("t", 0, 0, n)]
    # The retry found the first attempt's chunks by their markers: every row once.
    assert [r.value for r in records] == [value(i) for i in range(n)]


def other_rows(n: int) -> Iterator[pa.RecordBatch]:
    """Another task's rows (n Arrow batches of BATCH_ROWS, values "B<row>")."""
    for k in range(n):
        values = pa.array([b"B%011d" % i + PAD[12:] for i in range(k * BATCH_ROWS, (k + 1) * BATCH_ROWS)])
        yield pa.record_batch([pa.array(["t"] * BATCH_ROWS), values], schema=SCHEMA)


def after_turns(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set when a turn of a task's appender thread (with a path) ends with
    nothing left queued: the appender is idle until its task queues more."""
    idle = threading.Event()
    monkeypatch.setattr(sink_task._LocalOutlet, "_turn", sink_task_child.telling_turns(idle))
    return idle


def test_with_a_path_a_task_appends_while_another_waits_for_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task 0, past the hold, has appended its first chunks and waits for its next rows;
    meanwhile task 1 appends all of its rows and ends. Tasks take the data directory's
    lock per turn of appends: the old sink kept it from a task's first append to its
    end, so task 1 waited for task 0's input to end (here, for ever: task 0's input goes
    on only once task 1 is done; the lock wait is lowered so that the old code fails
    instead of hanging)."""
    monkeypatch.setattr(sink_task, "TASK_HOLD_BYTES", TASK_CHUNK_BYTES)
    monkeypatch.setattr(sink_task, "TASK_TURN_BYTES", TASK_CHUNK_BYTES)
    monkeypatch.setattr(sink_task, "TASK_LOCK_WAIT_S", 2.0)
    target = Target(tmp_path, remote=False)
    writer = WalfsBatchWriter(target.options)
    other: list[tuple[str, int, int, int]] = []
    seen: dict[str, int] = {}
    idle = after_turns(monkeypatch)

    def check(k: int) -> None:
        if k == 20:  # task 0 is past the hold (1 chunk) with 20 MiB cut: task 1 runs now
            # once task 0's appender thread has appended what task 0 queued so far
            assert idle.wait(60)
            seen["before"] = target.end()
            other.extend(writer.write_task(1, 0, other_rows(4)).streams)
            seen["after"] = target.end()

    done = writer.write_task(0, 0, batches(check))
    records = target.stored()
    n = BATCHES * BATCH_ROWS
    # Task 0 had appended whole chunks before task 1 ran; task 1's 4 MiB went in after them.
    assert 0 < seen["before"] < 20 * BATCH_ROWS
    assert other == [("t", 0, seen["before"], 4 * BATCH_ROWS)]
    assert seen["after"] == seen["before"] + 4 * BATCH_ROWS
    assert done.streams == [("t", 0, 0, n)]
    # Every row of both tasks once; each task's rows in their order, task 1's together.
    mine = [r.value for r in records if not r.value.startswith(b"B")]
    theirs = [r.offset for r in records if r.value.startswith(b"B")]
    assert mine == [value(i) for i in range(n)]
    assert theirs == list(range(seen["before"], seen["before"] + 4 * BATCH_ROWS))


def test_with_a_path_rows_keep_coming_while_a_turn_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's turns (open, append, sync, close) run in its appender thread, so the
    task keeps taking rows from Spark while a turn is under way: here the first append
    of a task past the hold waits (up to 20 s) until the task has taken 4 more batches
    of rows. The old sink appended in the task's own thread, which took no rows
    meanwhile (the wait ran out with none taken). (The task's rows wait at batch 20
    until that append has begun: the test's rows come faster than a loaded machine may
    start the appender thread's first turn.)"""
    monkeypatch.setattr(sink_task, "TASK_HOLD_BYTES", TASK_CHUNK_BYTES)
    monkeypatch.setattr(sink_task, "TASK_TURN_BYTES", TASK_CHUNK_BYTES)
    target = Target(tmp_path, remote=False)
    writer = WalfsBatchWriter(target.options)
    fed = [0]  # batches the task has taken
    during: list[int] = []  # batches taken while the first append waited
    cond = threading.Condition()
    append_chunk = sink_target.LocalTarget.append_chunk

    appending = threading.Event()

    def slow_append(self: sink_target.LocalTarget, topic: str, partition: int, chunk: Chunk) -> int:
        if not during:
            with cond:
                start = fed[0]
                appending.set()
                cond.wait_for(lambda: fed[0] >= start + 4, timeout=20)
                during.append(fed[0] - start)
        return append_chunk(self, topic, partition, chunk)

    def check(k: int) -> None:
        if k == 20:
            assert appending.wait(60)
        with cond:
            fed[0] = k
            cond.notify_all()

    monkeypatch.setattr(sink_target.LocalTarget, "append_chunk", slow_append)
    done = writer.write_task(0, 0, batches(check))
    records = target.stored()
    assert during and during[0] >= 4, during
    n = BATCHES * BATCH_ROWS
    assert done.streams == [("t", 0, 0, n)]
    assert [r.value for r in records] == [value(i) for i in range(n)]


def test_with_a_path_the_phases_line_lists_each_turn_on_the_lock(tmp_path: Path) -> None:
    """With walfs.bench.phases, a task's line lists its turns on the data directory's
    lock (walfs.spark.sink_phases.Phases.turn): here another holder (this process,
    through its own open of the directory) has the lock when the task's input ends, so
    its one turn asks before that holder releases it and gets it only after; the turn's
    `open` leaves out the wait, and its MiB are the task's encoded chunks."""
    target = Target(tmp_path, remote=False)
    log = tmp_path / "phases.jsonl"
    opts = parse_sink_options({"path": str(target.data), "walfs.bench.phases": str(log)})
    writer = WalfsBatchWriter(opts)
    released: list[float] = []

    def hold_then_release(wal: walfs.Wal) -> None:
        time.sleep(0.5)
        released.append(time.time())
        wal.close()

    def check(k: int) -> None:
        if k == BATCHES - 1:  # under the hold: the task's one turn comes at its input's end
            threading.Thread(target=hold_then_release, args=(walfs.Wal(target.data),)).start()

    done = writer.write_task(0, 0, batches(check))
    records = target.stored()
    assert done.streams == [("t", 0, 0, BATCHES * BATCH_ROWS)] and len(records) == BATCHES * BATCH_ROWS
    [line] = [json.loads(x) for x in log.read_text().splitlines()]
    [turn] = line["turns"]
    assert set(turn) == {"asked", "got", "released", "open", "mib", "sync"}
    assert turn["asked"] < released[0] < turn["got"] + 1e-4  # asked while held, got it after
    assert turn["got"] <= turn["released"] <= line["end"] + 1e-3
    assert 0 <= turn["open"] <= turn["got"] - turn["asked"] and turn["sync"] >= 0
    # The chunks' encoded bytes: the values, each record's stored framing, the markers.
    assert BATCHES <= turn["mib"] < BATCHES * 1.05
    assert line["lock"] >= turn["got"] - turn["asked"] - 1e-3  # the phase: the wait and the open


@pytest.mark.parametrize("backlog", [False, True], ids=["feeding", "waiting-on-a-full-queue"])
def test_with_a_path_an_append_failing_in_the_appender_thread_fails_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backlog: bool
) -> None:
    """The third chunk's append fails in the task's appender thread (an injected error,
    raised before the engine's append). The task fails with that very error, whether
    its own thread is taking rows or waiting for the queue to drain (TASK_BUFFER_BYTES
    lowered to one chunk); it leaves the first two chunks whole, nothing of the third;
    the directory opens cleanly; and the task's retry completes the rows once each."""
    monkeypatch.setattr(sink_task, "TASK_HOLD_BYTES", TASK_CHUNK_BYTES)
    monkeypatch.setattr(sink_task, "TASK_TURN_BYTES", TASK_CHUNK_BYTES)
    if backlog:
        monkeypatch.setattr(sink_task, "TASK_BUFFER_BYTES", TASK_CHUNK_BYTES)
    target = Target(tmp_path, remote=False)
    writer = WalfsBatchWriter(target.options)
    appended: list[int] = []
    raised: list[tuple[BaseException, threading.Thread]] = []
    append_chunk = sink_target.LocalTarget.append_chunk

    def failing_append(self: sink_target.LocalTarget, topic: str, partition: int, chunk: Chunk) -> int:
        if len(appended) == 2:
            e = OSError(5, "injected append error")
            raised.append((e, threading.current_thread()))
            raise e
        first = append_chunk(self, topic, partition, chunk)
        appended.append(len(chunk))
        return first

    monkeypatch.setattr(sink_target.LocalTarget, "append_chunk", failing_append)
    with pytest.raises(OSError, match="injected append error") as failed:
        writer.write_task(0, 0, batches(lambda k: None))
    assert [e for e, _ in raised] == [failed.value]
    assert raised[0][1] is not threading.current_thread()  # the appender's, not the task's
    left = target.stored()
    marks = [int(v.decode().rsplit(":", 1)[1]) for r in left for k, v in r.headers if k == MARKER]
    assert marks == appended and len(left) == sum(appended)
    assert [r.value for r in left] == [value(i) for i in range(len(left))]
    monkeypatch.setattr(sink_target.LocalTarget, "append_chunk", append_chunk)
    done = writer.write_task(0, 1, batches(lambda k: None))
    n = BATCHES * BATCH_ROWS
    assert done.streams == [("t", 0, 0, n)]
    assert [r.value for r in target.stored()] == [value(i) for i in range(n)]


CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sink_task_child.py")


def child_task(blob: Path, part: int, attempt: int, letter: str, pause_at: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, str(blob), str(part), str(attempt), letter, str(pause_at)],
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("when", ["between-turns", "while-appending"])
def test_with_a_path_a_task_killed_while_another_appends_loses_nothing_reported(
    tmp_path: Path, when: str
) -> None:
    """Two tasks past the hold append to one stream in turns, each in its own process;
    task 1 is SIGKILLed, either while it waits for its next rows (its turns done, the lock
    free) or at batch 20 of 48, wherever it then is (perhaps in a turn, holding the lock).
    Task 0 still takes the lock, appends every row and reports them; the directory opens
    cleanly; task 1 left whole chunks, a prefix of its rows, which its retry completes:
    every row of both tasks once, in order."""
    target = Target(tmp_path, remote=False)
    writer = WalfsBatchWriter(target.options)
    blob = tmp_path / "writer.pickle"
    blob.write_bytes(pickle.dumps(writer))
    victim = child_task(blob, 1, 0, "B", 30 if when == "between-turns" else -1)
    survivor = child_task(blob, 0, 0, "A", -1)
    try:
        assert victim.stdout is not None
        awaited = "paused" if when == "between-turns" else "batch 20"
        for line in victim.stdout:  # ends at the child's exit at the latest
            if line.strip() == awaited:
                break
        else:
            pytest.fail(f"task 1 ended before {awaited!r}: rc {victim.wait()}")
        victim.kill()
        assert victim.wait(60) == -signal.SIGKILL
        out, _ = survivor.communicate(timeout=300)
        assert survivor.returncode == 0
    finally:
        for p in (victim, survivor):
            if p.poll() is None:
                p.kill()
                p.wait()
    reported = json.loads(out.strip().splitlines()[-1])
    n = sink_task_child.BATCHES * sink_task_child.BATCH_ROWS
    left = [r for r in target.stored() if r.value.startswith(b"B")]
    # Task 1 left whole chunks: a prefix of its rows, each chunk marked with its count.
    marks = [int(v.decode().rsplit(":", 1)[1]) for r in left for k, v in r.headers if k == MARKER]
    assert [r.value for r in left] == [sink_task_child.value("B", i) for i in range(len(left))]
    assert sum(marks) == len(left) < n
    if when == "between-turns":  # it had waited for the lock for its turns by then
        assert left
    retried = writer.write_task(1, 1, sink_task_child.rows("B", -1))
    records = target.stored()
    a = [r for r in records if r.value.startswith(b"A")]
    b = [r for r in records if r.value.startswith(b"B")]
    assert [r.value for r in a] == [sink_task_child.value("A", i) for i in range(n)]
    assert [r.value for r in b] == [sink_task_child.value("B", i) for i in range(n)]
    assert reported == [["t", 0, a[0].offset, n]]
    assert retried.streams == [("t", 0, b[0].offset, n)]


@pytest.mark.parametrize("seed", [1, 2])
def test_with_a_path_a_power_cut_in_a_turn_keeps_every_turn_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Each turn syncs its chunks before it releases the lock: the power goes out in a
    task's third turn, after its first append and before its sync, with no page written
    since the last sync kept. The chunks of the turns before it are all there, the third
    turn's are not, and the task's retry completes the rows once each. (The feed waits
    for the appender thread to go idle at batches 24 and 36, so that the task takes at
    least three turns: each turn appends what is queued when it gets to it.)"""
    monkeypatch.setattr(sink_task, "TASK_HOLD_BYTES", TASK_CHUNK_BYTES)
    monkeypatch.setattr(sink_task, "TASK_TURN_BYTES", 1)  # a turn as soon as a chunk is queued
    # The sink's opens in test mode (walfs.local.debug.power_cut needs it), an interval syncer
    # that never comes (only the turns' syncs make anything durable).
    monkeypatch.setattr(
        sink_target, "open_engine", partial(open_engine, test_mode=True, fsync_interval_ms=3_600_000)
    )
    target = Target(tmp_path, remote=False)
    writer = WalfsBatchWriter(target.options)
    turns: list[tuple[sink_target.LocalTarget, list[int]]] = []  # each turn's target, its chunks' rows
    append_chunk = sink_target.LocalTarget.append_chunk
    idle = after_turns(monkeypatch)

    def append_then_cut(self: sink_target.LocalTarget, topic: str, partition: int, chunk: Chunk) -> int:
        first = append_chunk(self, topic, partition, chunk)
        if not turns or turns[-1][0] is not self:  # each turn opens the directory anew
            turns.append((self, []))
        turns[-1][1].append(len(chunk))
        if len(turns) == 3:
            debug.power_cut(self.engine, seed=seed, keep_permille=0)
            raise RuntimeError("the power went out")
        return first

    def check(k: int) -> None:
        if k in (24, 36):
            assert idle.wait(60)
            idle.clear()

    monkeypatch.setattr(sink_target.LocalTarget, "append_chunk", append_then_cut)
    with pytest.raises(RuntimeError, match="the power went out"):
        writer.write_task(0, 0, batches(check))
    kept = sum(turns[0][1]) + sum(turns[1][1])
    assert len(turns) == 3 and kept > 0
    assert target.end() == kept
    assert [r.value for r in target.stored()] == [value(i) for i in range(kept)]
    monkeypatch.setattr(sink_target.LocalTarget, "append_chunk", append_chunk)
    done = writer.write_task(0, 1, batches(lambda k: None))
    n = BATCHES * BATCH_ROWS
    assert done.streams == [("t", 0, 0, n)]
    assert [r.value for r in target.stored()] == [value(i) for i in range(n)]
