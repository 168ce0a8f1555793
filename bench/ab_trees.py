"""Before/after of any benchmark: runs one bench script against two source trees, alternating,
in one run, and writes every round's JSON side by side.

    python bench/ab_trees.py --old /path/to/old/tree --new . --rounds 2 \\
        --out ab-mount.json -- bench/bench_mount.py --size-mib 256 --rounds 1

The script is always the NEW tree's (the same measurement for both); the walfs package
under test comes from each tree through PYTHONPATH, which the benchmarks' daemons and
child processes inherit, and each run's working directory is its tree (where `python -m`
processes, such as Spark's Python workers, look first); relative paths among the script's
arguments are taken from there. Each tree must have its C core built in place (`python setup.py
build_ext --inplace`). The first tree of a round alternates (old first in odd rounds)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def run_one(tree: str, script: list[str]) -> dict:
    tree = os.path.abspath(tree)
    env = {**os.environ, "PYTHONPATH": tree}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        t0 = time.monotonic()
        # In the tree's own directory: processes started with `python -m` (Spark's Python
        # workers, which run the data source's tasks) put their working directory before
        # PYTHONPATH, so run from the new tree they would import its walfs for both trees.
        subprocess.run(
            [sys.executable, os.path.abspath(script[0]), *script[1:], "--out", out.name],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=tree,
        )
        result = json.load(open(out.name))
    return {"tree": tree, "seconds": round(time.monotonic() - t0, 1), "result": result}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- bench/X.py ARGS (the script must take --out)")
    args = p.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    rounds = []
    for r in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        if r % 2:
            order.reverse()
        for name, tree in order:
            got = run_one(tree, script)
            got["which"] = name
            rounds.append(got)
            print(f"round {r + 1} {name}: {got['seconds']} s", file=sys.stderr, flush=True)
    doc = {
        "script": script,
        "old": args.old,
        "new": args.new,
        "load_before": os.getloadavg(),
        "rounds": rounds,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
