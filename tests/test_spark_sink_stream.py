"""writeStream.format("walfs") end to end on real Spark: a streaming query from topic
"in" to topic "out" whose driver is SIGKILLed while it runs, then restarted from its
checkpoint: every input record is in "out" exactly once (checked by content)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import walfs

HERE = Path(__file__).resolve().parent
PARTITIONS = 2
PER_PARTITION = 300


def out_values(data: Path | str) -> list[str]:
    with walfs.Wal(data, read_only=True) as wal:
        return (
            [r.value.decode() for _, p in wal.streams("out") for r in wal.read_records("out", 0, p, 100_000)]
            if "out" in wal.topics()
            else []
        )


def pipeline(data: Path | str, ckpt: Path, trigger: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "spark_pipeline.py"),
            "--master",
            "local[2]",
            "--source",
            f"path={data}",
            "--sink",
            f"path={data}",
            "--checkpoint",
            str(ckpt),
            "--trigger",
            trigger,
            "--max-offsets",
            "40",
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the JVM and Spark's Python workers die with it (killpg)
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


# Spark gives a Python worker 10 s (hard-coded) to start and connect back; on a loaded
# machine a driver can fail that way before it runs anything. Such a driver is started
# again from its checkpoint (which is what this test is about); any other failure fails.
SPARK_STARTUP_FLAKE = "Python worker failed to connect back"
RESTARTS = 3


def new_output(log: Path, since: int) -> str:
    return log.read_bytes()[since:].decode(errors="replace")


def test_driver_killed_mid_stream_then_restarted_writes_every_row_once(tmp_path: Path) -> None:
    driver_killed_then_restarted(tmp_path / "data", tmp_path)


def driver_killed_then_restarted(
    data: Path | str,
    tmp_path: Path,
    where: str | None = None,
    fill: Callable[[dict[int, list[str]]], None] | None = None,
) -> None:
    """The test above on any target: a data directory or a kafka:// namespace
    (tests/test_spark_on_kafka.py). `where`: the path the query reads and writes
    (default `data`: a mount point, tests/test_spark_sink_mounted.py); `fill` appends
    the input (partition -> values; default: a Wal on `data`)."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "driver.log"
    inputs = {p: [f"order {p}-{i} paid" for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    if fill is None:
        with walfs.Wal(data) as wal:
            for p, values in inputs.items():
                wal.append("in", [v.encode() for v in values], p)
    else:
        fill(inputs)
    expected = [v.upper() for values in inputs.values() for v in values]
    where = str(data) if where is None else where
    log.touch()
    since, restarts = 0, 0
    first = pipeline(where, ckpt, "processing", log)
    try:
        # Killed once a few micro-batches (40 records each) are in "out": the kill lands
        # wherever the query is, quite likely inside a batch (tasks or commit).
        deadline = time.monotonic() + 900
        while len(out_values(data)) < 120:
            if first.poll() is not None:
                text = new_output(log, since)
                assert SPARK_STARTUP_FLAKE in text and restarts < RESTARTS, text[-4000:]
                restarts += 1
                since = log.stat().st_size
                first = pipeline(where, ckpt, "processing", log)
            assert time.monotonic() < deadline, "no progress: " + new_output(log, since)[-4000:]
            time.sleep(0.2)
    finally:
        kill_group(first)
    partial = out_values(data)
    assert 0 < len(partial) < len(expected)
    # Restarted from its checkpoint, it finishes what is there (Trigger.AvailableNow).
    for _ in range(RESTARTS + 1):
        since = log.stat().st_size
        second = pipeline(where, ckpt, "available-now", log)
        try:
            rc = second.wait(timeout=900)
        finally:
            kill_group(second)
        if rc == 0:
            break
        text = new_output(log, since)
        assert SPARK_STARTUP_FLAKE in text, text[-4000:]
    assert rc == 0, new_output(log, since)[-4000:]
    got = out_values(data)
    dup = [v for v, n in collections.Counter(got).items() if n > 1]
    assert not dup, f"written twice: {dup[:5]}"
    assert sorted(got) == sorted(expected)
    # Order within a partition is kept: "out" partition p holds "in" partition p in order.
    with walfs.Wal(data, read_only=True) as wal:
        for p in range(PARTITIONS):
            vals = [r.value.decode() for r in wal.read_records("out", 0, p, 100_000)]
            assert vals == [f"ORDER {p}-{i} PAID" for i in range(PER_PARTITION)]
