"""format("walfs") in batch: discovery, schema, options, splitting, and reading while
another process appends. Data is written through the engine (walfs.Wal)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from spark_rows import offsets_of, values

import walfs
from walfs.spark import WalfsDataSource

pytest_plugins = ["spark_fixtures"]

REPO = Path(__file__).resolve().parent.parent


def make_wal(path: Path) -> str:
    """orders: 500 plain records in partition 0 and 20 in partition 1, one Kafka-style
    record (key, headers, producer timestamp) at orders[0] offset 500; clicks: 7;
    org 2 has its own 'orders'."""
    with walfs.Wal(path) as wal:
        wal.append("orders", [b"order %d" % i for i in range(500)])
        wal.append("orders", b"with meta", key=b"k1", headers=[("h", b"v"), ("n", None)], timestamp_ms=1234)
        wal.append("orders", [b"p1 %d" % i for i in range(20)], partition=1)
        wal.append("clicks", [b"click %d" % i for i in range(7)])
    with walfs.Wal(path, org_id=2) as wal:
        wal.append("orders", [b"org2 %d" % i for i in range(3)])
    return str(path)


@pytest.fixture
def data(tmp_path: Path) -> str:
    return make_wal(tmp_path / "data")


def test_found_without_registration_from_any_directory(tmp_path: Path) -> None:
    # What pyspark/sql/worker/lookup_data_sources.py does in a fresh worker: iterate the
    # installed top-level pyspark_* modules. Run from an unrelated directory, so it is the
    # installation that exposes pyspark_walfs, not the repository as working directory.
    script = textwrap.dedent(
        """
        from importlib import import_module
        from pkgutil import iter_modules
        from pyspark.sql.datasource import DataSource
        found = {}
        for info in iter_modules():
            if info.name.startswith("pyspark_"):
                mod = import_module(info.name)
                if issubclass(getattr(mod, "DefaultSource", object), DataSource):
                    found[mod.DefaultSource.name()] = mod.DefaultSource.__module__
        print(found.get("walfs"))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "walfs.spark.source", (
        "pyspark_walfs is not on a sys.path directory, so PySpark cannot discover it. A plain "
        "`pip install -e .` uses setuptools' import-hook finder, which pkgutil.iter_modules does not "
        "see: install with `pip install -e . --config-settings editable_mode=compat` (or a regular "
        "`pip install .`)."
    )


def test_format_walfs_in_a_plain_session(spark: SparkSession, data: str) -> None:
    df = spark.read.format("walfs").option("topic", "clicks").load(data)
    assert df.count() == 7


def test_explicit_registration(spark: SparkSession, data: str) -> None:
    spark.dataSource.register(WalfsDataSource)
    assert spark.read.format("walfs").option("path", data).option("topic", "clicks").load().count() == 7


def test_schema_is_kafkas_plus_headers_and_gid(spark: SparkSession, data: str) -> None:
    df = spark.read.format("walfs").option("topic", "orders").load(data)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
        ("gid", "bigint"),
    ]
    first = df.where("partition = 0 AND offset = 0").collect()[0]
    assert first["key"] is None and bytes(first["value"]) == b"order 0"
    assert first["topic"] == "orders" and first["timestampType"] == 1 and first["headers"] == []
    assert first["timestamp"].year >= 2024
    meta = df.where("partition = 0 AND offset = 500").collect()[0]
    assert bytes(meta["key"]) == b"k1" and bytes(meta["value"]) == b"with meta"
    assert [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in meta["headers"]] == [
        ("h", b"v"),
        ("n", None),
    ]
    assert meta["timestampType"] == 0
    assert int(meta["timestamp"].timestamp() * 1000) == 1234
    # gid orders records across the whole data directory.
    rows = df.orderBy("gid").select("partition", "offset").collect()
    assert [(r["partition"], r["offset"]) for r in rows[:501]] == [(0, i) for i in range(501)]


def test_every_record_once_with_values_in_order(spark: SparkSession, data: str) -> None:
    df = (
        spark.read.format("walfs").option("topic", "orders").option("maxRecordsPerPartition", "64").load(data)
    )
    # 501 + 20 records in ranges of at most 64: a single stream spreads over many tasks.
    assert df.rdd.getNumPartitions() == 8 + 1
    rows = df.where("partition = 0").orderBy("offset").collect()
    assert values(rows) == [b"order %d" % i for i in range(500)] + [b"with meta"]
    assert offsets_of(df, "orders", 1) == list(range(20))


def test_byte_bound_splits_too(spark: SparkSession, tmp_path: Path) -> None:
    with walfs.Wal(tmp_path / "d") as wal:
        wal.append("big", [bytes([65 + i % 26]) * 1000 for i in range(300)])
    df = (
        spark.read.format("walfs")
        .option("topic", "big")
        .option("maxBytesPerPartition", "50000")
        .load(str(tmp_path / "d"))
    )
    # 1001 bytes per record in the byte view: 49 records per 50 kB range.
    assert df.rdd.getNumPartitions() == 7
    assert offsets_of(df, "big") == list(range(300))


@pytest.mark.parametrize(
    ("topic_options", "expected"),
    [
        ({"topic": "clicks"}, {"clicks"}),
        ({"topic": "clicks, orders"}, {"clicks", "orders"}),
        ({"topic": "cl*"}, {"clicks"}),
        ({"topic": "nosuch,click?"}, {"clicks"}),
        ({"topicPattern": "ord.+"}, {"orders"}),
        ({"subscribe": "orders"}, {"orders"}),
        ({"subscribePattern": "c.*|o.*"}, {"clicks", "orders"}),
        ({}, {"clicks", "orders"}),
        ({"topic": "nosuch"}, set()),
    ],
)
def test_topic_selection(
    spark: SparkSession, data: str, topic_options: dict[str, str], expected: set[str]
) -> None:
    df = spark.read.format("walfs").options(**topic_options).load(data)
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == expected


