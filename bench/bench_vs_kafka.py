"""walfs serve against Apache Kafka, on Kafka's own benchmark, in one run.

    .venv/bin/python bench/bench_vs_kafka.py --quick            # smoke run, ~3 min
    .venv/bin/python bench/bench_vs_kafka.py --standard --producers 1   # issue 20's sizes, one round
    .venv/bin/python bench/bench_vs_kafka.py --rounds 3         # the full matrix
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
bench/results/ (or --out), a summary table to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from real_kafka import KafkaBroker, classpath  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
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

_PERF = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of pid (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def walfs_tree() -> Path:
    """The tree whose walfs this process imports: PYTHONPATH's under bench/ab_trees.py (the
    server must run that tree's code, not this checkout's), else this checkout's."""
    spec = importlib.util.find_spec("walfs")
    if spec is None or spec.origin is None:
        return REPO
    return Path(spec.origin).resolve().parent.parent


class WalfsServer:
    """`walfs serve` of the tree at `code` (this checkout, or a --baseline export)."""

    def __init__(self, fsync: str, root: Path, code: Path | None = None, label: str = "walfs") -> None:
        self.fsync = fsync
        self.code = code or walfs_tree()
        self.dir = root / f"{label}-{fsync}"
        self.proc: subprocess.Popen[str] | None = None
        self.bootstrap = ""

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


def produce(cp: str, bootstrap: str, topic: str, records: int, size: int, producers: int) -> dict[str, Any]:
    """`producers` ProducerPerformance processes at once, records split among them."""
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
    runs = []
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
    return {
        "records_per_s": round(records / seconds),
        "mb_per_s": round(records * size / seconds / 1e6, 1),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": max(r["p99_ms"] for r in runs),
        "producers": runs,
    }


def consume(cp: str, bootstrap: str, topic: str, records: int, size: int) -> dict[str, Any]:
    p = subprocess.run(
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
        capture_output=True,
        text=True,
        timeout=900,
    )
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
    return {
        "records_per_s": round(got / fetch_s) if fetch_s > 0 else None,
        "mb_per_s": round(got * size / fetch_s / 1e6, 1) if fetch_s > 0 else None,
        "with_join_records_per_s": round(float(row["nMsg.sec"])),
        "rebalance_ms": int(row["rebalance.time.ms"]),
        "fetch_ms": int(row["fetch.time.ms"]),
    }


