"""A Spark standalone cluster on this machine (a master and two worker JVMs, started with
pyspark's own spark-class, on local ports) reads and writes walfs through a `walfs
serve` daemon's Kafka listener: the job is given the listener's address only, never the
data directory, so executors that could run on any machine do the work."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from kafka_harness import ServeProcess

import walfs
from walfs.spark.remote import RemoteWal

HERE = Path(__file__).resolve().parent
SPARK_HOME = Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_class(cls: str, *args: str, log: Path, work: Path) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_WORKER_DIR=str(work),
        PYSPARK_PYTHON=sys.executable,
    )
    return subprocess.Popen(
        [str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """spark://127.0.0.1:PORT of a master with two one-core workers."""
    port = free_port()
    log = tmp_path / "cluster.log"
    procs = [
        spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
            log=log,
            work=tmp_path,
        )
    ]
    url = f"spark://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                assert procs[0].poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "master did not start: " + log.read_text()[-3000:]
                time.sleep(0.5)
        for i in range(2):
            work = tmp_path / f"worker{i}"
            work.mkdir()
            procs.append(
                spark_class(
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    str(free_port()),
                    "--cores",
                    "1",
                    "--memory",
                    "768m",
                    "--work-dir",
                    str(work),
                    log=log,
                    work=work,
                )
            )
        yield url
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait(timeout=60)


# Spark gives a Python worker 10 s (hard-coded) to start and connect back; on a loaded
# machine a job can fail that way. It is run again: a failed batch job left nothing (the
# sink appends only in the driver's commit, checked below), a streaming query resumes
# from its checkpoint. Any other failure fails the test.
SPARK_STARTUP_FLAKE = "Python worker failed to connect back"


def run_job(master: str, bootstrap: str, trigger: str, ckpt: Path, log: Path) -> str:
    for _ in range(3):
        res = subprocess.run(
            [
                sys.executable,
                str(HERE / "spark_pipeline.py"),
                "--master",
                master,
                "--workers",
                "2",
                "--source",
                f"bootstrap={bootstrap}",
                "--sink",
                f"bootstrap={bootstrap}",
                "--checkpoint",
                str(ckpt),
                "--trigger",
                trigger,
                "--max-offsets",
                "150",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=ckpt.parent,
        )
        with log.open("a") as f:
            f.write(res.stdout + res.stderr)
        if res.returncode == 0 or SPARK_STARTUP_FLAKE not in res.stdout + res.stderr:
            break
        if trigger == "batch":
            with RemoteWal(bootstrap) as remote:
                assert "out" not in remote.topics(), "a failed batch job left records"
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return res.stdout


def test_standalone_cluster_reads_and_writes_through_bootstrap(cluster: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    expected: dict[int, list[str]] = {}
    with walfs.Wal(data) as wal:
        for p in range(2):
            values = [f"order {p}-{i} paid" for i in range(200)]
            wal.append("in", [v.encode() for v in values], p)
            expected[p] = [v.upper() for v in values]
    serve = ServeProcess(data)
    try:
        # A batch job, then a streaming query (Trigger.AvailableNow, 150 records per
        # micro-batch, exactly-once through the daemon) appending the same rows again.
        out = run_job(cluster, serve.bootstrap, "batch", tmp_path / "ckpt", tmp_path / "job.log")
        assert "executors 2" in out and "done batch" in out
        out = run_job(cluster, serve.bootstrap, "available-now", tmp_path / "ckpt", tmp_path / "job.log")
        assert "executors 2" in out and "done available-now" in out
    finally:
        rc, err = serve.stop()
    assert rc == 0, err
    with walfs.Wal(data, read_only=True) as wal:
        for p in range(2):
            got = [r.value.decode() for r in wal.read_records("out", 0, p, 10_000)]
            assert got == expected[p] + expected[p]
