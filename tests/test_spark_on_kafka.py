"""Spark reading and writing through the Kafka cluster engine (issue 16): format("walfs")
with a kafka://HOST:PORT/NAMESPACE target where a data directory would go, against a real
Apache Kafka broker (tests/real_kafka.py). Batch read, batch write, a streaming read that
follows appends made after the query started, and the sink's exactly-once streaming
writes: a driver SIGKILLed mid-stream and restarted from its checkpoint writes every row
once (the same test as on the local engine, tests/test_spark_sink_stream.py)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from real_kafka import fresh_target
from test_spark_sink_stream import driver_killed_then_restarted

import walfs

pytest_plugins = ["spark_fixtures"]


def values(target: str, topic: str, partition: int) -> list[str]:
    with walfs.Wal(target, read_only=True) as wal:
        return [r.value.decode() for r in wal.read_records(topic, 0, partition, 100_000)]


def test_batch_read_and_write_through_the_cluster(spark: SparkSession) -> None:
    target = fresh_target()
    with walfs.Wal(target) as wal:
        for p in range(3):
            wal.append("orders", [f"order {p}-{i}".encode() for i in range(40)], p)
        wal.append("other", b"not read")
    df = spark.read.format("walfs").load(target).where("topic = 'orders'")
    rows = df.select("partition", "offset", F.col("value").cast("string").alias("v")).collect()
    assert sorted((r.partition, r.offset, r.v) for r in rows) == [
        (p, i, f"order {p}-{i}") for p in range(3) for i in range(40)
    ]
    # Read back and written to another topic of the same namespace, partition by partition.
    out = df.select("key", F.upper(F.col("value").cast("string")).alias("value"), "partition")
    out.write.format("walfs").mode("append").option("path", target).option("topic", "shouted").save()
    for p in range(3):
        assert values(target, "shouted", p) == [f"ORDER {p}-{i}" for i in range(40)]
    # A second engine on the same namespace (another machine's mount) sees the rows.
    with walfs.Wal(target, read_only=True) as other:
        assert [p for _, p in other.streams("shouted")] == [0, 1, 2]


def test_stream_reads_appends_made_after_it_started(spark: SparkSession, tmp_path: Path) -> None:
    target = fresh_target()
    with walfs.Wal(target) as wal:
        wal.append("events", [f"e{i}".encode() for i in range(10)])
        q = (
            spark.readStream.format("walfs")
            .option("path", target)
            .option("topic", "events")
            .option("startingOffsets", "earliest")
            .load()
            .select(F.col("value").cast("string").alias("v"), "offset")
            .writeStream.format("memory")
            .queryName("walfs_on_kafka")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            q.processAllAvailable()
            wal.append("events", [f"e{i}".encode() for i in range(10, 25)])
            q.processAllAvailable()
            got = spark.sql("select v, offset from walfs_on_kafka").collect()
        finally:
            q.stop()
    assert sorted((r.offset, r.v) for r in got) == [(i, f"e{i}") for i in range(25)]


def test_driver_killed_mid_stream_then_restarted_writes_every_row_once(tmp_path: Path) -> None:
    driver_killed_then_restarted(fresh_target(), tmp_path)
