"""Spark on the mount: plain text/csv/json readers on topic files, partition directories
as a column, a topic growing while Spark reads, and format("walfs") on the data
directory of a live mount (the daemon holds the writer's lock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_mount import Mount
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

pytest_plugins = ["conftest_mount", "spark_fixtures"]


def lines(rows: list) -> list[str]:
    return [r["value"] for r in rows]


def test_text_reads_every_record_once(spark: SparkSession, mount: Mount) -> None:
    mount.sh("seq 0 999 | sed 's/.*/order & paid/' >> orders")
    df = spark.read.text(str(mount.path / "orders"))
    assert sorted(lines(df.collect()), key=lambda s: int(s.split()[1])) == [
        f"order {i} paid" for i in range(1000)
    ]
    # No checksum side files appear: Hadoop's local FS only looks for `.orders.crc`.
    assert not (mount.path / ".orders.crc").exists()
    assert not [name for name in os.listdir(mount.path) if name.endswith(".crc")]


def test_partition_directories_become_a_column(spark: SparkSession, mount: Mount) -> None:
    mount.sh("mkdir partition=1 partition=7")
    mount.sh("printf 'a0\\na1\\n' >> orders; printf 'b0\\n' >> partition=1/orders")
    mount.sh("printf 'c0\\nc1\\nc2\\n' >> partition=7/orders")
    mount.sh("echo other >> clicks")
    df = spark.read.option("basePath", str(mount.path)).text(f"{mount.path}/partition=*/orders")
    assert df.schema.simpleString() == "struct<value:string,partition:int>"
    got = sorted((r["partition"], r["value"]) for r in df.collect())
    assert got == [(0, "a0"), (0, "a1"), (1, "b0"), (7, "c0"), (7, "c1"), (7, "c2")]


def test_csv_and_json_topics(spark: SparkSession, mount: Mount) -> None:
    mount.sh("printf 'name,age\\nada,36\\nalan,41\\n' >> people")
    people = spark.read.option("header", True).option("inferSchema", True).csv(str(mount.path / "people"))
    assert people.schema.simpleString() == "struct<name:string,age:int>"
    assert sorted((r["name"], r["age"]) for r in people.collect()) == [("ada", 36), ("alan", 41)]

    events = [{"id": i, "kind": "click" if i % 2 else "view", "tags": ["x"] * (i % 3)} for i in range(50)]
    with open(mount.path / "events", "a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in events))
    df = spark.read.json(str(mount.path / "events"))
    assert df.schema.simpleString() == "struct<id:bigint,kind:string,tags:array<string>>"
    assert df.where("kind = 'click'").count() == 25
    assert sorted((r["id"], r["kind"], r["tags"]) for r in df.collect()) == [
        (e["id"], e["kind"], e["tags"]) for e in events
    ]


def test_a_topic_created_after_a_failed_lookup_is_found(spark: SparkSession, mount: Mount) -> None:
    # Spark's lookup of a missing path leaves a negative entry in the kernel's cache;
    # the topic's creation must override it.
    with pytest.raises(AnalysisException, match="PATH_NOT_FOUND"):
        spark.read.text(str(mount.path / "late")).collect()
    mount.sh("echo first >> late")
    assert lines(spark.read.text(str(mount.path / "late")).collect()) == ["first"]


GROWER = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
n = int(sys.argv[2])
for start in range(0, n, 500):
    chunk = range(start, min(start + 500, n))
    os.write(fd, b"".join(b"line %07d " % i + b"y" * (i % 97) + b"\n" for i in chunk))
    if start == 0:
        print("started", flush=True)
    time.sleep(0.02)  # keep growing for a few seconds, while Spark lists and reads
os.close(fd)
"""


@pytest.fixture
def small_splits(spark: SparkSession) -> Iterator[None]:
    # Many splits per file, so split ends fall inside lines while the file grows.
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(256 << 10))
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset("spark.sql.files.maxPartitionBytes")
        else:
            spark.conf.set("spark.sql.files.maxPartitionBytes", old)


def test_growing_topic_reads_a_prefix_of_whole_records(
    spark: SparkSession, mount: Mount, small_splits: None
) -> None:
    path = mount.path / "grow"
    mount.sh("echo 'line 0000000 ' > /dev/null")  # the mount is up and answering
    n_total = 60_000
    writer = subprocess.Popen(
        [sys.executable, "-c", GROWER, str(path), str(n_total)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        counts = []
        for _ in range(3):
            got = lines(spark.read.text(str(path)).collect())
            numbers = sorted(int(s[5:12]) for s in got)
            # Whole records only, each once, and no record missing below the highest seen.
            assert numbers == list(range(len(got)))
            for s in got:
                i = int(s[5:12])
                assert s == f"line {i:07d} " + "y" * (i % 97), s
            counts.append(len(got))
        assert writer.wait(timeout=120) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert counts == sorted(counts)
    assert spark.read.text(str(path)).count() == n_total


def test_format_walfs_reads_a_live_mounts_data_directory(spark: SparkSession, mount: Mount) -> None:
    # One write of 300 lines: the mount makes each line a record.
    mount.sh("seq 0 299 | sed 's/^/rec /' >> t; mkdir partition=2; echo p2 >> partition=2/t")
    df = spark.read.format("walfs").option("topic", "t").load(str(mount.data))
    got = sorted((r["partition"], r["offset"], bytes(r["value"]).decode(), r["key"]) for r in df.collect())
    assert got == [(0, i, f"rec {i}", None) for i in range(300)] + [(2, 0, "p2", None)]
    # The same records as the file view shows them.
    text = sorted(lines(spark.read.text(str(mount.path / "t")).collect()))
    assert text == sorted(v for p, _, v, _ in got if p == 0)
    # More appends through the mount: a new read sees them (a new read-only open).
    mount.sh("echo 'rec 300' >> t")
    assert (
        spark.read.format("walfs").option("topic", "t").load(str(mount.data)).where("partition = 0").count()
        == 301
    )


def test_no_stale_size_after_growth(spark: SparkSession, mount: Mount) -> None:
    # Spark takes a file's length from its listing; after an append, a new read must
    # list the new length rather than a size cached in the kernel.
    f = Path(mount.path / "sz")
    mount.sh("echo one >> sz")
    assert spark.read.text(str(f)).count() == 1
    mount.sh("echo two >> sz; echo three >> sz")
    assert sorted(lines(spark.read.text(str(f)).collect())) == ["one", "three", "two"]
