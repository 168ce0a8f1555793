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
from walfs.local import debug

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


# -- the mount root's user.walfs.metrics xattr -----------------------------------------------
XATTR_MAX = 65536  # Linux's XATTR_SIZE_MAX: no xattr value is longer


def test_metrics_xattr_works_on_the_first_call_of_a_fresh_mount(make_mount) -> None:
    """getfattr asks the size, then reads: the text rendered for the size query is what
    the read gets (it used to grow in between: `Numerical result out of range`)."""
    for i in range(3):
        m: Mount = make_mount(f"m{i}")
        m.start()
        try:
            res = m.sh("getfattr --only-values -n user.walfs.metrics .", check=False)
            assert res.returncode == 0, res.stderr
            text = res.stdout.decode()
            assert value(text, "walfs_fuse_request_seconds_count", op="getxattr") >= 1
            # The next run renders afresh: it counts the calls of the first one.
            again = m.out("getfattr --only-values -n user.walfs.metrics .")
            assert value(again, "walfs_fuse_request_seconds_count", op="getxattr") > value(
                text, "walfs_fuse_request_seconds_count", op="getxattr"
            )
        finally:
            m.stop()


def test_metrics_xattr_stays_bounded_with_600_topics(make_mount) -> None:
    """600 topics: the xattr sums the per-topic series (it
    used to carry them all and fail with `Argument list too long` past 64 KiB), the
    endpoint keeps every one, and `getfattr -d` of the root does not dump the metrics."""
    port = free_port()
    m: Mount = make_mount()
    m.options = ("--segment-size", "4M", "--block-size", "64K")
    m.start("--metrics-listen", f"127.0.0.1:{port}")
    try:
        n = 600
        m.sh(f"for i in $(seq {n}); do echo line >> topic-$i; done")
        res = m.sh("getfattr --only-values -n user.walfs.metrics .", check=False)
        assert res.returncode == 0, res.stderr
        text = res.stdout.decode()
        full = scrape(f"http://127.0.0.1:{port}/metrics")
        assert len(res.stdout) < XATTR_MAX // 4
        assert value(text, "walfs_appends_total") == n
        per_topic = [float(line.rsplit(" ", 1)[1]) for line in full.splitlines()
                     if line.startswith("walfs_append_bytes_total{")]
        assert len(per_topic) == n
        assert value(text, "walfs_append_bytes_total") == sum(per_topic)
        assert "topic-" not in text
        assert "_bucket" not in text
        assert len(full) > XATTR_MAX
        assert value(full, "walfs_appends_total", topic=f"topic-{n}", partition="0") == 1
        dump = m.sh("getfattr -d .").stdout
        assert len(dump) < 2048, dump
        assert b"user.walfs.data_dir" in dump and b"user.walfs.metrics=" not in dump
    finally:
        m.stop()
