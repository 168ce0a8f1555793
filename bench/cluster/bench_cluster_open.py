"""Opening a walfs namespace on a Kafka cluster, with and without region snapshots.

    .venv/bin/python bench/cluster/bench_cluster_open.py --quick        # 20,000 records, one round: ~1 min
    .venv/bin/python bench/cluster/bench_cluster_open.py                # 1 M records

Starts a real Kafka 4.1.1 cluster (tests/real_kafka.py; --nodes, default 1) or uses
--bootstrap, writes --records small records (--size bytes) over --streams streams
(topics s0000.., partition 0) of one namespace with --regions regions, in appends of
--batch records (Wal.append (a list) on the Kafka engine, --writers threads), then times
opening the namespace (KafkaEngine construction: topics checked, meta topic read, every
region replayed to the cluster's end, i.e. open + ready) in two ways, alternating:

  no_snapshots: use_snapshots=False, every region replayed from its first record;
  snapshots:    after the writer snapshotted every region (what the cleaner does every
                `snapshot_every` log records), only what follows the snapshot is replayed.

The writer runs with the cleaner off, so the "no_snapshots" figure is the whole log and
the "snapshots" one the best case; the cleaner's steady state replays up to
snapshot_every records per region more (a --behind N run appends N log records per region
after the snapshots to show that cost). JSON on stdout (or --out), a summary on stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

import benchkit  # noqa: E402
from real_kafka import KafkaCluster  # noqa: E402

from walfs.cluster.engine import KafkaEngine  # noqa: E402
from walfs.cluster.layout import region_of, stream_key_bytes  # noqa: E402
from walfs.engine.rules import append_lines  # noqa: E402


def write(target: str, records: int, streams: int, batch: int, size: int, writers: int) -> dict[str, Any]:
    eng = KafkaEngine(target, reclaim_interval_s=1e9)  # the cleaner off: snapshots come below
    names = [f"s{i:04d}" for i in range(streams)]
    appends = (records + batch - 1) // batch
    value = b"x" * size
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for a in range(k, appends, writers):
                n = min(batch, records - a * batch)
                eng.append(names[a % streams], 0, value * n, _lens(n, 0), _lens(n, size))
        except BaseException as e:  # reported after join
            errors.append(e)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        eng.close()
        raise errors[0]
    took = time.monotonic() - t0
    return {"engine": eng, "seconds": took, "appends": appends, "records_per_s": records / took}


def _lens(n: int, size: int) -> array[int]:
    return array("I", [size]) * n


def snapshot_all(eng: KafkaEngine) -> dict[str, Any]:
    t0 = time.monotonic()
    sizes = []
    for r in range(eng.t.regions):
        snap = eng.snapshot(r)
        sizes.append(len(json.dumps(snap, separators=(",", ":"))))
    return {"seconds": time.monotonic() - t0, "json_bytes": sum(sizes)}


def append_behind(eng: KafkaEngine, per_region: int, streams: int) -> None:
    """per_region log records into each region after its snapshot (one small batch each)."""
    by_region: dict[int, str] = {}
    for i in range(streams):
        name = f"s{i:04d}"
        by_region.setdefault(region_of(stream_key_bytes(eng.org_id, name, 0), eng.t.regions), name)
    for name in by_region.values():
        for _ in range(per_region):
            append_lines(eng, name, 0, b"late\n")


def time_open(target: str, use_snapshots: bool) -> dict[str, Any]:
    t0 = time.monotonic()
    eng = KafkaEngine(target, read_only=True, use_snapshots=use_snapshots)
    took = time.monotonic() - t0
    try:
        rep = eng.report()
        total = sum(eng.info(t, p).high_watermark for t, p in eng.streams())
    finally:
        eng.close()
    return {"seconds": took, "replayed": rep["open_replayed"], "streams": rep["streams"], "records": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100, help="records per append (one Kafka record)")
    ap.add_argument("--size", type=int, default=100, help="bytes per record")
    ap.add_argument("--regions", type=int, default=8)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--behind", type=int, default=0, help="log records per region after the snapshots")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--bootstrap", default=None, help="an existing cluster instead of starting one")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="20,000 records, one round: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds = 20_000, 1

    cluster = None
    if args.bootstrap is None:
        cluster = KafkaCluster(args.nodes, heap="1g").start()
    bootstrap = args.bootstrap or (cluster.bootstrap if cluster else "")
    try:
        target = f"kafka://{bootstrap}/open{uuid.uuid4().hex[:8]}?regions={args.regions}"
        w = write(target, args.records, args.streams, args.batch, args.size, args.writers)
        eng = w.pop("engine")
        try:
            runs: dict[str, list[dict[str, Any]]] = {"no_snapshots": []}
            runs["no_snapshots"].append(time_open(target, False))  # before any snapshot exists
            snap = snapshot_all(eng)
            if args.behind:
                append_behind(eng, args.behind, args.streams)
        finally:
            eng.close()
        runs["snapshots"] = []
        for k in range(args.rounds):
            order = [True, False] if k % 2 == 0 else [False, True]
            for use in order:
                if k == 0 and not use:
                    continue  # the first no_snapshots round ran before the snapshots
                runs["snapshots" if use else "no_snapshots"].append(time_open(target, use))
        summary = {
            name: {
                "median_s": statistics.median(r["seconds"] for r in rs),
                "min_s": min(r["seconds"] for r in rs),
                "max_s": max(r["seconds"] for r in rs),
                "replayed": rs[0]["replayed"],
            }
            for name, rs in runs.items()
        }
        out = {
            "bench": "cluster_open",
            "run": benchkit.run_info(),
            "params": vars(args),
            "cluster_nodes": args.nodes if cluster else "external",
            "write": w,
            "snapshot_write": snap,
            "runs": runs,
            "summary": summary,
            "speedup": summary["no_snapshots"]["median_s"] / summary["snapshots"]["median_s"],
        }
        benchkit.write_json(out, args.out, stdout=not args.out)
        for name, s in summary.items():
            print(
                f"{name:13s} open {s['median_s']:.2f} s (min {s['min_s']:.2f}, max {s['max_s']:.2f}),"
                f" {s['replayed']} log records replayed",
                file=sys.stderr,
            )
        print(f"write {w['records_per_s']:.0f} rec/s; snapshots {snap['json_bytes']} B JSON", file=sys.stderr)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