def test_org_id(spark: SparkSession, data: str) -> None:
    df = spark.read.format("walfs").option("org_id", "2").load(data)
    assert sorted(values(df.collect())) == [b"org2 0", b"org2 1", b"org2 2"]


def test_starting_and_ending_offsets(spark: SparkSession, data: str) -> None:
    def read(**opts: str) -> list[tuple[int, int]]:
        df = spark.read.format("walfs").option("topic", "orders").options(**opts).load(data)
        return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())

    everything = [(0, i) for i in range(501)] + [(1, i) for i in range(20)]
    assert read() == everything
    assert read(startingOffsets="earliest", endingOffsets="latest") == everything
    assert read(startingOffsets="latest") == []
    assert read(endingOffsets="earliest") == []
    assert read(startingOffsets='{"orders": {"0": 498, "1": -2}}') == [(0, 498), (0, 499), (0, 500)] + [
        (1, i) for i in range(20)
    ]
    # Partitions the JSON leaves out: from earliest, to latest.
    assert read(startingOffsets='{"orders": {"0": 499}}', endingOffsets='{"orders": {"1": 2}}') == [
        (0, 499),
        (0, 500),
        (1, 0),
        (1, 1),
    ]
    assert read(startingOffsets='{"orders": {"0": -1, "1": 18}}', endingOffsets='{"orders": {"1": -1}}') == [
        (1, 18),
        (1, 19),
    ]
    # An end past the high watermark means the high watermark.
    assert read(
        startingOffsets='{"orders": {"0": 500, "1": 20}}', endingOffsets='{"orders": {"0": 9999}}'
    ) == [(0, 500)]


def test_trimmed_offsets_fail_unless_told(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "d"
    with walfs.Wal(path) as wal:
        wal.append("t", [b"r%d" % i for i in range(10)])
        wal.trim("t", 4)
    reader = spark.read.format("walfs").option("topic", "t").option("startingOffsets", '{"t": {"0": 2}}')
    with pytest.raises(PySparkException, match="trimmed"):
        reader.load(str(path)).count()
    df = reader.option("failOnDataLoss", "false").load(str(path))
    assert offsets_of(df, "t") == list(range(4, 10))
    # earliest means the low watermark.
    assert offsets_of(spark.read.format("walfs").load(str(path)), "t") == list(range(4, 10))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs the data directory"),
        ({"path": "DATA", "startingOffsets": "{oops"}, "startingOffsets must be"),
        ({"path": "DATA", "endingOffsets": '{"t": {"x": 1}}'}, "not an integer"),
        ({"path": "DATA", "endingOffsets": '{"t": {"0": -3}}'}, ">= -2"),
        ({"path": "DATA", "maxRecordsPerPartition": "0"}, "must be positive"),
        ({"path": "DATA", "topicPattern": "("}, "not a valid regular expression"),
        ({"path": "DATA", "org_id": "one"}, "org_id must be an integer"),
    ],
)
def test_bad_options_fail_at_planning(
    spark: SparkSession, data: str, options: dict[str, str], message: str
) -> None:
    opts = {k: (data if v == "DATA" else v) for k, v in options.items()}
    with pytest.raises(PySparkException, match=message):
        spark.read.format("walfs").options(**opts).load().count()


WRITER = """
import sys, time, walfs
path, n_batches, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with walfs.Wal(path, fsync="never") as wal:
    for b in range(n_batches):
        first = 1 + b * batch
        wal.append("live", [b"rec %08d " % j + b"x" * (j % 50) for j in range(first, first + batch)])
        if b == 0:
            print("started", flush=True)
        time.sleep(0.01)  # keep appending for a few seconds, while Spark plans and reads
"""


def test_read_while_another_process_appends(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "live"
    with walfs.Wal(path) as wal:
        wal.append("live", b"rec %08d " % 0)
    # The writer holds the data directory's lock the whole time; Spark's read-only
    # opens must neither need it nor disturb it.
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "300", "200"], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        seen = []
        for _ in range(4):
            df = (
                spark.read.format("walfs")
                .option("topic", "live")
                .option("maxRecordsPerPartition", "20000")
                .load(str(path))
            )
            # A prefix of whole records: offsets 0..n-1 once each, every value intact
            # (checked inside Spark, so the test does not ship every row to Python).
            intact = (
                "value = CAST(CONCAT('rec ', LPAD(CAST(offset AS STRING), 8, '0'), ' ', "
                "REPEAT('x', CAST(offset % 50 AS INT))) AS BINARY)"
            )
            r = df.selectExpr(
                "COUNT(*) AS n",
                "COUNT(DISTINCT offset) AS distinct_offsets",
                "MIN(offset) AS lo",
                "MAX(offset) AS hi",
                f"SUM(CASE WHEN {intact} THEN 0 ELSE 1 END) AS broken",
            ).collect()[0]
            assert (r["distinct_offsets"], r["lo"], r["hi"], r["broken"]) == (r["n"], 0, r["n"] - 1, 0), r
            seen.append(r["n"])
        assert writer.wait(timeout=120) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert seen == sorted(seen)
    final = spark.read.format("walfs").option("topic", "live").load(str(path))
    assert final.count() == 1 + 300 * 200
