"""df.write.format("walfs"): rows appended to the data directory, or through the walfs
daemon that owns it (its local socket for a path, its Kafka listener for bootstrap),
and read back with format("walfs")."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_harness import ServeProcess
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

import walfs
from walfs.spark.sink import MARKER

pytest_plugins = ["spark_fixtures"]

ROW_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
        ),
    ]
)


def sample_rows() -> list[tuple]:
    """Two topics, three partitions, keys and headers on some rows only."""
    rows: list[tuple] = []
    for i in range(30):
        topic = "orders" if i % 3 else "refunds"
        part = i % 2 if topic == "orders" else 2
        key = f"k{i}".encode() if i % 4 == 0 else None
        headers = [("src", f"s{i}".encode()), ("empty", None)] if i % 5 == 0 else []
        rows.append((topic, part, key, f"value {i}".encode(), headers))
    return rows


def unmarked(headers: list[tuple]) -> list[tuple]:
    """The headers the rows had: without the sink's marker (walfs.spark.sink: one on the
    first record of each chunk a task appends)."""
    return [h for h in headers if h[0] != MARKER]


def stored(wal: walfs.Wal) -> dict[tuple[str, int], list[tuple]]:
    out: dict[tuple[str, int], list[tuple]] = {}
    for topic, part in wal.streams():
        out[(topic, part)] = [
            (r.key, r.value, unmarked([tuple(h) for h in r.headers]))
            for r in wal.read_records(topic, 0, part, 10_000)
        ]
    return out


def markers(wal: walfs.Wal) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """(offset, value) of every sink marker, per stream."""
    out: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for topic, part in wal.streams():
        out[(topic, part)] = [
            (r.offset, v.decode())
            for r in wal.read_records(topic, 0, part, 10_000)
            for k, v in r.headers
            if k == MARKER
        ]
    return out


def expected_streams(rows: list[tuple]) -> dict[tuple[str, int], list[tuple]]:
    out: dict[tuple[str, int], list[tuple]] = {}
    for topic, part, key, value, headers in rows:
        out.setdefault((topic, part), []).append((key, value, [tuple(h) for h in headers]))
    return out


def read_back(spark: SparkSession, **options: str) -> dict[tuple[str, int], list[tuple]]:
    rows = (
        spark.read.format("walfs").options(**options).load().orderBy("topic", "partition", "offset").collect()
    )
    out: dict[tuple[str, int], list[tuple]] = {}
    for r in rows:
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]]
        key = None if r["key"] is None else bytes(r["key"])
        out.setdefault((r["topic"], r["partition"]), []).append((key, bytes(r["value"]), unmarked(headers)))
    return out


def test_batch_write_then_read_back(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    rows = sample_rows()
    # One Spark partition: the order within each stream is the rows' order.
    df = spark.createDataFrame(rows, ROW_SCHEMA).coalesce(1)
    df.write.format("walfs").mode("append").option("path", str(data)).save()
    with walfs.Wal(data, read_only=True) as wal:
        assert stored(wal) == expected_streams(rows)
        # The one task (Spark partition 0) appended each stream's rows as one chunk, the
        # first record marked "<job id>:<partition>:<chunk>:<rows>".
        marks = markers(wal)
        assert {s: [(off, v.split(":", 1)[1]) for off, v in m] for s, m in marks.items()} == {
            s: [(0, f"0:0:{len(v)}")] for s, v in expected_streams(rows).items()
        }
        assert len({v.split(":")[0] for m in marks.values() for _, v in m}) == 1
    assert read_back(spark, path=str(data)) == expected_streams(rows)
    # Written again: appended after the first copy (a WAL never overwrites).
    df.write.format("walfs").mode("append").option("path", str(data)).save()
    with walfs.Wal(data, read_only=True) as wal:
        assert {s: len(v) for s, v in stored(wal).items()} == {
            s: 2 * len(v) for s, v in expected_streams(rows).items()
        }


def test_strings_topic_option_and_defaults(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    df = spark.createDataFrame([("a", "x"), (None, "y")], "key string, value string").coalesce(1)
    # The topic option names the topic; no partition column means partition 0.
    df.write.format("walfs").mode("append").option("topic", "letters").save(str(data))
    with walfs.Wal(data, read_only=True) as wal:
        assert wal.streams() == [("letters", 0)]
        assert [(r.key, r.value) for r in wal.read_records("letters", 0)] == [(b"a", b"x"), (None, b"y")]


def test_rows_read_from_walfs_write_back_unchanged(spark: SparkSession, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    with walfs.Wal(src) as wal:
        wal.append("t", [b"one", b"two"], 1)
        wal.append("t", b"three", 1, key=b"k", headers=[("h", b"v")])
    # Every column of format("walfs") is there; the sink takes topic, partition, key,
    # value and headers and ignores the others (offset, timestamp, gid...).
    spark.read.format("walfs").load(str(src)).coalesce(1).write.format("walfs").mode("append").save(str(dst))
    with walfs.Wal(src, read_only=True) as a, walfs.Wal(dst, read_only=True) as b:
        assert stored(a) == stored(b)


def test_bad_rows_are_refused_and_leave_nothing(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    walfs.Wal(data).close()
    with pytest.raises(PySparkException, match="value"):
        spark.createDataFrame([("t", 1)], "topic string, n int").write.format("walfs").mode("append").save(
            str(data)
        )
    with pytest.raises(PySparkException, match="topic"):
        spark.createDataFrame([(b"v",)], "value binary").write.format("walfs").mode("append").save(str(data))
    with pytest.raises(PySparkException, match="append-only"):
        spark.createDataFrame([("t", b"v")], "topic string, value binary").write.format("walfs").mode(
            "overwrite"
        ).save(str(data))
    with walfs.Wal(data, read_only=True) as wal:
        assert wal.streams() == []


def test_failed_job_leaves_whole_tasks(spark: SparkSession, tmp_path: Path) -> None:
    """A task that fails for good fails the job; tasks append their own rows, so what is
    left is every row of the tasks that appended before the job stopped, whole and once,
    and none of the failed task's."""
    data = tmp_path / "data"
    # Row 17 fails, in the last task (partition 3): local[2] starts it only once one of
    # tasks 0 and 1 is done, so at least that one's rows are there.
    boom = F.udf(lambda i: 1 // (i - 17), IntegerType())
    df = spark.range(0, 20, numPartitions=4).select(
        F.lit("t").alias("topic"), F.col("id").cast("string").alias("value"), boom("id").alias("x")
    )
    with pytest.raises(PySparkException):
        df.write.format("walfs").mode("append").save(str(data))
    with walfs.Wal(data, read_only=True) as wal:
        left = [int(r.value) for r in wal.read_records("t", 0, 0, 10_000)] if wal.streams() else []
    tasks = {p: list(range(5 * p, 5 * p + 5)) for p in range(4)}  # range(): 5 rows a partition
    present = sorted({i // 5 for i in left})
    assert present and 3 not in present, present
    # Each task's rows together and in order, each once: whole tasks, one after another.
    assert sorted(left) == sorted(i for p in present for i in tasks[p])
    assert [left[i : i + 5] for i in range(0, len(left), 5)] == [tasks[v // 5] for v in left[::5]]


def test_batch_write_through_the_daemon(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    rows = sample_rows()
    df = spark.createDataFrame(rows, ROW_SCHEMA).coalesce(1)
    serve = ServeProcess(data)
    try:
        # The daemon holds the directory's lock: a write to the path goes through the
        # daemon's local socket (walfs.common.local_socket), the rows as they are...
        df.write.format("walfs").mode("append").save(str(data))
        assert read_back(spark, bootstrap=serve.bootstrap) == expected_streams(rows)
        # ...as through its Kafka listener: the same rows again, after the first ones.
        df.write.format("walfs").mode("append").option("bootstrap", serve.bootstrap).save()
        twice = {s: v + v for s, v in expected_streams(rows).items()}
        assert read_back(spark, bootstrap=serve.bootstrap) == twice
    finally:
        rc, err = serve.stop()
    assert rc == 0, err
    assert not (data / "kafka.sock").exists()  # removed at a clean stop
    with walfs.Wal(data, read_only=True) as wal:
        # A topic created over the wire has partitions 0..n-1 (Kafka's rule): refunds,
        # written to partition 2 only, also has empty partitions 0 and 1.
        assert {s: v for s, v in stored(wal).items() if v} == twice
        assert stored(wal)[("refunds", 0)] == stored(wal)[("refunds", 1)] == []


def test_tasks_of_one_job_grow_the_new_topic_they_race_to_create(spark: SparkSession, tmp_path: Path) -> None:
    # Through a daemon each task creates a new topic with the partitions its own rows
    # name: a task whose rows name only partition 0 (one row, so it gets there first)
    # creates it with one partition, and the other task's rows name partition 3. The
    # job's tasks grow the topic they created; a topic that was there before the job
    # keeps Kafka's rule (it must have the partitions already).
    first = [("spread", 0, b"k", b"first", None)]
    second = [("spread", 1 + i % 3, b"k", b"v%05d" % i, None) for i in range(20000)]
    df = spark.createDataFrame(
        spark.sparkContext.parallelize([first, second], 2).flatMap(lambda r: r), ROW_SCHEMA
    )
    assert df.rdd.getNumPartitions() == 2
    serve = ServeProcess(tmp_path / "data")
    try:
        df.write.format("walfs").mode("append").option("bootstrap", serve.bootstrap).save()
        got = read_back(spark, bootstrap=serve.bootstrap)
        assert got[("spread", 0)] == [(b"k", b"first", [])]
        for p in (1, 2, 3):
            assert [v for _, v, _ in got[("spread", p)]] == [
                b"v%05d" % i for i in range(20000) if 1 + i % 3 == p
            ]
        # A topic that existed before the job is not grown: partition 4 is refused.
        more = spark.createDataFrame([("spread", 4, b"k", b"late", None)], ROW_SCHEMA)
        with pytest.raises(PySparkException, match="rows name partition 4"):
            more.write.format("walfs").mode("append").option("bootstrap", serve.bootstrap).save()
    finally:
        rc, err = serve.stop()
    assert rc == 0, err
