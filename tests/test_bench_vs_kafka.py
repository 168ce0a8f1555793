"""bench/benchkit.py's /proc readers and bench/kafka/bench_vs_kafka.py's reading of where
a cell's time went, on the real /proc of real processes: a child with a named busy thread and a named sleeping
one, its threads' CPU inside a window, a zombie, a thread name with ')' and spaces, the
machine's jiffies; then the rule that classes a cell below 1.2x, and the consumer tool's
fetch window. No test here asserts a speed: only how CPU time is attributed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "kafka"))

import bench_vs_kafka  # noqa: E402
import benchkit  # noqa: E402

# A child with a thread named "spin) er x" that burns CPU (outside the GIL) until stdin closes, one named as
# HotSpot names its JIT compiler that does the same, and one named "sleeper" that sleeps; it
# prints "ready" once all are named.
CHILD = r"""
import hashlib, sys, threading, time
data = bytes(1 << 20)
def name(n):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write(n)
stop = threading.Event()
named = threading.Barrier(4)
def spin(n="spin) er x"):
    name(n); named.wait()
    while not stop.is_set():
        hashlib.sha256(data).digest()  # releases the GIL: both spinners run at once
def sleep():
    name("sleeper"); named.wait()
    stop.wait()
ts = [threading.Thread(target=spin), threading.Thread(target=spin, args=("C2 CompilerThread0",)),
      threading.Thread(target=sleep)]
