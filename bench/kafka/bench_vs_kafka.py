"""walfs serve against Apache Kafka, on Kafka's own benchmark, in one run.

    .venv/bin/python bench/kafka/bench_vs_kafka.py --quick            # smoke run, ~3 min
    .venv/bin/python bench/kafka/bench_vs_kafka.py --standard --producers 1   # issue 20's sizes, one round
    .venv/bin/python bench/kafka/bench_vs_kafka.py --rounds 3         # the full matrix
    make bench-kafka                                            # the same (ARGS=--quick)

Starts one single-node KRaft broker (tests/real_kafka.py, Kafka 4.1.1 from `make kafka`)
and three `walfs serve` processes (their own temporary data directories: `--fsync never`,
`--fsync always` and the default `interval`), then runs Kafka's own
org.apache.kafka.tools.ProducerPerformance (acks=all, linger.ms=5, batch.size=1 MiB) and
ConsumerPerformance against each, alternating Kafka and walfs (the order flips every
round), for 100 B, 1 KiB and 16 KiB records, with one and with four producer processes.

Durability is matched in pairs:
  default: Kafka's default (a single broker acks without fsync)  vs  walfs --fsync never
           (acks=all answered once in the log, no fsync either: docs/kafka.md)
  flush1:  Kafka topics with flush.messages=1 (what log.flush.interval.messages=1 sets
           for every topic: an fsync per append)                  vs  walfs --fsync always
  interval: walfs's default (fsync every 100 ms, acks=all waits for it), shown against
           the default pair's Kafka figure.

Per run: records/s and MB/s of the producers (four producers: all records over the
longest producer's own time) and of the consumer (ConsumerPerformance's fetch rate, which
leaves out its group join), p50/p99 produce latency as ProducerPerformance prints them,
and CPU seconds per million records of the server process (utime + stime of all its
threads from /proc/PID/stat, before and after each phase). Per cell: median, min and max
over the rounds, and the median of the per-round walfs/Kafka ratios. JSON goes to
bench/results/runs/ (or --out), a summary table to stderr. Before each server's run, --recycle
MiB (1024 by default) are written and deleted (bench/benchkit.py's recycle), so that both servers
write into page-cache pages the kernel has just freed, not into memory this virtual
machine has handed back to its host (15-25 times dearer per MiB, and met by whichever
server's run comes when the page cache grows).

Where each phase's time went (bench/benchkit.py's Sampler samples every 50 ms the threads of the perf
tools and of the server, /proc/PID/task/TID/stat and schedstat, and the machine's
/proc/stat), over the tool's own measured phase (a producer's time, which ends when it
exits; the consumer's fetch time, which ends at its printed end.time): the tools' CPU per
million records (their JVMs whole, reaped: rusage of children), their busiest work thread's
share of the phase on a CPU and on a CPU or waiting in the run queue (the JVM's JIT, VM and
service threads apart; the JIT's share beside), the machine's idle share, the CPU of
other processes, and the server's busiest thread the same way. Each cell below 1.2x gets a
class from these (`classify`: client-bound, client-starved, cpu-bound, server; the
thresholds are CLIENT_BOUND_PCT and CPU_BOUND_IDLE_PCT) and a markdown table after the summary
`--summarize JSON` prints the tables of an earlier run again.

`--ceiling` adds a third target to every (size, producers) cell: bench/kafka/nullkafka (`make
nullkafka`), a Kafka-wire server that keeps the batches in memory and costs almost nothing
(no disk, no fsync). It runs once per cell and round, in the first pair's order (which flips
every round), and its figures are compared with each pair's Kafka: `null_over_kafka`, the
**measured** free-server ceiling beside classify's modelled one. Below 1.2x, no server can
reach 1.2x with this tool on this machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from real_kafka import KafkaBroker, classpath  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import benchkit  # noqa: E402
from benchkit import Sampler, process_cpu_seconds  # noqa: E402

SIZES = {"100B": 100, "1KiB": 1024, "16KiB": 16384}
FULL_RECORDS = {"100B": 1_000_000, "1KiB": 300_000, "16KiB": 30_000}
QUICK_RECORDS = {"100B": 200_000, "1KiB": 60_000, "16KiB": 6_000}
# Issue 20's own run (1 M x 100 B, 300 k x 1 KiB) in one round: long enough for Kafka's JIT
# to warm inside the round, which --quick's short runs leave in every figure.
STANDARD_RECORDS = {"100B": 1_000_000, "1KiB": 300_000, "16KiB": 20_000}
# pair -> (Kafka topic config or None when the pair has no Kafka side, walfs fsync mode)
PAIRS: dict[str, tuple[dict[str, str] | None, str]] = {
    "default": ({}, "never"),
    "flush1": ({"flush.messages": "1"}, "always"),
    "interval": (None, "interval"),
}
PRODUCER_PROPS = ["acks=all", "linger.ms=5", "batch.size=1048576"]
TOOL_JVM = ["java", "-Xmx512m", "-XX:+UseSerialGC"]
NULLKAFKA = REPO / "bench" / "kafka" / "nullkafka" / "nullkafka"
# (numerator, denominator) servers of the per-round ratios a cell reports as NUM_over_DEN:
# walfs against Kafka and against --baseline's walfs ("base"); --ceiling's nullkafka
# ("null") against Kafka.
RATIOS = (("walfs", "kafka"), ("walfs", "base"), ("null", "kafka"))

_PERF = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


# What bounds a cell below 1.2x (docs/benchmarks.md, "What bounds each cell"): the client
# when its busiest thread was at least this busy over the tool's own measured phase against
# both servers; the machine when less than this share of both CPUs was idle against both.
CLIENT_BOUND_PCT = 90.0
CPU_BOUND_IDLE_PCT = 5.0
GOAL = 1.2
SAMPLE_INTERVAL = 0.05  # seconds between reads of the tools' and the server's threads


def children_cpu_seconds() -> float:
    """utime + stime of this process's reaped children: the perf tools' JVMs, read exactly
    when they are reaped (their /proc/PID goes with them)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# The JVM's own threads (HotSpot 17's names, cut to 15 characters by the kernel): its JIT
