"""Batch writes on real Spark where a task fails after appending its rows (the sink's
fault point, option walfs.test.failAfterAppend), the way a task killed after its
append, before Spark recorded it, would: Spark retries it (local[2,2], in a Spark
program of its own: tests/spark_sink_retry_job.py), and the retry finds its rows by
their marker and does not append them again. Through the data directory and through a
daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_harness import ServeProcess
from spark_fixtures import SUBMIT_ARGS

import walfs
from walfs.spark.sink import MARKER

HERE = Path(__file__).resolve().parent
ROWS, PARTITIONS = 40, 4  # as in spark_sink_retry_job.py: partition i = rows 10i..10i+9
TASK = {p: [str(i) for i in range(10 * p, 10 * p + 10)] for p in range(PARTITIONS)}


def run_jobs(jobs: list[dict]) -> list[str | None]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "spark_sink_retry_job.py"), json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=HERE,
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS, "PYTHONPATH": str(HERE)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tasks_in(values: list[str]) -> list[int]:
    """The task (Spark partition) of each run of rows, checking that every task's rows
    are there whole, together and in order, once."""
    runs: list[int] = []
    i = 0
    while i < len(values):
        p = int(values[i]) // 10
        assert values[i : i + 10] == TASK[p], values
        runs.append(p)
        i += 10
    assert len(set(runs)) == len(runs), values
    return runs


@pytest.mark.parametrize("remote", [False, True], ids=["path", "daemon"])
def test_task_retried_after_appending_appends_once(tmp_path: Path, remote: bool) -> None:
    data = tmp_path / "data"
    serve = ServeProcess(data) if remote else None
    where = {"bootstrap": serve.bootstrap} if serve else {"path": str(data)}
    try:
        results = run_jobs(
            [
                # Task 1's first attempt fails after appending; its retry succeeds.
                {"topic": "once", "options": {**where, "walfs.test.failAfterAppend": "1:1"}},
                # Task 1 fails after appending in every attempt: the job fails for good.
                {"topic": "never", "options": {**where, "walfs.test.failAfterAppend": "1:9"}},
            ]
        )
    finally:
        if serve is not None:
            rc, err = serve.stop()
            assert rc == 0, err
    assert results[0] is None
    assert results[1] is not None and "walfs.test.failAfterAppend: partition 1, attempt 1" in results[1]
    with walfs.Wal(data, read_only=True) as wal:
        once = wal.read_records("once", 0, 0, 10_000)
        never = wal.read_records("never", 0, 0, 10_000)
    # The job that succeeded: every row once, each task's rows together, although task
    # 1 appended twice over (its retry found the first attempt's chunk by its marker).
    assert sorted(tasks_in([r.value.decode() for r in once])) == [0, 1, 2, 3]
    marks = [v.decode() for r in once for k, v in r.headers if k == MARKER]
    task1 = [m for m in marks if m.split(":")[1] == "1"]
    assert len(task1) == 1 and task1[0].endswith(":1:0:10")
    # The job that failed: what it leaves is the rows of the tasks that appended, each
    # whole and once; task 1 appended (then failed) in both attempts: its rows once.
    left = tasks_in([r.value.decode() for r in never])
    assert 1 in left