def one_run(
    cp: str, server: str, bootstrap: str, pid: int, topic: str, records: int, size: int, producers: int
) -> dict[str, Any]:
    c0 = cpu_seconds(pid)
    prod = produce(cp, bootstrap, topic, records, size, producers)
    c1 = cpu_seconds(pid)
    try:
        cons = consume(cp, bootstrap, topic, records, size)
    except (RuntimeError, subprocess.TimeoutExpired) as e:  # recorded; the matrix goes on
        cons = {"error": str(e)[-1000:], "records_per_s": None, "mb_per_s": None}
    c2 = cpu_seconds(pid)
    prod["server_cpu_s_per_m"] = round((c1 - c0) / records * 1e6, 2)
    cons["server_cpu_s_per_m"] = round((c2 - c1) / records * 1e6, 2)
    print(
        f"  {server:15s} {topic:28s} produce {prod['records_per_s']:>9,} rec/s p99 {prod['p99_ms']:>5} ms "
        f"cpu {prod['server_cpu_s_per_m']:6.2f} s/M | consume {cons['records_per_s'] or 0:>9,} rec/s "
        f"cpu {cons['server_cpu_s_per_m']:6.2f} s/M",
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
    per-round walfs/Kafka ratios (the interval pair against the default pair's Kafka)."""
    cells: dict[tuple[str, str, int], dict[int, dict[str, Any]]] = {}
    for r in runs:
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
    for (pair, size, producers), rounds in sorted(cells.items()):
        row: dict[str, Any] = {"pair": pair, "size": size, "producers": producers, "rounds": len(rounds)}
        per_server: dict[str, list[dict[str, Any]]] = {}
        ratios: dict[str, list[float]] = {}
        for rnd, by_server in rounds.items():
            if "kafka" not in by_server and (size, producers, rnd) in kafka_default:
                by_server = {**by_server, "kafka": kafka_default[(size, producers, rnd)]}
            for s, r in by_server.items():
                per_server.setdefault(s, []).append(r)
            w = by_server.get("walfs")
            for other in ("kafka", "base"):
                k = by_server.get(other)
                if w and k:
                    for phase, key in metrics:
                        a, b = w[phase].get(key), k[phase].get(key)
                        if a and b:
                            ratios.setdefault(f"{other}:{phase}.{key}", []).append(a / b)
        for s, rs in per_server.items():
            row[s] = {
                f"{phase}.{key}": spread([r[phase][key] for r in rs if r[phase].get(key) is not None])
                for phase, key in metrics
            }
        for other in ("kafka", "base"):
            mine = {k.split(":", 1)[1]: v for k, v in ratios.items() if k.startswith(other + ":")}
            if mine:
                row[f"walfs_over_{other}"] = {k: round(statistics.median(v), 3) for k, v in mine.items()}
        out.append(row)
    return out


def table(summary: list[dict[str, Any]]) -> str:
    """One line per cell and comparison: medians, and the median of per-round ratios."""
    lines = [
        "pair      size   prod  vs    | produce rec/s walfs / other = ratio "
        "| consume rec/s walfs / other = ratio | cpu s/M produce w/o, consume w/o"
    ]

    def med(d: dict[str, Any], key: str) -> float:
        return float(d.get(key, {}).get("median", 0) or 0)

    for row in summary:
        w = row.get("walfs", {})
        for other in ("kafka", "base"):
            if f"walfs_over_{other}" not in row:
                continue
            k, r = row.get(other, {}), row[f"walfs_over_{other}"]
            lines.append(
                f"{row['pair']:9s} {row['size']:6s} {row['producers']:4d}  {other:5s} | "
                f"{med(w, 'produce.records_per_s'):>10,.0f} / {med(k, 'produce.records_per_s'):>10,.0f} = "
                f"{r.get('produce.records_per_s', 0):5.2f}x | "
                f"{med(w, 'consume.records_per_s'):>10,.0f} / {med(k, 'consume.records_per_s'):>10,.0f} = "
                f"{r.get('consume.records_per_s', 0):5.2f}x | "
                f"{med(w, 'produce.server_cpu_s_per_m'):.2f}/{med(k, 'produce.server_cpu_s_per_m'):.2f}, "
                f"{med(w, 'consume.server_cpu_s_per_m'):.2f}/{med(k, 'consume.server_cpu_s_per_m'):.2f}"
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
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/vs_kafka-TIME.json)")
    args = ap.parse_args()
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
        else REPO / "bench" / "results" / time.strftime("vs_kafka-%Y%m%dT%H%M%S.json", time.gmtime())
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "nproc": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "loadavg_before": os.getloadavg(),
        },
        "settings": {
            "quick": args.quick,
            "standard": args.standard,
            "rounds": rounds,
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
        broker = KafkaBroker(heap="1g")
        try:
            broker.start()
            for s in [*walfs_servers.values(), *base_servers.values()]:
                s.start()
            # Kafka gets a warm-up run as well as the JIT's own rounds: a new JVM's first
            # minutes would be counted against it otherwise.
            warm = "warmup"
            create_topic(broker.bootstrap, warm, {})
            produce(cp, broker.bootstrap, warm, counts["100B"] // 4, 100, 1)
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
                            if rnd % 2 == 0:
                                targets.reverse()
                            for server, bootstrap, pid in targets:
                                topic = f"r{rnd}-{size}-{producers}p-{pair}"
                                create_topic(
                                    bootstrap, topic, (kafka_conf or {}) if server == "kafka" else {}
                                )
                                run = one_run(
                                    cp,
                                    f"{server}/{pair}",
                                    bootstrap,
                                    pid,
                                    topic,
                                    counts[size],
                                    SIZES[size],
                                    producers,
                                )
                                result["runs"].append(
                                    {
                                        "round": rnd,
                                        "pair": pair,
                                        "size": size,
                                        "producers": producers,
                                        "server": server,
                                        "records": counts[size],
                                        **run,
                                    }
                                )
                                # After every run, so that a stopped run keeps what it measured.
                                out_path.write_text(json.dumps(result, indent=2) + "\n")
        finally:
            for s in [*walfs_servers.values(), *base_servers.values()]:
                s.stop()
            broker.stop()
    result["machine"]["loadavg_after"] = os.getloadavg()
    result["summary"] = summarize(result["runs"])
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result["summary"]), file=sys.stderr)
    print(f"JSON: {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