# compilers, the VM thread (which runs SerialGC's collections and the safepoints) and the
# service threads. The rest are the tool's: `java` (main: the producer's send loop, the
# consumer's poll loop) and `kafka-producer-` (the producer's sender).
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
JVM_THREADS = (
    *JIT_THREADS,
    "VM Thread",
    "VM Periodic Tas",
    "GC Thread",
    "Signal Dispatch",
    "Service Thread",
    "Monitor Deflati",
    "Common-Cleaner",
    "Reference Handl",
    "Finalizer",
    "Notification Th",
    "Sweeper thread",
    "Attach Listener",
)


def busiest(sampler: Sampler, pids: list[int], t0: float, t1: float) -> dict[str, Any]:
    """Where the CPU of pids went inside [t0, t1], in % of that wall time:

    thread, pct           the busiest work thread (most CPU; the JVM's own threads,
                          JVM_THREADS, left out: a compiler busy is not the tool busy)
    wanted_thread, ..pct  the work thread that most wanted a CPU: on one, or runnable and
                          waiting in the run queue (near 100: it never waited for anything
                          but a CPU, not for the server); wanted_wait_ms: its mean wait
                          in the run queue before each time it ran
    any_thread, any_pct   the busiest of all threads
    jit_pct, vm_pct       the JIT compilers' CPU together, and the VM thread's (GC)
    all_pct               all threads' CPU, in % of one CPU (up to 100 x the CPUs)
    top                   the five busiest threads: name, CPU s, run-queue s, runs"""
    rows = sorted(
        (row for pid in pids for row in sampler.threads_in(pid, t0, t1)),
        key=lambda r: -r[1],
    )
    wall = max(t1 - t0, 1e-9)
    work = [r for r in rows if r[0] not in JVM_THREADS and not r[0].startswith("GC Thread")]
    wanted = max(work, key=lambda r: r[1] + r[2]) if work else None

    def pct(cpu: float) -> float:
        return round(100 * cpu / wall, 1)

    return {
        "thread": work[0][0] if work else None,
        "pct": pct(work[0][1]) if work else None,
        "wanted_thread": wanted[0] if wanted else None,
        "wanted_pct": pct(wanted[1] + wanted[2]) if wanted else None,
        "wanted_wait_ms": round(1000 * wanted[2] / wanted[3], 3) if wanted and wanted[3] >= 1 else None,
        "any_thread": rows[0][0] if rows else None,
        "any_pct": pct(rows[0][1]) if rows else None,
        "jit_pct": pct(sum(r[1] for r in rows if r[0] in JIT_THREADS)),
        "vm_pct": pct(sum(r[1] for r in rows if r[0] == "VM Thread")),
        "all_pct": pct(sum(r[1] for r in rows)),
        "top": [[name, round(cpu, 3), round(wait, 3), round(runs)] for name, cpu, wait, runs in rows[:5]],
        "window_s": round(wall, 3),
    }


def walfs_tree() -> Path:
    """The tree whose walfs this process imports: PYTHONPATH's under bench/ab_trees.py (the
    server must run that tree's code, not this checkout's), else this checkout's."""
    spec = importlib.util.find_spec("walfs")
    if spec is None or spec.origin is None:
        return REPO
    return Path(spec.origin).resolve().parent.parent


class ServerProcess:
    """A server this bench started: its process and its bootstrap address."""

    proc: subprocess.Popen[str] | None = None
    bootstrap = ""

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


class WalfsServer(ServerProcess):
    """`walfs serve` of the tree at `code` (this checkout, or a --baseline export)."""

    def __init__(self, fsync: str, root: Path, code: Path | None = None, label: str = "walfs") -> None:
        self.fsync = fsync
        self.code = code or walfs_tree()
        self.dir = root / f"{label}-{fsync}"

    def start(self) -> WalfsServer:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "walfs.cli.serve",
                str(self.dir),
                "--kafka-listen",
                "127.0.0.1:0",
                "--fsync",
                self.fsync,
                "--log-level",
                "warning",
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=self.code,  # `-m` imports walfs from here first
        )
        assert self.proc.stdout is not None
        m = re.search(r"listening on (\S+)", self.proc.stdout.readline())
        if not m:
            self.proc.kill()
            raise SystemExit(f"walfs serve --fsync {self.fsync} did not start")
        self.bootstrap = m.group(1)
        return self


