"""Before/after of any benchmark: runs one bench script against two source trees, alternating,
in one run, and writes every round's JSON side by side.

    python bench/ab_trees.py --old /path/to/old/tree --new . --rounds 2 \\
        --out ab-mount.json -- bench/mount/bench_mount.py --size-mib 256 --rounds 1
    python bench/ab_trees.py --table ab-mount.json        # the table again
    make bench-ab OLD=/path/to/old/tree                   # engine, single append, mount, Kafka face

The script is always the NEW tree's (the same measurement for both); the walfs package
under test comes from each tree through PYTHONPATH, which the benchmarks' daemons and
child processes inherit, and each run's working directory is its tree (where `python -m`
processes, such as Spark's Python workers, look first); relative paths among the script's
arguments are taken from there. Each tree must have its C core built in place (`python setup.py
build_ext --inplace`). The first tree of a round alternates (old first in odd rounds).

After the run, a table on stderr: every number the script reports (its JSON's numeric
leaves, the run's own metadata apart), the median over the rounds of each tree, new/old,
and the spread of each tree's rounds (max/min): a ratio inside the spread is no change."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


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


def leaves(doc: Any, path: str = "") -> dict[str, float]:
    """The numeric leaves of a JSON document by dotted path; lists of records by index,
    lists of plain numbers (a script's own per-round samples) and "run" left out."""
    out: dict[str, float] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            if not (path == "" and k in ("run", "machine")):
                out.update(leaves(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            if isinstance(v, (dict, list)):
                out.update(leaves(v, f"{path}[{i}]"))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out[path] = float(doc)
    return out


def table(doc: dict[str, Any]) -> list[str]:
    """One line per number: old and new medians, new/old, and each tree's max/min."""
    per: dict[str, dict[str, list[float]]] = {}
    for r in doc["rounds"]:
        for key, v in leaves(r["result"]).items():
            per.setdefault(key, {"old": [], "new": []})[r["which"]].append(v)
    lines = [f"{'figure':60s} {'old':>12s} {'new':>12s} {'new/old':>8s} {'spread old':>10s} {'new':>6s}"]

    def sp(xs: list[float]) -> str:
        return f"{max(xs) / min(xs):.2f}" if xs and min(xs) > 0 else "-"

    for key, v in per.items():
        if not v["old"] or not v["new"]:
            continue
        o, n = statistics.median(v["old"]), statistics.median(v["new"])
        ratio = f"{n / o:.2f}" if o else "-"
        lines.append(f"{key[:60]:60s} {o:12.4g} {n:12.4g} {ratio:>8s} {sp(v['old']):>10s} {sp(v['new']):>6s}")
    return lines


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        for path in sys.argv[2:]:
            print("\n".join(table(json.load(open(path)))))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument(
        "script", nargs=argparse.REMAINDER, help="-- bench/FACE/X.py ARGS (the script must take --out)"
    )
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
    print("\n".join(table(doc)), file=sys.stderr)


if __name__ == "__main__":
    main()
