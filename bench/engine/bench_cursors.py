"""A consumer group over many topics: what a commit costs as the group's cursors grow
(issue 35). Prints JSON.

    python bench/engine/bench_cursors.py [--quick] [--counts 1000,10000] [--old TREE]
        [--old-max N] [--rounds R] [--dir DIR] [--out FILE] [--label L]

For each count N of topics (one record each, made first and not timed), in a fresh data
directory: a group's first commit of every topic, one by one (Wal.commit: what a mount
consumer file, or a Kafka client committing one partition at a time, does), then a second
commit of every topic one by one, then one commit_many of all (a Kafka OffsetCommit of every
partition). Figures: commits per second, the mean time of a commit among the first and the
last tenth of the first commits (a commit whose cost grows with the cursors already there
shows as a ratio above 1), and the bytes the process wrote (/proc/self/io write_bytes) per
first commit. Every cursor is read back afterwards (the last commit's offset).

--old TREE runs the same in another tree (its C built in place; PYTHONPATH), alternating
with this one, up to --old-max topics (its cost may grow with the square of N): the
baseline of the same run. Each (tree, N) runs --rounds times; the JSON keeps every round
and the spread. --quick (`make bench`): 300 and 3,000 topics, 2 rounds, this tree alone:
the growth ratio and the bytes per commit at two counts are the check that a commit's cost
does not follow the cursors already there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchkit  # noqa: E402

CHILD = r"""
import json, sys, time
import walfs

d, n = sys.argv[1], int(sys.argv[2])

def written():
    for line in open("/proc/self/io"):
        if line.startswith("write_bytes:"):
            return int(line.split()[1])

with walfs.Wal(d, fsync="never") as w:
    for i in range(n):
        w.append(f"t{i:06d}", [b"0123456789abcde", b"0123456789abcde"])
out = {}
with walfs.Wal(d) as w:
    times = []
    b0 = written()
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        w.commit("g", f"t{i:06d}", 1)
        times.append(time.perf_counter() - t)
    out["first_s"] = time.perf_counter() - t0
    out["first_written_bytes"] = written() - b0
    tenth = max(1, n // 10)
    out["first_tenth_mean_s"] = sum(times[:tenth]) / tenth
    out["last_tenth_mean_s"] = sum(times[-tenth:]) / tenth
    t0 = time.perf_counter()
    for i in range(n):
        w.commit("g", f"t{i:06d}", 2)
    out["again_s"] = time.perf_counter() - t0
    many = getattr(w.engine, "commit_many", None)
    if many is not None:
        t0 = time.perf_counter()
        got = many("g", [(f"t{i:06d}", 0, 1, "") for i in range(n)])
        out["commit_many_s"] = time.perf_counter() - t0
        assert all(g is True for g in got)
        want = 1
    else:
        want = 2
with walfs.Wal(d, read_only=True) as r:
    assert all(r.committed("g", f"t{i:06d}") == want for i in range(n))
print(json.dumps(out))
"""


def run(tree: Path, d: Path, n: int) -> dict[str, Any]:
    shutil.rmtree(d, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    got = subprocess.run(
        [sys.executable, "-c", CHILD, str(d), str(n)],
        capture_output=True,
        text=True,
        timeout=7200,
        env=env,
        cwd=d.parent,
    )
    shutil.rmtree(d, ignore_errors=True)
    if got.returncode != 0:
        raise RuntimeError(f"child failed: {got.stderr[-2000:]}")
    out = dict(json.loads(got.stdout.strip().splitlines()[-1]))
    out["first_per_s"] = n / out["first_s"]
    out["again_per_s"] = n / out["again_s"]
    out["growth"] = out["last_tenth_mean_s"] / out["first_tenth_mean_s"]
    out["first_written_per_commit_bytes"] = out["first_written_bytes"] / n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1000,10000")
    ap.add_argument("--old", default=None, help="another tree, the baseline")
    ap.add_argument("--old-max", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--label", default=None)
    ap.add_argument("--quick", action="store_true", help="300 and 3,000 topics, 2 rounds")
    a = ap.parse_args()
    if a.quick:
        a.counts, a.rounds = "300,3000", 2
    base = Path(tempfile.mkdtemp(prefix="walfs-cursors-", dir=a.dir))
    trees = {"new": benchkit.REPO}
    if a.old:
        trees["old"] = Path(a.old).resolve()
    result: dict[str, Any] = {"bench": "cursors", "run": benchkit.run_info(base), "label": a.label}
    rows: list[dict[str, Any]] = []
    result["runs"] = rows
    try:
        for n in [int(x) for x in a.counts.split(",")]:
            row: dict[str, Any] = {"topics": n}
            rows.append(row)
            for _round in range(a.rounds):
                for name, tree in trees.items():  # alternating: the same conditions for both
                    if name == "old" and n > a.old_max:
                        continue
                    print(f"{name} {n}", file=sys.stderr, flush=True)
                    row.setdefault(name, []).append(run(tree, base / "wal", n))
                    benchkit.write_json(result, a.out, stdout=False)
            for name in trees:
                got = row.get(name, [])
                if got:
                    row[f"{name}_spread"] = {
                        k: benchkit.spread([g[k] for g in got])
                        for k in ("first_per_s", "again_per_s", "growth", "first_written_per_commit_bytes")
                    }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    benchkit.write_json(result, a.out)


if __name__ == "__main__":
    main()
