"""examples/run.sh, the example pipeline, run as a user runs it: echo >> into a real
mount, a Structured Streaming aggregation from topic "orders" into topic "totals"
through the mount's Kafka listener, results seen by tail -F and by kcat."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from spark_fixtures import SUBMIT_ARGS

import walfs

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Spark gives a Python worker 10 s (hard-coded) to start; on a loaded machine a query can
# fail that way before it runs anything. The example then runs again from scratch.
SPARK_STARTUP_FLAKE = "Python worker failed to connect back"


def test_example_pipeline(tmp_path: Path) -> None:
    for attempt in range(3):
        data, mnt = tmp_path / f"data{attempt}", tmp_path / f"mnt{attempt}"
        env = dict(
            os.environ,
            PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            PYSPARK_SUBMIT_ARGS=SUBMIT_ARGS,
        )
        res = subprocess.run(
            ["bash", str(REPO / "examples" / "run.sh"), str(data), str(mnt), str(free_port())],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=tmp_path,
        )
        if res.returncode == 0 or SPARK_STARTUP_FLAKE not in res.stdout + res.stderr:
            break
    out = res.stdout
    assert res.returncode == 0, (out + res.stderr)[-4000:]

    def totals(prefix: str) -> dict[str, int]:
        """Sum of the windows' counts per status, as a reader saw them. The 20 orders
        may straddle a window boundary; order 21 (appended 6 s later) only closes them."""
        sums: dict[str, int] = {}
        for line in out.splitlines():
            if line.startswith(prefix):
                _, status, count = line.removeprefix(prefix).rsplit(" ", 2)
                sums[status] = sums.get(status, 0) + int(count)
        return sums

    assert totals("kcat: ") == {"paid": 15, "refunded": 5}, out
    assert totals("tail: ") == {"paid": 15, "refunded": 5}, out
    # The mount is gone (the script unmounts on exit) and the results are durable.
    with walfs.Wal(data, read_only=True) as wal:
        records = wal.read_records("totals", 0)
        assert sorted({r.key for r in records}) == [b"paid", b"refunded"]
        assert sum(int(r.value.split()[-1]) for r in records) == 20