class NullKafka(ServerProcess):
    """bench/kafka/nullkafka (built by `make nullkafka`) on a free port: the measured ceiling."""

    def start(self) -> NullKafka:
        subprocess.run(["make", "-s", "-C", str(REPO), "nullkafka"], check=True)
        self.proc = subprocess.Popen(
            [str(NULLKAFKA), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.bootstrap = self.proc.stdout.readline().strip()
        if not self.bootstrap:
            self.proc.kill()
            raise SystemExit("bench/kafka/nullkafka did not start")
        return self


def export_tree(ref: str, dest: Path) -> Path:
    """The tree of git ref `ref` in dest, its C core built, for a before/after run."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=dest,
        check=True,
        capture_output=True,
    )
    return dest


def create_topic(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    fut = admin.create_topics([NewTopic(topic, 1, 1, config=config)], request_timeout=30)[topic]
    fut.result(timeout=60)


def produce(
    cp: str,
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    producers: int,
    sampler: Sampler | None = None,
) -> dict[str, Any]:
    """`producers` ProducerPerformance processes at once, records split among them. With a
    sampler: each tool's threads over its own measured time (which ends when it exits)."""
    share = [records // producers + (i < records % producers) for i in range(producers)]
    procs = [
        subprocess.Popen(
            [
                *TOOL_JVM,
                "-cp",
                cp,
                "org.apache.kafka.tools.ProducerPerformance",
                "--topic",
                topic,
                "--num-records",
                str(n),
                "--record-size",
                str(size),
                "--throughput",
                "-1",
                "--producer-props",
                f"bootstrap.servers={bootstrap}",
                *PRODUCER_PROPS,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in share
    ]
    if sampler is not None:
        for p in procs:
            sampler.watch(p.pid)
    runs: list[dict[str, Any]] = []
    for p, n in zip(procs, share, strict=True):
        out, err = p.communicate(timeout=900)
        matches = _PERF.findall(out)
        if p.returncode != 0 or not matches:
            raise RuntimeError(f"ProducerPerformance exited {p.returncode}:\n{out[-2000:]}\n{err[-2000:]}")
        sent, rps, _mbps, avg, mx, p50, p95, p99, p999 = matches[-1]
        if int(sent) != n:
            raise RuntimeError(f"ProducerPerformance sent {sent} of {n}")
        runs.append(
            {
                "records": n,
                "seconds": n / float(rps),
                "avg_ms": float(avg),
                "max_ms": float(mx),
                "p50_ms": int(p50),
                "p95_ms": int(p95),
                "p99_ms": int(p99),
                "p999_ms": int(p999),
            }
        )
    seconds = max(r["seconds"] for r in runs)
    out_row: dict[str, Any] = {
        "records_per_s": round(records / seconds),
        "mb_per_s": round(records * size / seconds / 1e6, 1),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": max(r["p99_ms"] for r in runs),
        "producers": runs,
    }
    if sampler is not None:
        windows = []
        for p, r in zip(procs, runs, strict=True):
            end = sampler.last_alive.get(p.pid)
            sampler.forget(p.pid)
            if end is not None:
                windows.append((end - r["seconds"], end))
                r["client"] = busiest(sampler, [p.pid], end - r["seconds"], end)
        out_row["window"] = (min(w[0] for w in windows), max(w[1] for w in windows)) if windows else None
        if out_row["window"]:
            out_row["client_cpu_pct"] = busiest(sampler, [p.pid for p in procs], *out_row["window"])[
                "all_pct"
            ]
        clients = [r["client"] for r in runs if r.get("client", {}).get("pct") is not None]
        if clients:
            top = max(clients, key=lambda c: c["pct"])
            out_row["client_busiest_pct"] = top["pct"]
            out_row["client_busiest_thread"] = top["thread"]
            top = max(clients, key=lambda c: c["wanted_pct"] or 0)
            out_row["client_wanted_pct"] = top["wanted_pct"]
            out_row["client_wanted_thread"] = top["wanted_thread"]
            out_row["client_jit_pct"] = max(c["jit_pct"] for c in clients)
    return out_row


def others(phase: dict[str, Any], ncpu: int | None = None) -> None:
    """The CPU neither the perf tools nor the server used, and not idle, over the phase, in %
    of one CPU: other processes (the machine is shared), this bench's sampler, the kernel's
    threads. Set on `phase` when its three inputs are there."""
    ncpu = ncpu or os.cpu_count() or 1
    idle, client, server = (phase.get(k) for k in ("machine_idle_pct", "client_cpu_pct", "server_cpu_pct"))
    if idle is not None and client is not None and server is not None:
        phase["other_cpu_pct"] = round(ncpu * (100 - idle) - client - server, 1)


def fetch_window(row: dict[str, str], end_seen: float) -> tuple[float, float] | None:
    """ConsumerPerformance's fetch phase on the monotonic clock: it ends at the tool's
    `end.time` (local wall time, ms) and lasts `fetch.time.ms`; None when that end is not
    within the 30 s before the tool was last seen alive (a clock or format surprise)."""
    try:
        end_wall = time.mktime(time.strptime(row["end.time"][:19], "%Y-%m-%d %H:%M:%S"))
        end_wall += int(row["end.time"][20:23]) / 1000
    except (KeyError, ValueError):
        return None
    end = end_wall - (time.time() - time.monotonic())  # onto the sampler's clock
    if not end_seen - 30 <= end <= end_seen + 1:
        return None
    return end - int(row["fetch.time.ms"]) / 1000, end


def consume(
    cp: str, bootstrap: str, topic: str, records: int, size: int, sampler: Sampler | None = None
) -> dict[str, Any]:
    proc = subprocess.Popen(
        [
            *TOOL_JVM,
            "-cp",
            cp,
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--messages",
            str(records),
            "--timeout",
            "120000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if sampler is not None:
        sampler.watch(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        if sampler is not None:
            sampler.forget(proc.pid)
    p = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    lines = [ln for ln in p.stdout.splitlines() if ln.count(",") >= 9]
    if p.returncode != 0 or len(lines) < 2:
        raise RuntimeError(
            f"ConsumerPerformance exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        )
    row = dict(
        zip([h.strip() for h in lines[0].split(",")], [v.strip() for v in lines[-1].split(",")], strict=True)
    )
    got = int(row["data.consumed.in.nMsg"])
    if got < records:
        raise RuntimeError(f"ConsumerPerformance read {got} of {records} records")
    fetch_s = float(row["fetch.time.ms"]) / 1000
    out: dict[str, Any] = {
        "records_per_s": round(got / fetch_s) if fetch_s > 0 else None,
        "mb_per_s": round(got * size / fetch_s / 1e6, 1) if fetch_s > 0 else None,
        "with_join_records_per_s": round(float(row["nMsg.sec"])),
        "rebalance_ms": int(row["rebalance.time.ms"]),
        "fetch_ms": int(row["fetch.time.ms"]),
    }
    seen = sampler.last_alive.get(proc.pid) if sampler is not None else None
    if sampler is not None and seen is not None:
        window = fetch_window(row, seen)
        out["window_from"] = "end.time" if window else "exit"
        out["window"] = window or (seen - fetch_s, seen)
        client = busiest(sampler, [proc.pid], *out["window"])
        out["client"] = client
        out["client_busiest_pct"] = client["pct"]
        out["client_busiest_thread"] = client["thread"]
        out["client_wanted_pct"] = client["wanted_pct"]
        out["client_wanted_thread"] = client["wanted_thread"]
        out["client_wait_ms"] = client["wanted_wait_ms"]
        out["client_jit_pct"] = client["jit_pct"]
        out["client_cpu_pct"] = client["all_pct"]
    return out


def one_run(
    cp: str,
    server: str,
    bootstrap: str,
    pid: int,
    topic: str,
    records: int,
    size: int,
    producers: int,
    *,
    sampler: Sampler,
) -> dict[str, Any]:
    """Produce then consume `records` against one server; the server's and the tools' CPU,
    and where each phase's time went (the sampler's threads: `busiest`)."""
    sampler.watch(pid)
    c0, k0 = process_cpu_seconds(pid), children_cpu_seconds()
    prod = produce(cp, bootstrap, topic, records, size, producers, sampler)
    c1, k1 = process_cpu_seconds(pid), children_cpu_seconds()
    try:
        cons = consume(cp, bootstrap, topic, records, size, sampler)
    except (RuntimeError, subprocess.TimeoutExpired) as e:  # recorded; the matrix goes on
        cons = {"error": str(e)[-1000:], "records_per_s": None, "mb_per_s": None}
    c2, k2 = process_cpu_seconds(pid), children_cpu_seconds()
    sampler.sample()
    sampler.forget(pid)
    prod["server_cpu_s_per_m"] = round((c1 - c0) / records * 1e6, 2)
    cons["server_cpu_s_per_m"] = round((c2 - c1) / records * 1e6, 2)
    prod["client_cpu_s_per_m"] = round((k1 - k0) / records * 1e6, 2)
    cons["client_cpu_s_per_m"] = round((k2 - k1) / records * 1e6, 2)
    for phase in (prod, cons):
        window = phase.pop("window", None)
        if window is None:
            continue
        phase["window_s"] = round(window[1] - window[0], 3)
        idle = sampler.idle_share(*window)
        phase["machine_idle_pct"] = round(100 * idle, 1) if idle is not None else None
        srv = busiest(sampler, [pid], *window)
        phase["server_busiest_pct"], phase["server_busiest_thread"] = srv["pct"], srv["thread"]
        phase["server_cpu_pct"] = srv["all_pct"]
        phase["server_wanted_pct"] = srv["wanted_pct"]
        phase["server_wait_ms"] = srv["wanted_wait_ms"]
        phase["server_threads_top"] = srv["top"]
        others(phase)

    def bounds(ph: dict[str, Any]) -> str:
        if ph.get("client_busiest_pct") is None:
            return ""
        return (
            f" client {ph['client_busiest_pct']:5.1f}% (wanted {ph.get('client_wanted_pct') or 0:5.1f}%)"
            f" idle {ph.get('machine_idle_pct') or 0:4.1f}%"
            f" srv {ph.get('server_busiest_pct') or 0:5.1f}% cpus c/s {ph.get('client_cpu_pct') or 0:3.0f}/"
            f"{ph.get('server_cpu_pct') or 0:3.0f}%"
        )

    print(
        f"  {server:15s} {topic:28s} produce {prod['records_per_s']:>9,} rec/s p99 {prod['p99_ms']:>5} ms "
        f"cpu {prod['server_cpu_s_per_m']:6.2f} s/M{bounds(prod)} | consume {cons['records_per_s'] or 0:>9,} "
        f"rec/s cpu {cons['server_cpu_s_per_m']:6.2f} s/M{bounds(cons)}",
        file=sys.stderr,
        flush=True,
    )
    return {"produce": prod, "consume": cons}


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:  # a metric no run of the cell reported
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (pair, size, producers): each metric's spread per server and the median of the
    per-round ratios of RATIOS (the interval pair against the default pair's Kafka; --ceiling's
    nullkafka, run once per size, producers and round as pair "null", in every pair's cell)."""
    cells: dict[tuple[str, str, int], dict[int, dict[str, Any]]] = {}
    null = {(r["size"], r["producers"], r["round"]): r for r in runs if r["server"] == "null"}
    for r in runs:
        if r["server"] == "null":
            continue
        cells.setdefault((r["pair"], r["size"], r["producers"]), {}).setdefault(r["round"], {})[
            r["server"]
        ] = r
    kafka_default = {
        (r["size"], r["producers"], r["round"]): r
        for r in runs
        if r["pair"] == "default" and r["server"] == "kafka"
    }
    out = []
    metrics = [
        ("produce", "records_per_s"),
        ("produce", "mb_per_s"),
        ("produce", "p50_ms"),
        ("produce", "p99_ms"),
        ("produce", "server_cpu_s_per_m"),
        ("consume", "records_per_s"),
        ("consume", "mb_per_s"),
        ("consume", "server_cpu_s_per_m"),
    ]
    # where the time went (spreads only: their ratios mean nothing)
    bound_metrics = [
        (phase, key)
        for phase in ("produce", "consume")
        for key in (
            "client_cpu_s_per_m",
            "client_busiest_pct",
            "client_wanted_pct",
            "client_jit_pct",
            "client_cpu_pct",
            "machine_idle_pct",
            "server_busiest_pct",
            "server_cpu_pct",
            "server_wanted_pct",
            "server_wait_ms",
            "client_wait_ms",
            "other_cpu_pct",
        )
    ]
    for (pair, size, producers), rounds in sorted(cells.items()):
        row: dict[str, Any] = {"pair": pair, "size": size, "producers": producers, "rounds": len(rounds)}
        per_server: dict[str, list[dict[str, Any]]] = {}
        ratios: dict[str, list[float]] = {}
        for rnd, by_server in rounds.items():
            if "kafka" not in by_server and (size, producers, rnd) in kafka_default:
                by_server = {**by_server, "kafka": kafka_default[(size, producers, rnd)]}
            if (size, producers, rnd) in null:
                by_server = {**by_server, "null": null[(size, producers, rnd)]}
            for s, r in by_server.items():
                per_server.setdefault(s, []).append(r)
            for num, den in RATIOS:
                w, k = by_server.get(num), by_server.get(den)
                if w and k:
                    for phase, key in metrics:
                        a, b = w[phase].get(key), k[phase].get(key)
                        if a and b:
                            ratios.setdefault(f"{num}_over_{den}:{phase}.{key}", []).append(a / b)
        for s, rs in per_server.items():
            row[s] = {
                f"{phase}.{key}": spread([r[phase][key] for r in rs if r[phase].get(key) is not None])
                for phase, key in metrics + bound_metrics
            }
        for num, den in RATIOS:
            name = f"{num}_over_{den}"
            mine = {k.split(":", 1)[1]: v for k, v in ratios.items() if k.startswith(name + ":")}
            if mine:
                row[name] = {k: round(statistics.median(v), 3) for k, v in mine.items()}
                row[f"{name}_range"] = {k: [round(min(v), 3), round(max(v), 3)] for k, v in mine.items()}
        if "walfs_over_kafka" in row:
            row["bound"] = {ph: classify(row, ph) for ph in ("produce", "consume")}
        out.append(row)
    return out


def classify(row: dict[str, Any], phase: str, ncpu: int | None = None) -> dict[str, Any] | None:
    """What bounds a cell's phase where walfs is below GOAL x Kafka, from the medians over the
    rounds against each server (every condition must hold against both servers):

      client-bound    the perf tool's busiest thread was on a CPU for at least
                      CLIENT_BOUND_PCT of the phase (the tool could go no faster on either)
      client-starved  not that, but its thread that most wanted a CPU was on one or waiting
                      in the run queue for at least CLIENT_BOUND_PCT: it never waited for the
                      server, only for a CPU (needs /proc/.../schedstat)
      cpu-bound       the machine had less than CPU_BOUND_IDLE_PCT idle
      server          none of these: walfs's own time is the suspect

    joined with "+" when several hold; "unmeasured" when a figure is missing. None at or
    above GOAL. Beside the class, `ceiling`: the ratio walfs would reach if it cost no CPU
    and the tool got, against walfs, all the CPU that the tool and Kafka used and left
    idle in Kafka's run, at the tool's CPU per record measured against walfs:
    ratio x (client CPU_k + server CPU_k + idle_k) / client CPU_w, in % of one CPU over
    each run's phase. Below GOAL, no server can reach GOAL on this machine with this
    tool: "+tool-cpu" is added to the class."""
    ratio = row.get("walfs_over_kafka", {}).get(f"{phase}.records_per_s")
    if ratio is None or ratio >= GOAL:
        return None

    def med(server: str, key: str) -> float | None:
        value = row.get(server, {}).get(f"{phase}.{key}", {}).get("median")
        return None if value is None else float(value)

    figures = {
        f"{key}_{s[0]}": med(s, key)
        for key in (
            "client_busiest_pct",
            "client_wanted_pct",
            "machine_idle_pct",
            "server_busiest_pct",
            "server_cpu_pct",
            "server_wanted_pct",
            "other_cpu_pct",
            "client_cpu_pct",
        )
        for s in ("walfs", "kafka")
    }
    ceiling = free_server_ceiling(ratio, figures, ncpu)

    def both(key: str) -> list[float] | None:
        pair = [figures[f"{key}_w"], figures[f"{key}_k"]]
        return None if None in pair else [float(v) for v in pair if v is not None]

    client, wanted, idle = both("client_busiest_pct"), both("client_wanted_pct"), both("machine_idle_pct")
    if client is None or idle is None:
        cls = "unmeasured"
    else:
        found = []
        if all(c >= CLIENT_BOUND_PCT for c in client):
            found.append("client-bound")
        elif wanted is not None and all(w >= CLIENT_BOUND_PCT for w in wanted):
            found.append("client-starved")
        if all(i < CPU_BOUND_IDLE_PCT for i in idle):
            found.append("cpu-bound")
        cls = "+".join(found) or "server"
        if ceiling is not None and ceiling < GOAL:
            cls += "+tool-cpu"
    return {"ratio": ratio, "class": cls, "ceiling": ceiling, **figures}


def free_server_ceiling(ratio: float, figures: dict[str, float | None], ncpu: int | None) -> float | None:
    """classify's `ceiling` from its figures (medians over the rounds): None when one is
    missing or the tool used no CPU against walfs."""
    ncpu = ncpu or os.cpu_count() or 1
    client_w, client_k = figures["client_cpu_pct_w"], figures["client_cpu_pct_k"]
    server_k, idle_k = figures["server_cpu_pct_k"], figures["machine_idle_pct_k"]
    if client_w is None or client_k is None or server_k is None or idle_k is None or client_w <= 0:
        return None
    return round(ratio * (client_k + server_k + ncpu * idle_k) / client_w, 3)


def table(summary: list[dict[str, Any]]) -> str:
    """One line per cell and comparison: medians, and the median of per-round ratios."""
    lines = [
        "pair      size   prod  a/b         | produce rec/s a / b = ratio "
        "| consume rec/s a / b = ratio | server cpu s/M produce a/b, consume a/b"
    ]

    def med(d: dict[str, Any], key: str) -> float:
        return float(d.get(key, {}).get("median", 0) or 0)

    for row in summary:
        for num, den in RATIOS:
            if f"{num}_over_{den}" not in row:
                continue
            w, k, r = row.get(num, {}), row.get(den, {}), row[f"{num}_over_{den}"]
            lines.append(
                f"{row['pair']:9s} {row['size']:6s} {row['producers']:4d}  {num + '/' + den:11s} | "
                f"{med(w, 'produce.records_per_s'):>10,.0f} / {med(k, 'produce.records_per_s'):>10,.0f} = "
                f"{r.get('produce.records_per_s', 0):5.2f}x | "
                f"{med(w, 'consume.records_per_s'):>10,.0f} / {med(k, 'consume.records_per_s'):>10,.0f} = "
                f"{r.get('consume.records_per_s', 0):5.2f}x | "
                f"{med(w, 'produce.server_cpu_s_per_m'):.2f}/{med(k, 'produce.server_cpu_s_per_m'):.2f}, "
                f"{med(w, 'consume.server_cpu_s_per_m'):.2f}/{med(k, 'consume.server_cpu_s_per_m'):.2f}"
            )
    return "\n".join(lines)


def bounds_markdown(summary: list[dict[str, Any]]) -> str:
    """docs/benchmarks.md's table of what bounds each cell: one line per cell and phase
    against Kafka, medians over the rounds, walfs / Kafka, and the class below GOAL."""

    def pair(row: dict[str, Any], phase: str, key: str, fmt: str) -> str:
        vals = [row.get(s, {}).get(f"{phase}.{key}", {}).get("median") for s in ("walfs", "kafka")]
        return "/".join("-" if v is None else format(v, fmt) for v in vals)

    lines = [
        "| pair | size | prod | phase | rec/s w/k | ratio | client busiest work thread % w/k "
        "| client thread on CPU or runnable % w/k | client JIT % w/k "
        "| client CPU % w/k | machine idle % w/k | others' CPU % w/k | server busiest thread % w/k "
        "| server thread on CPU or runnable % w/k "
        "| free-server ceiling | measured ceiling (null/k) | class |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary:
        if "walfs_over_kafka" not in row:
            continue
        for phase in ("produce", "consume"):
            ratio = row["walfs_over_kafka"].get(f"{phase}.records_per_s")
            bound = (row.get("bound") or {}).get(phase)
            ceiling = "-" if not bound or bound.get("ceiling") is None else f"{bound['ceiling']:.2f}x"
            null = row.get("null_over_kafka", {}).get(f"{phase}.records_per_s")
            span = row.get("null_over_kafka_range", {}).get(f"{phase}.records_per_s")
            measured = "-" if null is None else f"{null:.2f}x"
            if span and span[0] != span[1]:
                measured += f" ({span[0]:.2f}-{span[1]:.2f})"
            lines.append(
                f"| {row['pair']} | {row['size']} | {row['producers']} | {phase} "
                f"| {pair(row, phase, 'records_per_s', ',.0f')} "
                f"| {'-' if ratio is None else f'{ratio:.2f}x'} "
                f"| {pair(row, phase, 'client_busiest_pct', '.0f')} "
                f"| {pair(row, phase, 'client_wanted_pct', '.0f')} "
                f"| {pair(row, phase, 'client_jit_pct', '.0f')} "
                f"| {pair(row, phase, 'client_cpu_pct', '.0f')} "
                f"| {pair(row, phase, 'machine_idle_pct', '.0f')} "
                f"| {pair(row, phase, 'other_cpu_pct', '.0f')} "
                f"| {pair(row, phase, 'server_busiest_pct', '.0f')} "
                f"| {pair(row, phase, 'server_wanted_pct', '.0f')} "
                f"| {ceiling} "
                f"| {measured} "
                f"| {bound['class'] if bound else '>= ' + str(GOAL) + 'x'} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    preset = ap.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true", help="a smoke run: fewer records, one round")
    preset.add_argument(
        "--standard",
        action="store_true",
        help="issue 20's record counts (1 M x 100 B, 300 k x 1 KiB, 20 k x 16 KiB), one round",
    )
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3, --quick/--standard 1)")
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated subset of 100B,1KiB,16KiB")
    ap.add_argument("--producers", default="1,4", help="comma-separated producer counts")
    ap.add_argument(
        "--pairs", default=",".join(PAIRS), help="comma-separated subset of default,flush1,interval"
    )
    ap.add_argument("--records", type=float, default=1.0, help="scale the record counts by this factor")
    ap.add_argument(
        "--baseline",
        default=None,
        metavar="GIT_REF",
        help="also run `walfs serve` of this commit (before/after ratios from the same run)",
    )
    ap.add_argument(
        "--ceiling",
        action="store_true",
        help="also run bench/kafka/nullkafka (in memory, no disk) once per cell: the measured ceiling",
    )
    ap.add_argument(
        "--recycle",
        type=int,
        default=1024,
        metavar="MiB",
        help="write and delete this much before each server's run (benchkit.recycle); 0: never",
    )
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/runs/vs_kafka-TIME.json)")
    ap.add_argument(
        "--summarize",
        default=None,
        metavar="JSON",
        help="run nothing: summarize and print the tables of an earlier run's JSON again",
    )
    args = ap.parse_args()
    if args.summarize:
        earlier = json.loads(Path(args.summarize).read_text())
        summary = summarize(earlier["runs"])
        print(table(summary), file=sys.stderr)
        print(bounds_markdown(summary))
        return 0
    rounds = args.rounds or (1 if args.quick or args.standard else 3)
    base_counts = QUICK_RECORDS if args.quick else STANDARD_RECORDS if args.standard else FULL_RECORDS
    counts = {k: max(1000, int(v * args.records)) for k, v in base_counts.items()}
    sizes = [s for s in args.sizes.split(",") if s]
    producer_counts = [int(p) for p in args.producers.split(",") if p]
    pairs = [p for p in args.pairs.split(",") if p]
    for s in sizes:
        if s not in SIZES:
            ap.error(f"unknown size {s}")
    for p in pairs:
        if p not in PAIRS:
            ap.error(f"unknown pair {p}")
    if "interval" in pairs and "default" not in pairs:
        ap.error("the interval pair is compared with the default pair's Kafka: include default")
    cp = classpath()
    out_path = (
        Path(args.out)
        if args.out
        else REPO / "bench" / "results" / "runs" / time.strftime("vs_kafka-%Y%m%dT%H%M%S.json", time.gmtime())
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "run": benchkit.run_info(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "nproc": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "loadavg_before": os.getloadavg(),
            "page_reporting": benchkit.state(),
        },
        "settings": {
            "quick": args.quick,
            "standard": args.standard,
            "rounds": rounds,
            "recycle_mib": args.recycle,
            "ceiling": args.ceiling,
            "records": counts,
            "producer_props": PRODUCER_PROPS,
            "tool_jvm": TOOL_JVM,
            "kafka": "4.1.1, one KRaft node, -Xmx1g",
            "pairs": {k: {"kafka_topic_config": v[0], "walfs_fsync": v[1]} for k, v in PAIRS.items()},
        },
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="walfs-vs-kafka-") as tmp:
        walfs_servers = {p: WalfsServer(PAIRS[p][1], Path(tmp)) for p in pairs}
        base_servers: dict[str, WalfsServer] = {}
        if args.baseline:
            code = export_tree(args.baseline, Path(tmp) / "baseline-tree")
            base_servers = {p: WalfsServer(PAIRS[p][1], Path(tmp), code, "base") for p in pairs}
        null_server = NullKafka() if args.ceiling else None
        broker = KafkaBroker(heap="1g")
        sampler = Sampler(SAMPLE_INTERVAL)
        own_cpu0 = process_cpu_seconds(os.getpid())
        try:
            sampler.__enter__()
            broker.start()
            for s in [*walfs_servers.values(), *base_servers.values()]:
                s.start()
            if null_server is not None:
                null_server.start()
            # Every server gets a warm-up run, produce and consume, before the rounds: a new
            # JVM's first minutes (Kafka's JIT, of the fetch path as well as the produce
            # path) and walfs's first use of each path would be counted otherwise.
            for bootstrap in [
                broker.bootstrap,
                *(s.bootstrap for s in [*walfs_servers.values(), *base_servers.values()]),
                *([null_server.bootstrap] if null_server is not None else []),
            ]:
                create_topic(bootstrap, "warmup", {})
                produce(cp, bootstrap, "warmup", counts["100B"] // 4, 100, 1)
                consume(cp, bootstrap, "warmup", counts["100B"] // 4, 100)
            for rnd in range(rounds):
                for size in sizes:
                    for producers in producer_counts:
                        for pair in pairs:
                            kafka_conf = PAIRS[pair][0]
                            targets = [("walfs", walfs_servers[pair].bootstrap, walfs_servers[pair].pid())]
                            if pair in base_servers:
                                targets.append(
                                    ("base", base_servers[pair].bootstrap, base_servers[pair].pid())
                                )
                            if kafka_conf is not None:
                                targets.append(("kafka", broker.bootstrap, broker.pid()))
                            # nullkafka never syncs: once per cell, in the first pair's order
                            if null_server is not None and pair == pairs[0]:
                                targets.append(("null", null_server.bootstrap, null_server.pid()))
                            if rnd % 2 == 0:
                                targets.reverse()
                            for server, bootstrap, pid in targets:
                                run_pair = "null" if server == "null" else pair
                                topic = f"r{rnd}-{size}-{producers}p-{run_pair}"
                                create_topic(
                                    bootstrap, topic, (kafka_conf or {}) if server == "kafka" else {}
                                )
                                recycled = benchkit.recycle(Path(tmp), args.recycle)
                                run = one_run(
                                    cp,
                                    f"{server}/{run_pair}",
                                    bootstrap,
                                    pid,
                                    topic,
                                    counts[size],
                                    SIZES[size],
                                    producers,
                                    sampler=sampler,
                                )
                                result["runs"].append(
                                    {
                                        "round": rnd,
                                        "pair": run_pair,
                                        "size": size,
                                        "producers": producers,
                                        "server": server,
                                        "records": counts[size],
                                        "recycle_sys_ms_per_mib": recycled,
                                        **run,
                                    }
                                )
                                # After every run, so that a stopped run keeps what it measured.
                                out_path.write_text(json.dumps(result, indent=2) + "\n")
        finally:
            sampler.__exit__()
            # the sampler's cost: this process's CPU over the run (with the topic creations)
            result["machine"]["bench_process_cpu_s"] = round(process_cpu_seconds(os.getpid()) - own_cpu0, 2)
            for s in [*walfs_servers.values(), *base_servers.values()]:
                s.stop()
            if null_server is not None:
                null_server.stop()
            broker.stop()
    result["machine"]["loadavg_after"] = os.getloadavg()
    result["summary"] = summarize(result["runs"])
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result["summary"]), file=sys.stderr)
    print(bounds_markdown(result["summary"]), file=sys.stderr)
    print(f"JSON: {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
