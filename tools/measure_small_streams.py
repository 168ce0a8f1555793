"""Issue 35 measurement, two builds side by side in one run (JSON on stdout): single-topic
batch append and single append rates, and bytes on disk (du) and create time for N
one-record topics. Each measurement runs in a child process with the build's tree first
on sys.path; builds alternate, REPS times each.

usage: python tools/measure_small_streams.py BASELINE_TREE NEW_TREE [--topics 1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, shutil, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import walfs
what, n, base = sys.argv[2], int(sys.argv[3]), sys.argv[4]
d = tempfile.mkdtemp(dir=base)
def du(p):
    return sum(os.stat(os.path.join(r, f)).st_blocks * 512 for r, _, fs in os.walk(p) for f in fs)
try:
    w = walfs.Wal(os.path.join(d, "wal"), fsync="never")
    if what == "batch":
        batch = [b"v" * 100] * 1000
        w.append("t", batch)
        t = time.perf_counter()
        for _ in range(n // 1000):
            w.append("t", batch)
        out = {"records_per_s": n / (time.perf_counter() - t)}
    elif what == "single":
        rec = b"v" * 100
        w.append("t", rec)
        t = time.perf_counter()
        for _ in range(n):
            w.append("t", rec)
        out = {"records_per_s": n / (time.perf_counter() - t)}
    else:
        t = time.perf_counter()
        for i in range(n):
            w.append(f"topic-{i}", b"hello")
        el = time.perf_counter() - t
        w.close()
        b = du(d)
        out = {"bytes": b, "bytes_per_topic": b / n, "create_s": el}
    if not w.closed:
        w.close()
    print(json.dumps(out))
finally:
    shutil.rmtree(d)
"""


def run(tree: str, what: str, n: int, base: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree)
    p = subprocess.run(
        [sys.executable, "-c", CHILD, tree, what, str(n), base],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("baseline")
    ap.add_argument("new")
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch-records", type=int, default=1_000_000)
    ap.add_argument("--single-records", type=int, default=200_000)
    ap.add_argument("--only", choices=("batch", "single", "topics"), help="one measurement only")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="measure-small-")
    builds = {"baseline": a.baseline, "new": a.new}
    res: dict[str, dict[str, list[dict[str, float]]]] = {b: {} for b in builds}
    plan = [("batch", a.batch_records), ("single", a.single_records), ("topics", a.topics)]
    plan = [p for p in plan if a.only in (None, p[0])]
    for _ in range(a.reps):
        for what, n in plan:
            for b, tree in builds.items():
                res[b].setdefault(what, []).append(run(tree, what, n, base))
    summary: dict[str, object] = {"topics": a.topics, "reps": a.reps, "runs": res}
    for what, key in (("batch", "records_per_s"), ("single", "records_per_s"), ("topics", "bytes_per_topic")):
        for b in builds:
            if what not in res[b]:
                continue
            vals = [r[key] for r in res[b][what]]
            summary[f"{what}_{key}_{b}"] = {
                "median": statistics.median(vals),
                "min": min(vals),
                "max": max(vals),
            }
    os.rmdir(base)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
