"""Spark and retention (issue 10): offsets that a retention pass removed (trimmed, and
their segment files reclaimed) fail a read with failOnDataLoss=true, with an error that
names the option, and are skipped with failOnDataLoss=false, which goes on from the first
stored record. Both for a streaming query resuming from its checkpoint and for a batch
read asking for explicit offsets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from spark_rows import offsets_of
from test_spark_stream import sink_rows, stream, to_files

import walfs

pytest_plugins = ["spark_fixtures"]

# Small segments and blocks, so that the pass below deletes whole segment files.
SMALL = {"segment_size": 132 << 10, "block_size": 16 << 10}  # 8 blocks a segment
# retention_bytes under one segment: a pass keeps the records in the file being filled
# (walfs.engine.settings.file_budget), about 120 of the records below.
LIMIT = 100_000


def record(i: int) -> bytes:
    return b"%06d " % i + b"v" * 993  # 1000 bytes, 1001 in the byte view


def segment_files(data: Path) -> set[str]:
    return {f for f in os.listdir(data) if f.startswith("seg-")} if data.exists() else set()


def append_and_apply_retention(data: Path, start: int, end: int) -> int:
    """Appends records start..end-1 to "s" under a size limit, then runs one retention
    pass and reclamation (what the daemons run in the background); returns the new low
    watermark. Checks that segment files went."""
    before = segment_files(data)
    with walfs.Wal(data, retention_bytes=LIMIT, reclaim_interval_s=3600, **SMALL) as wal:
        for k in range(start, end, 50):
            wal.append("s", [record(i) for i in range(k, min(k + 50, end))])
        wal.sync()  # full runs get their seals once durable: then reclamation may take them
        grown = segment_files(data)
        wal.engine.apply_retention()
        wal.engine.reclaim()  # (the background pass, woken by the growth, may have done it first)
        low = wal.info("s").low_watermark
    assert not (before | grown) <= segment_files(data)  # files holding the old records are gone
    return low


def test_stream_resuming_past_retention_fails_or_skips_as_told(spark: SparkSession, tmp_path: Path) -> None:
    data, sink, ckpt = tmp_path / "data", tmp_path / "sink", tmp_path / "ckpt"
    with walfs.Wal(data, **SMALL) as wal:
        wal.append("s", [record(i) for i in range(100)])

    def run(**options: str) -> BaseException | None:
        df = stream(spark, data, topic="s", startingOffsets="earliest", **options)
        q = to_files(df, sink, ckpt).trigger(availableNow=True).start()  # type: ignore[attr-defined]
        try:
            q.awaitTermination(180)
        except Exception as e:  # the query's failure (StreamingQueryException)
            return e
        assert not q.isActive, "the query did not end"
        return q.exception()

    assert run() is None  # the checkpoint now says: next is offset 100
    assert [r[2] for r in sink_rows(spark, sink)] == list(range(100))

    low = append_and_apply_retention(data, 100, 600)
    assert 100 < low < 600

    err = run()
    assert err is not None
    assert "failOnDataLoss" in str(err) and f"offsets 100..{low - 1} were trimmed" in str(err)
    assert len(sink_rows(spark, sink)) == 100  # nothing was written by the failed run

    assert run(failOnDataLoss="false") is None
    rows = sink_rows(spark, sink)
    assert [r[2] for r in rows] == list(range(100)) + list(range(low, 600))
    assert [r[3] for r in rows[100:]] == [record(i).decode() for i in range(low, 600)]  # values unchanged


def test_batch_read_of_offsets_retention_removed_fails_or_skips_as_told(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    low = append_and_apply_retention(data, 0, 500)
    assert 0 < low < 500
    reader = spark.read.format("walfs").option("topic", "s").option("startingOffsets", '{"s": {"0": 10}}')
    with pytest.raises(PySparkException, match=f"offsets 10..{low - 1} were trimmed.*failOnDataLoss"):
        reader.load(str(data)).count()
    df = reader.option("failOnDataLoss", "false").load(str(data))
    assert offsets_of(df, "s") == list(range(low, 500))
