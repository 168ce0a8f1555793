"""Spark sink and remote-read benchmark, one run, JSON on stdout (and --out):

    python bench/spark/bench_spark_sink.py [--quick] [--records 1000000] [--sizes 100,1024]
                                     [--values hex|padded] [--rounds 3] [--dir DIR] [--out F.json]

For each value size, with one local[*] SparkSession and N rows cached in memory first:

- write: df.write.text(plain directory) vs df.write.format("walfs") to a data directory
  (path) and through `walfs serve` (bootstrap), vs the engine's Wal.append (a list) of the
  same values from Python (no Spark): rows/s each, and sink / write.text.
- engine and disk floors (no Spark): the same bytes, already in the stored layout,
  appended by the engine in the sink's chunk size then synced (engine_append_s,
  engine_sync_s), and written by one pwrite into a preallocated file then fdatasync'd
  (disk_floor_write_s, disk_floor_sync_s): what any durable write of them costs here.
  write.text does not fsync its files; the sink's rows are durable when its job ends.
- task alone (no Spark): one task's rows with `path` cut, encoded with markers, appended
  and synced as sink_task.py does once Spark has fed them, in one turn (task_s, and task_encode_s,
  task_append_s, task_sync_s).
- floor: df.write.format("walfs-bench-noop"), a Python data source (NoopDataSource,
  defined here) whose tasks take Spark's Arrow batches and drop them and whose commit
  does nothing: what any PySpark Python sink pays (the JVM feeding Arrow to Python
  workers), the ceiling of a sink written with PySpark's data source API.
- file floors: df.write.format("walfs-bench-file"), a Python data source (FileFloorDataSource,
  defined here) whose tasks write each Arrow batch's value bytes, back to back, into a
  file of their own in a plain directory, as write.text writes one file per task
  (file_floor), and the same with one fdatasync per task before it reports
  (file_floor_sync): what a PySpark sink that only stores the bytes costs, and one that
  also makes them durable when its task ends, as the sink's tasks do. Neither frames,
  checksums nor holds anything.
- read: spark.read.format("walfs").count() of the topic written, from the data
  directory (path) vs through the daemon (bootstrap): rows/s each, remote / local.

The six writes run --rounds times in turn (write.text, floor, file floor, file floor
with sync, sink path, sink bootstrap, again...). Each write's *_s is the median of its
runs, *_spread its [fastest, slowest] and *_runs every run in seconds. The ratios
(sink_vs_write_text, ...) are medians too, of each round's own ratio (the runs of one
round are a minute apart, so they share the machine's load), with every round's in
*_by_round. On a busy machine use more rounds (--rounds 5).

Values: the row id, then hex digits of SHA-256 hashes (--values hex, the default: rows
that compress as little as most real data would, since the streaming sink compresses
the rows its tasks hand the driver) or "x"s (--values padded: what runs before 2026-11-24 used).

Before each timed write, --recycle MiB (1024 by default) are written and deleted
(bench/benchkit.py's recycle), so that every write takes page-cache pages the kernel has just
freed, not memory this virtual machine hands back to its host and faults in again (the
JSON has the cost per MiB each recycling met). Before timing, one small untimed write
and read per path warm the JVM and Spark's Python workers. Reads are one timed run each;
the machine is in the JSON. --quick: 50,000 rows of 100 B, one round, 64 MiB recycled.

Where the sink's tasks spend their time: every sink write runs with the option
walfs.bench.phases (walfs/spark/sink_phases.py), and the JSON has, per write and run,
each task's seconds per phase (the phases are sink_phases.py's: feed, the wait for
Spark's next Arrow batch, then the sink's own, some of them in a task's appender
thread) and its start and end relative to the write's start (`*_phases`);
`*_phases_most` sums each write up: the most any one task spent in each phase, and when
its last task ended (`end`); `sink_path_turns` sums up the path writes' turns on the
data directory's lock (turns_summary: how long it was held, the opens, syncs and
handoffs between tasks).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceWriter, WriterCommitMessage

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import benchkit  # noqa: E402
from bench_spark import machine  # noqa: E402

SEGMENT = str(256 << 20)


# Ratio name -> (the baseline write, the write measured): baseline seconds / its seconds.
RATIOS = {
    "sink_vs_write_text": ("write_text", "sink_path"),
    "sink_bootstrap_vs_write_text": ("write_text", "sink_bootstrap"),
    "noop_floor_vs_write_text": ("write_text", "noop_floor"),
    "file_floor_vs_write_text": ("write_text", "file_floor"),
    "file_floor_sync_vs_write_text": ("write_text", "file_floor_sync"),
    "sink_path_vs_file_floor_sync": ("file_floor_sync", "sink_path"),
    "sink_path_vs_noop_floor": ("noop_floor", "sink_path"),
    "sink_bootstrap_vs_noop_floor": ("noop_floor", "sink_bootstrap"),
}


def timed_alone(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def task_phases(where: Path, started: float) -> list[dict[str, Any]]:
    """The lines the sink's tasks wrote (walfs.spark.sink_phases), start and end made
    relative to `started` (time.time() before the write), sorted by start; the file is
    removed."""
    if not where.exists():
        return []
    lines = [json.loads(x) for x in where.read_text().splitlines() if x.strip()]
    where.unlink()
    for line in lines:
        line["start"] = round(line["start"] - started, 4)
        line["end"] = round(line["end"] - started, 4)
        line.pop("pid", None)
        for turn in line.get("turns", []):
            for k in ("asked", "got", "released"):
                turn[k] = round(turn[k] - started, 4)
    return sorted(lines, key=lambda x: x["start"])


def turns_summary(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """One write's turns on the data directory's lock (with a path), in the order they
    got it: how many, the seconds the lock was held in all (got to released, summed),
    from the first turn's got to the last's release, and the handoffs: for each turn that
    asked while the lock was held, the gap between the previous release and its got
    (the waiter's polling, then its open; `released` is when the holder's close
    returned, its flock released a little before, so a gap may be negative)."""
    turns = sorted((t for line in tasks for t in line.get("turns", [])), key=lambda t: t["got"])
    if not turns:
        return {}
    handoffs = [
        round(b["got"] - a["released"], 4)
        for a, b in zip(turns, turns[1:], strict=False)
        if b["asked"] < a["released"]
    ]
    return {
        "turns": len(turns),
        "held": round(sum(t["released"] - t["got"] for t in turns), 4),
        "span": round(turns[-1]["released"] - turns[0]["got"], 4),
        "open": round(sum(t["open"] for t in turns), 4),
        "sync": round(sum(t["sync"] for t in turns), 4),
        "handoffs": handoffs,
    }


def phases_most(tasks: list[dict[str, Any]]) -> dict[str, float]:
    """One write's tasks summed up: the most any task spent in each phase, and when the
    last task ended ("end", from the write's start)."""
    most: dict[str, float] = {}
    for line in tasks:
        for k, v in line.items():
            if k not in ("task", "start", "rows") and isinstance(v, (int, float)):
                most[k] = max(most.get(k, 0.0), v)
    return most


def start_serve(data: Path) -> tuple[subprocess.Popen[str], str]:
    import walfs

    proc = subprocess.Popen(
        [sys.executable, "-m", "walfs.cli.serve", str(data), "--kafka-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # the walfs this bench measures (bench/ab_trees.py's tree), not the script's tree's
        cwd=Path(walfs.__file__).resolve().parent.parent,
    )
    assert proc.stdout is not None
    m = re.search(r"listening on (127\.0\.0\.1:\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise RuntimeError("walfs serve did not start: " + proc.communicate(timeout=30)[1])
    return proc, m.group(1)


def value_column(size: int, kind: str) -> Any:
    """Row id (12 digits) then padding to `size` bytes: "x"s (padded), or hex digits of
    SHA-256 hashes (hex: what lz4, which the sink's staged rows use, barely compresses)."""
    from pyspark.sql import functions as F

    head = F.lpad(F.col("id").cast("string"), 12, "0")
    if kind == "padded":
        return F.concat(head, F.lit("x" * max(0, size - 12)))
    hashes = F.expr(f"concat_ws('', transform(sequence(1, {size // 64 + 1}), i -> sha2(concat(id, i), 256)))")
    return F.concat(head, F.substring(hashes, 1, max(0, size - 12)))


def value_of(i: int, size: int, kind: str) -> bytes:
    """value_column's value for row i, computed in Python."""
    if kind == "padded":
        return (f"{i:012d}" + "x" * max(0, size - 12)).encode()
    hashes = "".join(hashlib.sha256(f"{i}{j}".encode()).hexdigest() for j in range(1, size // 64 + 2))
    return (f"{i:012d}" + hashes[: max(0, size - 12)]).encode()


class NoopCommit(WriterCommitMessage):
    pass


class NoopWriter(DataSourceArrowWriter):
    """Takes every Arrow batch Spark hands the task, keeps nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return NoopCommit()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


class NoopDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "walfs-bench-noop"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return NoopWriter()


class FileFloorWriter(NoopWriter):
    """Writes the value bytes of every Arrow batch into the task's own file, and with
    `sync` fdatasyncs it before the task reports (commit and abort: NoopWriter's)."""

    def __init__(self, where: str, sync: bool) -> None:
        self.where, self.sync = where, sync

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        from walfs.spark.sink_rows import _data

        ctx = TaskContext.get()
        name = f"part-{ctx.partitionId() if ctx else 0}-{ctx.attemptNumber() if ctx else 0}"
        fd = os.open(os.path.join(self.where, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for batch in iterator:
                data = memoryview(_data(batch.column(batch.schema.get_field_index("value"))))
                while data:
                    data = data[os.write(fd, data) :]
            if self.sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        return NoopCommit()


class FileFloorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "walfs-bench-file"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return FileFloorWriter(self.options["dir"], self.options.get("sync") == "1")


def engine_chunks(where: Path, blob: bytes, size: int) -> dict[str, float]:
    """The engine's own cost of the sink's appends, no Spark and no Python encoding: the
    values (already in the stored layout, one buffer) appended in TASK_CHUNK_BYTES
    batches, then one sync. engine_append_s + engine_sync_s."""
    from walfs.open import open_engine
    from walfs.spark.sink_task import TASK_CHUNK_BYTES

    per = max(1, TASK_CHUNK_BYTES // size)
    meta_lens, value_lens = array("I", [0]) * per, array("I", [size]) * per
    view = memoryview(blob)
    n = len(blob) // size
    eng = open_engine(str(where))
    try:
        t = time.perf_counter()
        for i in range(0, n, per):
            k = min(per, n - i)
            eng.append("t", 0, view[i * size : (i + k) * size], meta_lens[:k], value_lens[:k])
        appended = time.perf_counter()
        eng.sync()
        synced = time.perf_counter()
    finally:
        eng.close()
        shutil.rmtree(where, ignore_errors=True)
    return {"engine_append_s": appended - t, "engine_sync_s": synced - appended}


def task_alone(where: Path, values: list[bytes]) -> dict[str, float]:
    """One batch write task's own work with `path`, no Spark: its rows (half the values,
    as one of the 2 tasks has) in Arrow batches of 10,000 rows (Spark's
    maxRecordsPerBatch), cut into chunks, encoded with their markers, appended, then one
    sync: what walfs/spark/sink_task.py does after Spark's feed, in one turn (one open of
    the data directory, where a task past TASK_TURN_BYTES takes a few). task_*_s, per
    phase."""
    from walfs.open import open_engine
    from walfs.spark.sink import MARKER, STAGED_SCHEMA, normalize
    from walfs.spark.sink_rows import cuts, encode_chunk, row_costs
    from walfs.spark.sink_target import LocalTarget
    from walfs.spark.sink_task import TASK_CHUNK_BYTES

    batches = []
    for i in range(0, len(values), 10_000):
        part = values[i : i + 10_000]
        rows = pa.RecordBatch.from_pydict(
            {
                "topic": ["t"] * len(part),
                "partition": [0] * len(part),
                "key": [None] * len(part),
                "value": part,
                "headers": [[]] * len(part),
            },
            schema=STAGED_SCHEMA,
        )
        batches.append(normalize(rows, None))
    t = pa.Table.from_batches(batches)
    target = LocalTarget(open_engine(str(where)))
    took = {"task_encode_s": 0.0, "task_append_s": 0.0}
    try:
        started = time.perf_counter()
        for i, (a, b) in enumerate(cuts(row_costs(t), TASK_CHUNK_BYTES)):
            s = time.perf_counter()
            chunk = encode_chunk(t.slice(a, b - a), (MARKER, f"bench:0:{i}:{b - a}".encode()))
            m = time.perf_counter()
            target.append_chunk("t", 0, chunk)
            took["task_encode_s"] += m - s
            took["task_append_s"] += time.perf_counter() - m
        s = time.perf_counter()
        target.engine.sync()
        took["task_sync_s"] = time.perf_counter() - s
        took["task_s"] = time.perf_counter() - started
    finally:
        target.close()
        shutil.rmtree(where, ignore_errors=True)
    return took


def disk_floor(where: Path, blob: bytes) -> dict[str, float]:
    """What any durable write of the same bytes costs on this disk: one pwrite of them into
    a file preallocated beforehand (as a segment is), then one fdatasync.
    disk_floor_write_s + disk_floor_sync_s."""
    fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.posix_fallocate(fd, 0, len(blob))
        os.fsync(fd)
        t = time.perf_counter()
        assert os.pwrite(fd, blob, 0) == len(blob)
        written = time.perf_counter()
        os.fdatasync(fd)
        synced = time.perf_counter()
    finally:
        os.close(fd)
        os.unlink(where)
    return {"disk_floor_write_s": written - t, "disk_floor_sync_s": synced - written}


def one_size(
    spark: Any, base: Path, size: int, n: int, values_kind: str, rounds: int, recycle: int
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import walfs

    df = spark.range(n).select(F.lit("t").alias("topic"), value_column(size, values_kind).alias("value"))
    df = df.cache()
    df.count()
    run: dict[str, Any] = {"value_bytes": size, "values": values_kind}
    local, remote = base / f"local{size}", base / f"remote{size}"
    writes: dict[str, list[float]] = {
        k: []
        for k in ("write_text", "noop_floor", "file_floor", "file_floor_sync", "sink_path", "sink_bootstrap")
    }
    phases: dict[str, list[list[dict[str, Any]]]] = {"sink_path": [], "sink_bootstrap": []}
    log = base / f"phases{size}.jsonl"

    def sink() -> Any:  # a fresh writer each time (DataFrameWriter.option changes it)
        return df.write.format("walfs").mode("append").option("walfs.bench.phases", str(log))

    recycled: list[float] = []
    started = [0.0]  # when the last timed write began

    def timed(fn: Any) -> float:  # each write meets recycled pages (benchkit.recycle)
        recycled.append(benchkit.recycle(base, recycle))
        started[0] = time.time()
        return timed_alone(fn)

    proc, bootstrap = start_serve(remote)
    try:
        # Each write `rounds` times, in turn; medians count (module doc).
        for r in range(rounds):
            text_r = base / f"text{size}-{r}"
            writes["write_text"].append(timed(lambda d=text_r: df.select("value").write.text(str(d))))
            shutil.rmtree(text_r, ignore_errors=True)
            writes["noop_floor"].append(
                timed(lambda: df.write.format("walfs-bench-noop").mode("append").save())
            )
            for key, sync in (("file_floor", "0"), ("file_floor_sync", "1")):
                files_r = base / f"{key}{size}-{r}"
                files_r.mkdir()
                writer = df.write.format("walfs-bench-file").mode("append").option("dir", str(files_r))
                writes[key].append(timed(lambda w=writer, s=sync: w.option("sync", s).save()))
                shutil.rmtree(files_r, ignore_errors=True)
            local_r = local if r == 0 else base / f"local{size}-{r}"  # round 0's is read below
            writes["sink_path"].append(timed(lambda d=local_r: sink().save(str(d))))
            phases["sink_path"].append(task_phases(log, started[0]))
            if r:
                shutil.rmtree(local_r, ignore_errors=True)
            writes["sink_bootstrap"].append(timed(lambda: sink().option("bootstrap", bootstrap).save()))
            phases["sink_bootstrap"].append(task_phases(log, started[0]))
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    for k, ts in writes.items():
        run[k + "_s"] = statistics.median(ts)
        run[k + "_spread"] = [round(min(ts), 3), round(max(ts), 3)]
        run[k + "_runs"] = [round(t, 3) for t in ts]
    for k, runs in phases.items():
        run[k + "_phases"] = runs
        run[k + "_phases_most"] = [phases_most(tasks) for tasks in runs]
    run["sink_path_turns"] = [turns_summary(tasks) for tasks in phases["sink_path"]]
    run["recycle_mib"] = recycle
    run["recycle_sys_ms_per_mib"] = recycled
    values = [value_of(i, size, values_kind) for i in range(n)]
    with walfs.Wal(base / f"engine{size}") as wal:
        t = time.perf_counter()
        for i in range(0, n, 65536):
            wal.append("t", values[i : i + 65536])
        wal.sync()
        run["append_batch_s"] = time.perf_counter() - t
    run.update(task_alone(base / f"task{size}", values[: n // 2]))
    blob = b"".join(values)
    del values
    run.update(engine_chunks(base / f"chunks{size}", blob, size))
    run.update(disk_floor(base / f"floor{size}", blob))
    del blob
    proc, bootstrap = start_serve(local)
    try:
        counts: dict[str, int] = {}

        def count(key: str, **opts: str) -> None:
            counts[key] = spark.read.format("walfs").options(**opts).load().count()

        run["read_path_s"] = timed_alone(lambda: count("path", path=str(local)))
        run["read_bootstrap_s"] = timed_alone(lambda: count("bootstrap", bootstrap=bootstrap))
        assert counts == {"path": n, "bootstrap": n}, counts
        with walfs.Wal(local, read_only=True) as wal:  # the sink wrote every row, once
            # (the tasks' rows follow each other in the order the tasks appended)
            ids: list[int] = []
            while len(ids) < n:
                got = wal.read_records("t", len(ids), 0, 20_000, 64 << 20)
                assert got, f"the stream ends at {len(ids)} of {n} rows"
                ids.extend(int(r.value[:12]) for r in got)
            assert sorted(ids) == list(range(n)), "rows missing or repeated"
            first = wal.read_records("t", 0, 0, 1)[0].value
            assert first == value_of(int(first[:12]), size, values_kind)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    df.unpersist()
    for k in [k for k in run if k.endswith("_s")]:
        run[k.removesuffix("_s") + "_rows_per_s"] = round(n / run[k])
    for name, (base_k, k) in RATIOS.items():
        by_round = [b / t for b, t in zip(writes[base_k], writes[k], strict=True)]
        run[name] = round(statistics.median(by_round), 3)
        run[name + "_by_round"] = [round(x, 3) for x in by_round]
    run["remote_vs_local_read"] = round(run["read_path_s"] / run["read_bootstrap_s"], 3)
    floor_s = run["disk_floor_write_s"] + run["disk_floor_sync_s"]
    engine_s = run["engine_append_s"] + run["engine_sync_s"]
    run["disk_floor_vs_write_text"] = round(run["write_text_s"] / floor_s, 3)
    run["engine_vs_disk_floor"] = round(floor_s / engine_s, 3)
    for d in (local, remote, base / f"engine{size}"):
        shutil.rmtree(d, ignore_errors=True)
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--values", choices=("hex", "padded"), default="hex", help="value_column")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each write; the median counts")
    ap.add_argument("--dir", default=None)
    ap.add_argument(
        "--recycle",
        type=int,
        default=1024,
        metavar="MiB",
        help="write and delete this much before each timed write (benchkit.recycle); 0: never",
    )
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="50,000 rows of 100 B, one round: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.records, args.sizes, args.rounds, args.recycle = 50_000, "100", 1, 64
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("WALFS_SEGMENT_SIZE", SEGMENT)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from walfs.spark import WalfsDataSource

    base = Path(tempfile.mkdtemp(prefix="bench-sink-", dir=args.dir))
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("walfs-bench-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.maxResultSize", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(WalfsDataSource)
    spark.dataSource.register(NoopDataSource)
    spark.dataSource.register(FileFloorDataSource)
    result: dict[str, Any] = {
        "run": machine(base),
        "page_reporting": benchkit.state(),
        "records": args.records,
        "runs": [],
    }
    try:
        warm = base / "warm"
        small = spark.range(1000).select(F.lit("w").alias("topic"), F.col("id").cast("string").alias("value"))
        small.select("value").write.text(str(base / "warm-text"))
        small.write.format("walfs").mode("append").save(str(warm))
        small.write.format("walfs-bench-noop").mode("append").save()
        (base / "warm-file").mkdir()
        small.write.format("walfs-bench-file").mode("append").option("dir", str(base / "warm-file")).save()
        spark.read.format("walfs").load(str(warm)).count()
        for size in [int(x) for x in args.sizes.split(",")]:
            result["runs"].append(
                one_size(spark, base, size, args.records, args.values, args.rounds, args.recycle)
            )
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    benchkit.write_json(result, args.out)


if __name__ == "__main__":
    main()
