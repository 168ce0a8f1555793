"""Spark writes by path into a WAL that a running mount owns (no flag at mount time):
`option("path", DATA_DIR)` and `option("path", MOUNTPOINT)` go through the daemon's
local socket (walfs.common.local_socket), batch and streaming (exactly once across a SIGKILLed
and restarted driver), and `cat` on the mount shows the rows. Also the socket itself:
a mount point's org, a stale socket left by a killed daemon, a private data directory,
a data directory whose path does not fit sun_path."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from conftest_mount import Mount, wait_until
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from test_spark_sink_stream import PARTITIONS, PER_PARTITION, driver_killed_then_restarted

import walfs
from walfs.common import local_socket
from walfs.spark.options import parse_sink_options
from walfs.spark.schema import HEADER_TYPE
from walfs.spark.sink_rows import encode_chunk
from walfs.spark.sink_target import LocalTarget, open_target

pytest_plugins = ["conftest_mount", "spark_fixtures"]


def values_df(spark: SparkSession, prefix: str, n: int = 50):  # type: ignore[no-untyped-def]
    return spark.range(0, n, numPartitions=2).select(F.format_string(f"{prefix} %d", "id").alias("value"))


def by_number(lines: list[str]) -> list[str]:
    return sorted(lines, key=lambda v: int(v.split()[1]))


def test_batch_write_by_data_dir_and_by_mount_point(spark: SparkSession, mount: Mount) -> None:
    # A mount as `make install` starts it: no --kafka-listen. Two tasks per write: their
    # rows follow each other in the order the tasks append.
    assert (mount.data / local_socket.SOCKET_NAME).exists()
    by_dir = [f"a {i}" for i in range(50)]
    values_df(spark, "a").write.format("walfs").mode("append").option("path", str(mount.data)).option(
        "topic", "totals"
    ).save()
    assert by_number(mount.out("cat totals").splitlines()) == by_dir
    by_mount = [f"b {i}" for i in range(50)]
    values_df(spark, "b").write.format("walfs").mode("append").option("topic", "totals").save(str(mount.path))
    lines = mount.out("cat totals").splitlines()
    assert len(lines) == 100
    assert by_number(lines[:50]) == by_dir and by_number(lines[50:]) == by_mount
    # The source reads by the mount point too (its data directory, read-only).
    rows = spark.read.format("walfs").option("topic", "totals").load(str(mount.path)).orderBy("offset")
    assert [bytes(r["value"]).decode() for r in rows.collect()] == lines


def test_streaming_write_by_path_into_a_mounted_wal(mount: Mount, tmp_path: Path) -> None:
    """The driver is SIGKILLed mid-stream and restarted from its checkpoint; the query
    reads and writes by the mount point: every row once, in order per partition."""

    def fill(inputs: dict[int, list[str]]) -> None:
        for p, values in inputs.items():
            name = "in" if p == 0 else f"partition={p}/in"
            if p:
                mount.sh(f"mkdir -p partition={p}")
            with open(mount.path / name, "a") as f:
                f.write("".join(v + "\n" for v in values))

    (tmp_path / "spark").mkdir()
    driver_killed_then_restarted(mount.data, tmp_path / "spark", where=str(mount.path), fill=fill)
    for p in range(PARTITIONS):
        name = "out" if p == 0 else f"partition={p}/out"
        assert mount.out(f"cat {name}").splitlines() == [f"ORDER {p}-{i} PAID" for i in range(PER_PARTITION)]


def rows(values: list[str]) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": pa.nulls(n, pa.binary()),
            "value": pa.array([v.encode() for v in values], pa.binary()),
            "headers": pa.array([[]] * n, pa.list_(HEADER_TYPE)),
        }
    )


def append_by_path(path: Path | str, topic: str, values: list[str], **options: str) -> str:
    """Appends `values` to `topic` as the sink does with option("path", path) (its
    target, without Spark); the kind of target it used."""
    target = open_target(parse_sink_options({"path": str(path), **options}), lock_wait_s=0)
    try:
        target.ensure(topic, 1)
        target.append(topic, 0, [encode_chunk(rows(values))])
        return type(target).__name__
    finally:
        target.close()


def test_the_socket_serves_the_org_path_access_would(make_mount: object) -> None:
    assert callable(make_mount)
    m: Mount = make_mount()
    m.start("--org-id", "3")
    # The mount point stands for the mount's org; the data directory for org 1 unless
    # org_id says otherwise: as opening the directory itself would.
    assert append_by_path(m.path, "t", ["by mount"]) == "RemoteTarget"
    append_by_path(m.data, "t", ["by dir, org 3"], org_id="3")
    append_by_path(m.data, "t", ["by dir, org 1"])
    assert m.out("cat t").splitlines() == ["by mount", "by dir, org 3"]
    m.stop()
    with walfs.Wal(m.data, read_only=True, org_id=1) as wal:
        assert wal.read("t", 0) == [b"by dir, org 1"]
    with walfs.Wal(m.data, read_only=True, org_id=3) as wal:
        assert wal.read("t", 0) == [b"by mount", b"by dir, org 3"]


def test_a_stale_socket_from_a_killed_daemon(make_mount: object) -> None:
    assert callable(make_mount)
    m: Mount = make_mount()
    m.start()
    sock = Path(m.data) / local_socket.SOCKET_NAME
    m.kill()
    # Left behind, with nobody listening: the directory is free, written directly...
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    # (Its last descriptor closes when the killed daemon's last thread is gone.)
    wait_until(lambda: not local_socket.served(str(m.data)), what="nobody listening")
    assert append_by_path(m.data, "t", ["while down"]) == LocalTarget.__name__
    # ...and the next mount replaces it.
    m.start()
    assert local_socket.served(str(m.data))
    assert append_by_path(m.path, "t", ["after"]) == "RemoteTarget"
    assert m.out("cat t").splitlines() == ["while down", "after"]
    # A clean stop removes it.
    m.stop()
    assert not sock.exists()


def test_a_mount_with_a_kafka_listener_serves_the_socket_too(make_mount: object) -> None:
    assert callable(make_mount)
    m: Mount = make_mount()
    m.start("--kafka-listen", "127.0.0.1:0")
    assert append_by_path(m.path, "t", ["by path"]) == "RemoteTarget"
    assert m.out("cat t") == "by path\n"
    m.stop()
    assert not (Path(m.data) / local_socket.SOCKET_NAME).exists()


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory any user may traverse (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="walfs-sock-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


NOBODY = 65534
CONNECT = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('connected')"


def connect_as_nobody(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/usr/bin/python3", "-c", CONNECT, str(path)],
        user=NOBODY,
        group=NOBODY,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a client as another user (needs root)")
def test_the_socket_admits_who_may_write_the_data_dir(open_base: Path) -> None:
    m = Mount(open_base)
    data = Path(m.data)
    data.mkdir(mode=0o755)
    data.chmod(0o755)  # others may look in, not write: the socket is the owner's
    try:
        m.start()
        sock = data / local_socket.SOCKET_NAME
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        res = connect_as_nobody(sock)
        assert res.returncode != 0 and "Permission denied" in res.stderr, res
        m.stop()
        data.chmod(0o777)  # anyone may write the directory: anyone may write through the daemon
        m.start()
        assert stat.S_IMODE(sock.stat().st_mode) == 0o666
        res = connect_as_nobody(sock)
        assert res.returncode == 0 and "connected" in res.stdout, res
        m.stop()
    finally:
        m.cleanup()


def test_a_data_dir_path_longer_than_sun_path(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(os.fsencode(deep / local_socket.SOCKET_NAME)) > local_socket.SUN_PATH_MAX
    m = Mount(tmp_path, target=str(deep))
    try:
        m.start()
        assert local_socket.served(str(deep))
        assert append_by_path(deep, "t", ["deep"]) == "RemoteTarget"
        assert append_by_path(m.path, "t", ["by mount"]) == "RemoteTarget"
        assert m.out("cat t").splitlines() == ["deep", "by mount"]
        m.stop()
        assert not (deep / local_socket.SOCKET_NAME).exists()
    finally:
        m.cleanup()
