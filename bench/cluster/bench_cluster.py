"""walfs on a Kafka cluster against Kafka's own perf tools, on the same cluster, in one run.

    .venv/bin/python bench/cluster/bench_cluster.py --quick            # smoke run, a few minutes
    .venv/bin/python bench/cluster/bench_cluster.py --rounds 3         # the full run

Starts a real Kafka 4.1.1 cluster (tests/real_kafka.py; --nodes 3 by default: three KRaft
JVMs, replication factor 3, min.insync.replicas=2), then for 100 B and 1 KiB records,
alternating which side goes first every round:

  kafka_produce   org.apache.kafka.tools.ProducerPerformance, acks=all, linger.ms=5,
                  batch.size=1 MiB, on a topic of 1 partition, replication factor 3
  wal_append      Wal.append (a list) on the Kafka engine (kafka://.../NS): one stream (so
                  one region, one partition, like the Kafka topic), --threads callers,
                  each call a batch of --batch-bytes (acks=all, idempotent producer)
  mount_append    `dd bs=1M` of a file of lines into a topic file of a `walfs mount` of
                  the same namespace (each write() one append of whole lines)
  kafka_consume   org.apache.kafka.tools.ConsumerPerformance of the produced topic
                  (fetch rate, group join left out)
  wal_read        a fresh read-only engine opens the namespace and reads every record
                  of the stream (Wal.read_records in pages of 10,000): open + replay
                  + reads, all from the cluster

Per cell: records/s and MB/s per round, median/min/max, and the median of the per-round
walfs/Kafka ratios (goal >= 0.7 for batch appends and reads). JSON to --out (default
bench/results/runs/cluster-<time>.json), a summary table on stderr. --quick: one round of
20,000 and 6,000 records.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "kafka"))

import benchkit  # noqa: E402
from bench_vs_kafka import consume, produce  # noqa: E402
from benchkit import process_cpu_seconds as cpu_seconds  # noqa: E402
from conftest_mount import Mount  # noqa: E402
from real_kafka import KafkaCluster, classpath  # noqa: E402

import walfs  # noqa: E402

SIZES = {"100B": 100, "1KiB": 1024}
FULL_RECORDS = {"100B": 1_000_000, "1KiB": 300_000}
QUICK_RECORDS = {"100B": 20_000, "1KiB": 6_000}


def create_topic(bootstrap: str, topic: str, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    isr = "2" if rf >= 3 else "1"
    fut = admin.create_topics([NewTopic(topic, 1, rf, config={"min.insync.replicas": isr})])[topic]
    fut.result(timeout=60)


def rate(records: int, size: int, seconds: float) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "mb_per_s": round(records * size / seconds / 1e6, 1),
    }


def wal_append(
    target: str, topic: str, records: int, size: int, batch_bytes: int, threads: int
) -> dict[str, Any]:
    """records of `size` bytes through Wal.append (a list), `threads` callers on one stream."""
    per_call = max(1, batch_bytes // size)
    calls = (records + per_call - 1) // per_call
    value = b"v" * size
    with walfs.Wal(target) as wal:
        wal.engine.create(topic, 0)
        errors: list[BaseException] = []

        def caller(k: int) -> None:
            try:
                for c in range(k, calls, threads):
                    n = min(per_call, records - c * per_call)
                    wal.append(topic, [value] * n)
            except BaseException as e:
                errors.append(e)

        t0 = time.monotonic()
        ths = [threading.Thread(target=caller, args=(k,)) for k in range(threads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        took = time.monotonic() - t0
        if errors:
            raise errors[0]
        if wal.info(topic).high_watermark != records:
            raise RuntimeError(f"{topic}: {wal.info(topic).high_watermark} records, expected {records}")
    return {**rate(records, size, took), "records_per_call": per_call, "threads": threads}


def mount_append(mount: Mount, topic: str, records: int, size: int, work: Path) -> dict[str, Any]:
    """dd bs=1M of `records` lines (size-1 bytes + newline) into the mount's topic file."""
    src = work / f"lines-{size}"
    line = b"m" * (size - 1) + b"\n"
    with src.open("wb") as f:
        left = records
        while left:
            n = min(left, 100_000)
            f.write(line * n)
            left -= n
    t0 = time.monotonic()
    subprocess.run(
        [
            "dd",
            f"if={src}",
            f"of={mount.path / topic}",
            "bs=1M",
            "oflag=append",
            "conv=notrunc",
            "status=none",
        ],
        check=True,
        timeout=1800,
    )
    took = time.monotonic() - t0
    src.unlink()
    got = int(os.getxattr(mount.path / topic, "user.walfs.high_watermark"))
    if got != records:
        raise RuntimeError(f"mount: {got} records in {topic}, expected {records}")
    return rate(records, size, took)


