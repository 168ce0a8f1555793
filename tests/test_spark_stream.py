"""spark.readStream.format("walfs"): offsets, restarts from a checkpoint, new streams.

The sink is Spark's file sink (parquet): it is idempotent per micro-batch, so a query
that resumes exactly where it stopped leaves every record in it exactly once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import walfs

pytest_plugins = ["spark_fixtures"]


def stream(spark: SparkSession, data: Path, **options: str) -> DataFrame:
    return (
        spark.readStream.format("walfs")
        .option("path", str(data))
        .options(**options)
        .load()
        .select("topic", "partition", "offset", F.col("value").cast("string").alias("v"))
    )


def to_files(df: DataFrame, sink: Path, checkpoint: Path) -> object:
    return (
        df.writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
    )


def sink_rows(spark: SparkSession, sink: Path) -> list[tuple[str, int, int, str]]:
    # Reading the directory goes through the sink's _spark_metadata log: only committed
    # micro-batches count, as for any downstream reader.
    rows = spark.read.parquet(str(sink)).collect()
    return sorted((r["topic"], r["partition"], r["offset"], r["v"]) for r in rows)


def wait_for_batches(q: StreamingQuery, n: int, timeout: float = 120.0) -> None:
    """Polls until the query reported n micro-batches with input (the timeout bounds a hang)."""
    deadline = time.monotonic() + timeout
    while sum(1 for p in q.recentProgress if p["numInputRows"] > 0) < n:
        assert q.exception() is None, q.exception()
        assert time.monotonic() < deadline, "streaming query made no progress"
        time.sleep(0.1)


def expected(topic: str, partition: int, start: int, end: int) -> list[tuple[str, int, int, str]]:
    return sorted((topic, partition, i, f"{topic}-{partition}-{i}") for i in range(start, end))


def append(wal: walfs.Wal, topic: str, partition: int, start: int, end: int) -> None:
    wal.append(topic, [f"{topic}-{partition}-{i}".encode() for i in range(start, end)], partition)


def test_restart_from_checkpoint_has_no_gaps_and_no_duplicates(spark: SparkSession, tmp_path: Path) -> None:
    data, sink, ckpt = tmp_path / "data", tmp_path / "sink", tmp_path / "ckpt"
    with walfs.Wal(data) as wal:
        append(wal, "s", 0, 0, 200)
        append(wal, "s", 1, 0, 200)
    # Ten records per micro-batch: the query is stopped with most of the data unread,
    # possibly in the middle of a batch whose offsets are logged but not committed.
    df = stream(spark, data, topic="s", startingOffsets="earliest", maxOffsetsPerTrigger="10")
    q = to_files(df, sink, ckpt).trigger(processingTime="0 seconds").start()  # type: ignore[attr-defined]
    try:
        wait_for_batches(q, 2)
    finally:
        q.stop()
    first_run = sink_rows(spark, sink)
    assert 0 < len(first_run) < 400
    assert len(set(first_run)) == len(first_run)

    with walfs.Wal(data) as wal:
        append(wal, "s", 0, 200, 250)
        append(wal, "s", 1, 200, 230)
    # The restart takes bigger batches: offsets in the checkpoint do not depend on them.
    df = stream(spark, data, topic="s", startingOffsets="earliest", maxOffsetsPerTrigger="1000")
    q = to_files(df, sink, ckpt).trigger(availableNow=True).start()  # type: ignore[attr-defined]
    assert q.awaitTermination(180)
    assert q.exception() is None
    assert sink_rows(spark, sink) == expected("s", 0, 0, 250) + expected("s", 1, 0, 230)


def test_new_partitions_and_topics_are_read_from_their_start(spark: SparkSession, tmp_path: Path) -> None:
    data, sink, ckpt = tmp_path / "data", tmp_path / "sink", tmp_path / "ckpt"
    with walfs.Wal(data) as wal:
        append(wal, "ev-a", 0, 0, 5)
        append(wal, "other", 0, 0, 5)

    def run() -> None:
        # Kafka's defaults: a new query starts at "latest".
        q = to_files(stream(spark, data, topicPattern="ev-.*"), sink, ckpt).trigger(availableNow=True).start()  # type: ignore[attr-defined]
        assert q.awaitTermination(180)
        assert q.exception() is None

    run()
    assert sink_rows(spark, sink) == []
    with walfs.Wal(data) as wal:
        append(wal, "ev-a", 0, 5, 8)
        append(wal, "ev-a", 1, 0, 4)  # a partition the query has not seen
        append(wal, "ev-b", 0, 0, 3)  # a topic that matches the pattern now
        append(wal, "other", 0, 5, 9)
    run()
    assert sink_rows(spark, sink) == expected("ev-a", 0, 5, 8) + expected("ev-a", 1, 0, 4) + expected(
        "ev-b", 0, 0, 3
    )
    run()  # nothing new: nothing added
    assert len(sink_rows(spark, sink)) == 10


def test_explicit_starting_offsets(spark: SparkSession, tmp_path: Path) -> None:
    data, sink, ckpt = tmp_path / "data", tmp_path / "sink", tmp_path / "ckpt"
    with walfs.Wal(data) as wal:
        append(wal, "t", 0, 0, 10)
        append(wal, "t", 1, 0, 10)
    df = stream(spark, data, topic="t", startingOffsets='{"t": {"0": 7, "1": -1}}')
    q = to_files(df, sink, ckpt).trigger(availableNow=True).start()  # type: ignore[attr-defined]
    assert q.awaitTermination(180)
    assert sink_rows(spark, sink) == expected("t", 0, 7, 10)


WRITER = """
import sys, time, walfs
path = sys.argv[1]
with walfs.Wal(path) as wal:
    for b in range(60):
        for p in (0, 1):
            wal.append("live", [f"live-{p}-{i}".encode() for i in range(b * 50, b * 50 + 50)], p)
        if b == 0:
            print("started", flush=True)
        time.sleep(0.05)  # a few seconds of appends, while micro-batches run
"""


def test_stream_follows_a_writer_in_another_process(spark: SparkSession, tmp_path: Path) -> None:
    data, sink, ckpt = tmp_path / "data", tmp_path / "sink", tmp_path / "ckpt"
    with walfs.Wal(data) as wal:
        wal.create("live", 0)
        wal.create("live", 1)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(data)], stdout=subprocess.PIPE, text=True)
    df = stream(spark, data, topic="live", startingOffsets="earliest")
    q = to_files(df, sink, ckpt).trigger(processingTime="0 seconds").start()  # type: ignore[attr-defined]
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        assert writer.wait(timeout=120) == 0
        # Everything the writer appended is now in the WAL: let the query drain it.
        q.processAllAvailable()
    finally:
        q.stop()
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert sink_rows(spark, sink) == expected("live", 0, 0, 3000) + expected("live", 1, 0, 3000)
