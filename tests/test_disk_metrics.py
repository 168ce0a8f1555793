"""The disk as etcd's WAL metrics name it (issue 33): walfs_disk_wal_fsync_duration_seconds
(a histogram of the C core's sync rounds, timed where the fdatasyncs run, csrc/sync.c)
and walfs_disk_wal_write_bytes_total, scraped over HTTP from a real mount and a real
`walfs serve`."""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka import Producer
from conftest import SMALL
from conftest_mount import Mount
from kafka_harness import SMALL_WAL_ARGS, ServeProcess
from test_metrics import free_port, scrape, value

import walfs
from walfs import debug

pytest_plugins = ["conftest_mount"]

FSYNC = "walfs_disk_wal_fsync_duration_seconds"
WRITE_BYTES = "walfs_disk_wal_write_bytes_total"


def fsync_figures(text: str) -> tuple[float, float, float]:
    """(count, sum, write bytes) of one scrape; the histogram's +Inf bucket is its count."""
    count = value(text, f"{FSYNC}_count")
    assert value(text, f"{FSYNC}_bucket", le="+Inf") == count
    return count, value(text, f"{FSYNC}_sum"), value(text, WRITE_BYTES)


def test_mount_fsync_histogram_moves_under_fsynced_appends(make_mount) -> None:
    """Under --fsync always each `echo >>` waits for its own sync round: the histogram
    counts at least one round per line, its sum grows, it counts exactly the rounds
    walfs_fsync_rounds_total counts, and the write bytes grow by at least the bytes
    appended. Then fsync() calls under --fsync interval are rounds too."""
    port = free_port()
    m: Mount = make_mount()
    m.start("--fsync", "always", "--metrics-listen", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        m.sh("echo first >> t")  # t exists: the lines below are plain appends
        count0, sum0, bytes0 = fsync_figures(scrape(url))
        assert count0 >= 1
        n = 20
        lines = [f"line {i} of the fsync histogram test" for i in range(n)]
        m.sh("; ".join(f"echo '{line}' >> t" for line in lines))
        after = scrape(url)
        count1, sum1, bytes1 = fsync_figures(after)
        assert count1 - count0 >= n
        assert sum1 > sum0
        assert count1 == value(after, "walfs_fsync_rounds_total")
        assert bytes1 - bytes0 >= sum(len(line) + 1 for line in lines)
        assert m.out("wc -l < t").strip() == str(n + 1)
    finally:
        m.stop()

    m.start("--fsync", "interval", "--fsync-interval-ms", "600000", "--metrics-listen", f"127.0.0.1:{port}")
    try:
        count0, sum0, bytes0 = fsync_figures(scrape(url))
        for i in range(5):
            with open(m.path / "t", "ab") as f:
                f.write(b"synced by the writer %d\n" % i)
                f.flush()
                os.fsync(f.fileno())
        count1, sum1, bytes1 = fsync_figures(scrape(url))
        assert count1 - count0 >= 5
        assert sum1 > sum0
        assert bytes1 - bytes0 >= 5 * len(b"synced by the writer 0\n")
    finally:
        m.stop()


def test_a_slow_round_lands_in_a_slow_bucket(tmp_path: Path) -> None:
    """The time is taken around the disk's work: a round the core makes sleep 300 ms first
    (walfs_debug_slow_sync, a slow disk) is counted above 0.256 s, and the sum grows by at
    least that much."""
    w = walfs.Wal(str(tmp_path / "d"), fsync="always", test_mode=True, **SMALL)
    try:
        w.append("t", b"x")
        before = debug.local_engine(w).disk_stats()
        debug.slow_sync(w, 300)
        w.append("t", b"y")
        after = debug.local_engine(w).disk_stats()
    finally:
        w.close()
    bounds = after["fsync_bounds"]
    assert bounds[3:] == [0.001 * 2**k for k in range(14)]  # etcd's: 1 ms .. 8.192 s
    grew = [a - b for a, b in zip(after["fsync_counts"], before["fsync_counts"], strict=True)]
    assert sum(grew) == 1
    slow = bounds.index(0.512)  # the bucket (0.256 s, 0.512 s] and above
    assert sum(grew[slow:]) == 1
    assert after["fsync_sum"] - before["fsync_sum"] >= 0.3


def test_serve_exposes_the_disk_metrics(tmp_path: Path) -> None:
    port = free_port()
    srv = ServeProcess(tmp_path / "d", *SMALL_WAL_ARGS, "--metrics-listen", f"127.0.0.1:{port}")
    try:
        p = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all"})
        for i in range(10):
            p.produce("k", b"value %d" % i)
        assert p.flush(30) == 0
        count, total, nbytes = fsync_figures(scrape(f"http://127.0.0.1:{port}/metrics"))
        assert count >= 1  # acks=all waited for a sync round
        assert total > 0
        assert nbytes >= 10 * len(b"value 0")
    finally:
        srv.stop()