def wal_read(target: str, topic: str, records: int, size: int) -> dict[str, Any]:
    t0 = time.monotonic()
    got = 0
    with walfs.Wal(target, read_only=True) as wal:
        opened = time.monotonic() - t0
        while got < records:
            page = wal.read(topic, got, max_records=10_000)
            if not page:
                raise RuntimeError(f"{topic}: read stopped at {got} of {records}")
            got += len(page)
    return {**rate(records, size, time.monotonic() - t0), "open_s": round(opened, 3)}


def summarize(rounds: list[dict[str, Any]], size_name: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cell in ("kafka_produce", "wal_append", "mount_append", "kafka_consume", "wal_read"):
        vals = [
            r[size_name][cell]["records_per_s"] for r in rounds if r[size_name][cell].get("records_per_s")
        ]
        if vals:
            out[cell] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    for walfs_cell, kafka_cell in (
        ("wal_append", "kafka_produce"),
        ("mount_append", "kafka_produce"),
        ("wal_read", "kafka_consume"),
    ):
        ratios = [
            r[size_name][walfs_cell]["records_per_s"] / r[size_name][kafka_cell]["records_per_s"]
            for r in rounds
            if r[size_name][walfs_cell].get("records_per_s") and r[size_name][kafka_cell].get("records_per_s")
        ]
        if ratios:
            out[f"{walfs_cell}/{kafka_cell}"] = {
                "median": round(statistics.median(ratios), 3),
                "min": round(min(ratios), 3),
                "max": round(max(ratios), 3),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4, help="Wal.append (a list) callers")
    ap.add_argument("--batch-bytes", type=int, default=1 << 20, help="bytes per Wal.append (a list) call")
    ap.add_argument("--records-100", type=int, default=None)
    ap.add_argument("--records-1k", type=int, default=None)
    ap.add_argument("--no-mount", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    counts = dict(QUICK_RECORDS if args.quick else FULL_RECORDS)
    if args.records_100:
        counts["100B"] = args.records_100
    if args.records_1k:
        counts["1KiB"] = args.records_1k
    cp = classpath()
    work = Path(tempfile.mkdtemp(prefix="walfs-bench-cluster-"))
    cluster = KafkaCluster(args.nodes).start()
    mount: Mount | None = None
    try:
        ns = f"bench{uuid.uuid4().hex[:8]}"
        target = f"kafka://{cluster.bootstrap}/{ns}?regions=8"
        walfs.Wal(target).close()  # makes the namespace's topics
        if not args.no_mount:
            mount = Mount(work, "m", target)
            mount.start()
        rf = min(3, args.nodes)
        rounds = []
        for k in range(args.rounds):
            row: dict[str, Any] = {}
            for size_name, size in SIZES.items():
                n = counts[size_name]
                ktopic, wtopic, mtopic = (f"{x}-{size_name}-{k}" for x in ("k", "w", "m"))
                create_topic(cluster.bootstrap, ktopic, rf)
                cells: dict[str, Any] = {}
                kafka_first = k % 2 == 0
                for side in ("kafka", "walfs") if kafka_first else ("walfs", "kafka"):
                    cpu0 = [cpu_seconds(cluster.pid(i)) for i in range(args.nodes)]
                    if side == "kafka":
                        cells["kafka_produce"] = produce(cp, cluster.bootstrap, ktopic, n, size, 1)
                        cells["kafka_consume"] = consume(cp, cluster.bootstrap, ktopic, n, size)
                    else:
                        cells["wal_append"] = wal_append(
                            target, wtopic, n, size, args.batch_bytes, args.threads
                        )
                        cells["wal_read"] = wal_read(target, wtopic, n, size)
                        if mount is not None:
                            cells["mount_append"] = mount_append(mount, mtopic, n, size, work)
                    cells[f"{side}_broker_cpu_s"] = round(
                        sum(cpu_seconds(cluster.pid(i)) for i in range(args.nodes)) - sum(cpu0), 2
                    )
                    print(f"round {k} {size_name} {side}: done", file=sys.stderr, flush=True)
                row[size_name] = cells
            rounds.append(row)
        out = {
            "bench": "cluster",
            "run": benchkit.run_info(work),
            "params": {**vars(args), "records": counts},
            "rounds": rounds,
            "summary": {s: summarize(rounds, s) for s in SIZES},
        }
        runs_dir = REPO / "bench" / "results" / "runs"
        dest = Path(args.out) if args.out else runs_dir / f"cluster-{int(time.time())}.json"
        benchkit.write_json(out, dest, stdout=False)
        for s, cells in out["summary"].items():
            for cell, v in cells.items():
                print(
                    f"{s:5s} {cell:30s} median {v['median']:>10} (min {v['min']}, max {v['max']})",
                    file=sys.stderr,
                )
        print(f"JSON: {dest}", file=sys.stderr)
    finally:
        if mount is not None:
            mount.cleanup()
        cluster.stop()


if __name__ == "__main__":
    main()