for t in ts: t.start()
named.wait()
print("ready", flush=True)
sys.stdin.read()
stop.set()
for t in ts: t.join()
"""


@pytest.fixture
def child():
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


def test_threads_of_a_real_process_named_and_summed(child):
    time.sleep(0.3)
    threads = benchkit.thread_cpu(child.pid)
    assert threads is not None
    names = {comm for comm, _, _, _ in threads.values()}
    assert {"spin) er x", "sleeper"} <= names  # comm holding ')' and spaces parsed whole
    spin = next(cpu for comm, cpu, _, _ in threads.values() if comm == "spin) er x")
    sleeper = next(cpu for comm, cpu, _, _ in threads.values() if comm == "sleeper")
    assert spin > sleeper
    assert all(wait >= 0 and runs >= 1 for _, _, wait, runs in threads.values())
    # the process's own figure is its threads' (all alive: none has left its time behind),
    # each read rounding to a tick, read a moment apart
    total = benchkit.process_cpu_seconds(child.pid)
    assert abs(total - sum(cpu for _, cpu, _, _ in threads.values())) <= 0.2


def test_sampler_window_and_zombie(child):
    with benchkit.Sampler(0.02) as s:
        s.watch(child.pid)
        t0 = s.sample()
        time.sleep(0.5)
        t1 = s.sample()
        time.sleep(0.1)
        assert child.stdin is not None
        child.stdin.close()
        # exited but not reaped: no thread-by-thread figures any more
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert benchkit.thread_cpu(child.pid) is None
        s.sample()
        last = s.last_alive[child.pid]
    assert t1 <= last
    rows = s.threads_in(child.pid, t0, t1)
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)  # busiest first
    assert rows[0][0] in ("spin) er x", "C2 CompilerThre")
    cpu = {name: c for name, c, _, _ in rows}
    wait = {name: w for name, _, w, _ in rows}
    runs = {name: n for name, _, _, n in rows}
    tick = 2 / benchkit.CLK_TCK
    assert 0 < cpu["spin) er x"] <= (t1 - t0) + tick
    assert cpu["sleeper"] < cpu["spin) er x"]
    # a spinning thread is on a CPU or waiting for one: never blocked; the sleeper is
    assert cpu["spin) er x"] + wait["spin) er x"] >= 0.8 * (t1 - t0)
    assert cpu["sleeper"] + wait["sleeper"] < 0.5 * (t1 - t0)
    # a window after the process was last seen holds none of its CPU
    assert all(c == w == n == 0 for _, c, w, n in s.threads_in(child.pid, last + 1, last + 2))
    assert runs["sleeper"] <= 2  # asleep all the window: it ran at most at its edges
    assert "C2 CompilerThre" in cpu  # the kernel keeps 15 characters of a name
    top = bench_vs_kafka.busiest(s, [child.pid], t0, t1)
    # the work thread, not the one named as the JIT, however busy that one was
    assert top["thread"] == "spin) er x" and 0 < top["pct"] <= 100 + 100 * tick / (t1 - t0)
    assert top["wanted_thread"] == "spin) er x" and top["wanted_pct"] >= 80
    assert top["wanted_wait_ms"] is not None and top["wanted_wait_ms"] >= 0
    assert top["jit_pct"] == pytest.approx(100 * cpu["C2 CompilerThre"] / (t1 - t0), abs=0.1)
    assert top["any_thread"] in ("spin) er x", "C2 CompilerThre")
    idle = s.idle_share(t0, t1)
    assert idle is not None and 0 <= idle <= 1


def test_machine_jiffies_count_every_cpu():
    a0, i0 = benchkit.machine_cpu()
    t0 = time.monotonic()
    time.sleep(0.5)
    a1, i1 = benchkit.machine_cpu()
    wall = time.monotonic() - t0
    # every CPU accounts each tick to one state: all states together move ncpu ticks per tick
    ncpu = os.cpu_count() or 1
    assert 0.7 <= (a1 - a0) / (wall * benchkit.CLK_TCK * ncpu) <= 1.3
    assert 0 <= i1 - i0 <= a1 - a0


def test_interpolation_edges():
    series = [(1.0, 2.0), (2.0, 4.0)]
    assert benchkit._at(series, 1.5) == 3.0
    assert benchkit._at(series, 0.5) == 0.0  # a thread not yet there
    assert benchkit._at(series, 0.5, None) == 2.0  # a counter older than its first read
    assert benchkit._at(series, 9.0) == 4.0  # a thread that has ended


def _row(ratio: float, client: tuple[float, float], idle: tuple[float, float]) -> dict:
    def side(c: float, i: float) -> dict:
        return {
            "produce.client_busiest_pct": {"median": c},
            "produce.machine_idle_pct": {"median": i},
            "produce.server_busiest_pct": {"median": 50.0},
        }

    return {
        "walfs": side(client[0], idle[0]),
        "kafka": side(client[1], idle[1]),
        "walfs_over_kafka": {"produce.records_per_s": ratio},
    }


def test_classes_need_the_evidence_against_both_servers():
    def cls(*a):
        found = bench_vs_kafka.classify(_row(*a), "produce")
        return found and found["class"]

    assert cls(1.25, (99, 99), (0, 0)) is None  # at the goal: nothing to explain
    assert cls(0.9, (95, 92), (20, 30)) == "client-bound"
    assert cls(0.9, (95, 60), (20, 30)) == "server"  # the tool had room against Kafka
    assert cls(0.9, (60, 60), (2, 4)) == "cpu-bound"
    assert cls(0.9, (60, 60), (2, 8)) == "server"
    assert cls(0.9, (95, 95), (1, 1)) == "client-bound+cpu-bound"
    row = _row(0.9, (50, 60), (1, 1))
    for side, wanted in (("walfs", 97.0), ("kafka", 93.0)):  # runnable all the time, on a CPU half
        row[side]["produce.client_wanted_pct"] = {"median": wanted}
    assert bench_vs_kafka.classify(row, "produce")["class"] == "client-starved+cpu-bound"
    row["kafka"]["produce.client_wanted_pct"] = {"median": 70.0}  # it waited for Kafka
    assert bench_vs_kafka.classify(row, "produce")["class"] == "cpu-bound"
    row = _row(0.9, (95, 95), (1, 1))
    del row["kafka"]["produce.machine_idle_pct"]
    assert bench_vs_kafka.classify(row, "produce")["class"] == "unmeasured"


def test_the_free_server_ceiling_gives_the_tool_what_kafka_and_idle_had():
    # walfs at 0.95x; against Kafka the tool used 150% of one CPU, Kafka 20%, and 2% of two
    # CPUs idled; against walfs the tool used 160%: a free server would give the tool
    # 150 + 20 + 4 = 174%, so at most 0.95 x 174 / 160 = 1.033x.
    row = _row(0.95, (60, 60), (1, 2))
    for side, client, server in (("walfs", 160.0, 10.0), ("kafka", 150.0, 20.0)):
        row[side]["produce.client_cpu_pct"] = {"median": client}
        row[side]["produce.server_cpu_pct"] = {"median": server}
    found = bench_vs_kafka.classify(row, "produce", ncpu=2)
    assert found["ceiling"] == 1.033
    assert found["class"] == "cpu-bound+tool-cpu"
    # With half the machine idle against Kafka the ceiling is far above the goal: no tag.
    row["kafka"]["produce.machine_idle_pct"] = {"median": 50.0}
    found = bench_vs_kafka.classify(row, "produce", ncpu=2)
    assert found["ceiling"] == round(0.95 * (150 + 20 + 100) / 160, 3)
    assert found["class"] == "server"
    # Without the tool's CPU there is no ceiling, and the class says only what it knows.
    del row["walfs"]["produce.client_cpu_pct"]
    found = bench_vs_kafka.classify(row, "produce", ncpu=2)
    assert found["ceiling"] is None and found["class"] == "server"


def test_consumer_fetch_window_from_its_end_time():
    now_wall, now_mono = time.time(), time.monotonic()
    end = time.localtime(now_wall - 2)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", end) + f":{int((now_wall - 2) % 1 * 1000):03d}"
    window = bench_vs_kafka.fetch_window({"end.time": stamp, "fetch.time.ms": "1500"}, now_mono)
    assert window is not None
    assert window[1] - window[0] == pytest.approx(1.5)
    assert window[1] == pytest.approx(now_mono - 2, abs=0.05)
    # an end the tool cannot have had (an hour after it was last seen): not trusted
    late = time.strftime("%Y-%m-%d %H:%M:%S:000", time.localtime(now_wall + 3600))
    assert bench_vs_kafka.fetch_window({"end.time": late, "fetch.time.ms": "1"}, now_mono) is None
    assert bench_vs_kafka.fetch_window({"end.time": "garbage", "fetch.time.ms": "1"}, now_mono) is None


def test_others_share_is_what_neither_side_used():
    phase = {"machine_idle_pct": 10.0, "client_cpu_pct": 100.0, "server_cpu_pct": 30.0}
    bench_vs_kafka.others(phase, 2)
    assert phase["other_cpu_pct"] == 50.0  # 2 CPUs x 90% busy = 180%, 130% of it accounted
    partial = {"machine_idle_pct": 10.0, "client_cpu_pct": 100.0}
    bench_vs_kafka.others(partial, 2)
    assert "other_cpu_pct" not in partial


def test_the_measured_ceiling_is_compared_with_each_pairs_kafka():
    """--ceiling's nullkafka runs once per (size, producers, round) as pair "null"; every
    pair's cell gets null_over_kafka from that run and its own Kafka (median of the rounds'
    ratios, their range beside), and no cell of its own."""

    def run(rnd, pair, server, produce, consume):
        return {
            "round": rnd,
            "pair": pair,
            "size": "100B",
            "producers": 1,
            "server": server,
            "produce": {"records_per_s": produce},
            "consume": {"records_per_s": consume},
        }

    runs = []
    for rnd, null in enumerate((300, 330, 360)):
        runs += [
            run(rnd, "null", "null", null, 2 * null),
            run(rnd, "default", "kafka", 100, 100),
            run(rnd, "default", "walfs", 110, 120),
            run(rnd, "flush1", "kafka", 200, 100),
            run(rnd, "flush1", "walfs", 190, 150),
        ]
    summary = {row["pair"]: row for row in bench_vs_kafka.summarize(runs)}
    assert set(summary) == {"default", "flush1"}
    assert summary["default"]["null_over_kafka"]["produce.records_per_s"] == 3.3
    assert summary["default"]["null_over_kafka_range"]["produce.records_per_s"] == [3.0, 3.6]
    assert summary["flush1"]["null_over_kafka"]["produce.records_per_s"] == 1.65
    assert summary["flush1"]["null_over_kafka"]["consume.records_per_s"] == 6.6
    assert summary["default"]["walfs_over_kafka"]["produce.records_per_s"] == 1.1
    assert summary["flush1"]["null"]["produce.records_per_s"]["median"] == 330
    md = bench_vs_kafka.bounds_markdown(list(summary.values()))
    assert "measured ceiling" in md and "| 1.65x (1.50-1.80) |" in md
