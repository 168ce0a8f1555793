"""Before/after of the append calls: runs the same cases against two walfs source trees
(each with its C extension built in place), alternating, in one run. Prints JSON.

    .venv/bin/python bench/ab_append.py OLD_TREE NEW_TREE [--rounds 3] [--count 200000]
        [--size 100] [--fsync never|interval]

Cases (records of --size bytes, rates per second of CPU time and of wall time): the
stream handle (Wal.appender(t).append, one record per call; a tree without it runs
Wal.append), Wal.append one record per call, and Wal.append_batch of 2,000. Each case
runs in a fresh process with PYTHONPATH set to its tree (and its tree as the working
directory), so both trees' walfs never meet in one process.
(How to get OLD_TREE: `git archive <commit> | tar -x -C DIR`, then `python setup.py
build_ext --inplace` in DIR.)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

CASE = r"""
import json, shutil, sys, tempfile, time
import walfs
how, count, size, fsync = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
d = tempfile.mkdtemp(prefix="walfs-ab-")
w = walfs.Wal(d + "/w", fsync=fsync)
v = b"x" * size
batch = [v] * 2000
t0, c0 = time.perf_counter(), time.process_time()
if how == "handle" and hasattr(w, "appender"):
    handle = w.appender("t").append
    for _ in range(count):
        handle(v)
elif how in ("one", "handle"):
    append = w.append
    for _ in range(count):
        append("t", v)
else:
    for _ in range(count // 2000):
        w.append_batch("t", batch)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
w.close()
shutil.rmtree(d)
print(json.dumps({"wall": count / wall, "cpu": count / cpu, "walfs": walfs.__file__}))
"""


def run(tree: str, how: str, count: int, size: int, fsync: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, "-c", CASE, how, str(count), str(size), fsync],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    ).stdout
    got = json.loads(out)
    assert got["walfs"].startswith(os.path.abspath(tree)), got["walfs"]
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--count", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--fsync", choices=("never", "interval"), default="never")
    a = p.parse_args()
    res: dict[str, dict[str, list[dict[str, float]]]] = {}
    for _ in range(a.rounds):
        for how in ("handle", "one", "batch"):
            for name, tree in (("old", a.old), ("new", a.new)):
                res.setdefault(how, {}).setdefault(name, []).append(run(tree, how, a.count, a.size, a.fsync))
    out: dict[str, object] = {
        "rounds": a.rounds,
        "count": a.count,
        "size": a.size,
        "fsync": a.fsync,
        "loadavg_1m": os.getloadavg()[0],
    }
    cases: dict[str, object] = {}
    out["cases"] = cases
    for how, by in res.items():
        med = {
            n: {k: statistics.median(r[k] for r in runs) for k in ("cpu", "wall")} for n, runs in by.items()
        }
        cases[how] = {
            "median": {n: {k: round(v) for k, v in m.items()} for n, m in med.items()},
            "new_vs_old_cpu": round(med["new"]["cpu"] / med["old"]["cpu"], 2),
            "new_vs_old_wall": round(med["new"]["wall"] / med["old"]["wall"], 2),
            "runs_cpu": {n: [round(r["cpu"]) for r in runs] for n, runs in by.items()},
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
