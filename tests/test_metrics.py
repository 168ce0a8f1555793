"""The Prometheus endpoint (issue 13): scraped with a real HTTP client, its counters move
with appends, FUSE requests, Kafka requests and consumer commits; the mount root's
user.walfs.metrics xattr carries a summary of the same text (per-topic series summed)."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from conftest_mount import Mount
from kafka_harness import SMALL_WAL_ARGS, ServeProcess

from walfs.common.metrics import BUCKETS, Latency, LoopLatency

pytest_plugins = ["conftest_mount"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def value(text: str, name: str, **labels: str) -> float:
    """The sample `name` whose labels include `labels` (label order does not matter)."""
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    raise AssertionError(f"{name}{labels} not in the scrape")


def xattr_durable(m: Mount) -> str:
    return m.out("getfattr --only-values -n user.walfs.durable_watermark t")


def test_mount_metrics_move_and_match_the_root_xattr(make_mount) -> None:
    port = free_port()
    m: Mount = make_mount()
    m.start("--metrics-listen", f"127.0.0.1:{port}")
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        m.sh("echo a >> t")
        before = scrape(url)
        assert value(before, "walfs_appends_total", topic="t", partition="0") == 1
        writes = value(before, "walfs_fuse_request_seconds_count", op="write")
        m.sh("printf 'b\\nc\\n' >> t; mkdir .consumers/g; cat .consumers/g/t > /dev/null")
        after = scrape(url)
        assert value(after, "walfs_appends_total", topic="t", partition="0") == 3
        assert value(after, "walfs_append_bytes_total", topic="t", partition="0") >= 6
        assert value(after, "walfs_fuse_request_seconds_count", op="write") > writes
        assert value(after, "walfs_consumer_lag", group="g", topic="t", partition="0") == 0
        assert value(after, "walfs_fsync_rounds_total") >= 1
        assert value(after, "walfs_disk_free_bytes") > 0
        assert value(after, "walfs_segment_files") >= 1
        m.sh("echo d >> t")
        assert value(scrape(url), "walfs_consumer_lag", group="g", topic="t", partition="0") == 1
        text = m.out("getfattr --only-values -n user.walfs.metrics .")
        assert value(text, "walfs_appends_total") == 4  # summed over topics (one here)
        # The durable watermark follows the interval syncer (100 ms here): it reaches 4.
        deadline = time.monotonic() + 30
        while xattr_durable(m) != "4" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert xattr_durable(m) == "4"
    finally:
        m.stop()


def test_serve_metrics_count_kafka_requests(tmp_path: Path) -> None:
    port = free_port()
    srv = ServeProcess(tmp_path / "d", *SMALL_WAL_ARGS, "--metrics-listen", f"127.0.0.1:{port}")
    try:
        p = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all"})
        for i in range(10):
            p.produce("k", b"v%d" % i)
        assert p.flush(30) == 0
        text = scrape(f"http://127.0.0.1:{port}/metrics")
        assert value(text, "walfs_kafka_request_seconds_count", api="Produce") >= 1
        assert value(text, "walfs_kafka_request_seconds_count", api="Metadata") >= 1
        assert value(text, "walfs_appends_total", topic="k", partition="0") == 10
        assert value(text, "walfs_fsync_rounds_total") >= 1  # acks=all waited for durability
    finally:
        srv.stop()


def test_every_fuse_request_is_timed_and_refusals_count_as_errors(mount: Mount) -> None:
    """Every handler goes through one wrapper (walfs/fuse/requests.py) that guards and
    times it: also the calls an append-only tree refuses (rename, rmdir, link), which the
    old per-op list did not time, and their refusals count as errors."""
    mount.sh("echo a >> t")
    for script in ("mv t u", "rmdir partition=0", "ln t t2"):
        assert mount.sh(script, check=False).returncode != 0
    text = mount.out("getfattr --only-values -n user.walfs.metrics .")
    for op in ("rename", "rmdir", "link"):
        assert value(text, "walfs_fuse_request_seconds_count", op=op) >= 1
        assert value(text, "walfs_fuse_request_errors_total", op=op) >= 1
    assert value(text, "walfs_fuse_request_errors_total", op="write") == 0


def test_loop_latency_counts_what_latency_counts() -> None:
    """The mount's lock-free histogram (LoopLatency) and the locked one (Latency) give
    the same snapshot for the same requests, errors included."""
    locked, loop = Latency(), LoopLatency()
    for i, seconds in enumerate((3e-5, 5e-5, 7e-4, 0.003, 0.3, 4.0, 99.0, 1e-4, 2e-6)):
        for hist in (locked, loop):
            hist.observe("write" if i % 3 else "open", seconds, error=i == 4)
    assert sorted(loop.snapshot()) == sorted(locked.snapshot())
    # The request wrapper's inline update of a slot shows in the next snapshot.
    slot = loop.slot("write")
    slot[0] += 1
    slot[LoopLatency.SUM] += 1e-5
    counts = dict((k, c) for k, c, _s, _e in loop.snapshot())["write"]
    assert counts[0] == dict((k, c) for k, c, _s, _e in locked.snapshot())["write"][0] + 1
    assert len(counts) == len(BUCKETS) + 1


def test_each_echo_is_counted_request_by_request(mount: Mount) -> None:
    """Each `echo line >> t` is open, write, two flushes and a release (walfs/fuse/requests.py
    counts each inline): n echoes move each op's count by exactly that many."""

    def counts() -> dict[str, float]:
        text = mount.out("getfattr --only-values -n user.walfs.metrics .")
        return {
            op: value(text, "walfs_fuse_request_seconds_count", op=op)
            for op in ("open", "write", "flush", "release")
        }

    mount.sh("echo a >> t; echo b >> t")  # the first makes t (CREATE), the second opens it
    deadline = time.monotonic() + 30  # RELEASE follows close() asynchronously
    before = counts()
    while before["release"] < before["open"] + 1 and time.monotonic() < deadline:  # create's too
        time.sleep(0.05)
        before = counts()
    n = 25
    mount.sh(f"for i in $(seq {n}); do echo line$i >> t; done")
    want = {"open": n, "write": n, "flush": 2 * n, "release": n}
    after = counts()
    while after["release"] - before["release"] < n and time.monotonic() < deadline:
        time.sleep(0.05)
        after = counts()
    assert {op: after[op] - before[op] for op in want} == want
    assert mount.out("wc -l < t").strip() == str(n + 2)
