"""Torture (b): simulated power cuts of the engine (Wal(test_mode=True) and walfs.local.debug.power_cut) with
appends, syncs, trims, reclaims and cursor commits in the mix. After every cut the WAL is
reopened and checked: every record acknowledged durable (sync returned) is there, byte for
byte, from the durable low watermark on; no record is other than what was appended; every
committed cursor reads back. Part of `make torture` (tools/torture.py); standalone:
    python tools/torture_powercut.py --cycles 50 --seed 1
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from conftest import SMALL  # noqa: E402  (tests/ helpers are reused, not copied)

import walfs  # noqa: E402
from walfs.local import debug

TOPICS = ("a", "b", "c", "d")


def _value(rng: random.Random, t: str, i: int) -> bytes:
    head = f"{t}:{i}:".encode()
    return head + bytes([97 + i % 26]) * rng.choice((0, 1, 50, 700, 5000, 70_000))


def run(cycles: int, seed: int, workdir: str) -> dict[str, Any]:
    rng = random.Random(seed)
    d = os.path.join(workdir, "wal")
    written: dict[str, list[bytes]] = {t: [] for t in TOPICS}  # all appended, cut back after a cut
    durable: dict[str, int] = {t: 0 for t in TOPICS}
    low: dict[str, int] = {t: 0 for t in TOPICS}
    cursors: dict[tuple[str, str], int] = {}
    acked = lost = problems = splits = healed = 0
    details: list[str] = []
    for cycle in range(cycles):
        w = walfs.Wal(
            d,
            fsync=rng.choice(("never", "always", "interval")),
            fsync_interval_ms=50,
            test_mode=True,
                reclaim_interval_s=3600,
            **SMALL,
        )
        # --- check what the last cut left
        healed += w.engine.report()["healed"]
        for t in TOPICS:
            hwm = w.info(t).high_watermark if t in w.topics() else 0
            if hwm < durable[t]:
                lost += durable[t] - hwm
                details.append(f"cycle {cycle}: {t} high {hwm} < durable {durable[t]}")
            start = max(low[t], w.info(t).low_watermark if t in w.topics() else 0)
            got: list[bytes] = []
            while start + len(got) < hwm:  # a read returns at most 16 MiB: read on
                more = w.read(t, start + len(got), max_records=1 << 20, max_bytes=1 << 30)
                if not more:
                    break
                got += more
            if got != written[t][start : start + len(got)] or len(got) != hwm - start:
                problems += 1
                details.append(f"cycle {cycle}: {t} records {start}..{hwm} differ from what was appended")
            del written[t][hwm:]
            durable[t] = min(durable[t], hwm)
        for (g, t), off in cursors.items():
            have = w.committed(g, t)
            if have != off:
                problems += 1
                details.append(f"cycle {cycle}: cursor {g}/{t} {have} != {off}")
        # --- a burst of work, then the cut
        for _ in range(rng.randrange(5, 40)):
            t = rng.choice(TOPICS)
            op = rng.random()
            if op < 0.7:
                n = rng.choice((1, 2, 7, 60))
                base = len(written[t])
                vals = [_value(rng, t, base + i) for i in range(n)]
                w.append(t, vals)
                written[t].extend(vals)
                if w.engine.fsync == "always":
                    acked += n
                    durable[t] = len(written[t])
            elif op < 0.8:
                w.sync()
                for u in TOPICS:
                    acked += len(written[u]) - durable[u]
                    durable[u] = len(written[u])
            elif op < 0.88 and durable[t] > low[t]:
                to = rng.randint(low[t], durable[t])
                w.trim(t, to)
                low[t] = to
            elif op < 0.93:
                w.engine.reclaim()
            elif durable[t]:
                g = rng.choice(("g1", "g2"))
                off = rng.randint(0, durable[t])
                w.commit(g, t, off)
                cursors[(g, t)] = off
        if rng.random() < 0.25:
            # A crash between the catalog copies' writes (issue 36): the DEFINE of a new
            # topic reaches streams.cat and not its mirror; the next open must heal, and lose
            # nothing acknowledged.
            debug.inject_fault(w, "catalog_split", errno.EIO, after=0, count=1)
            try:
                w.create(f"split-{cycle}")
            except walfs.WalError:
                splits += 1
        debug.power_cut(w, seed=rng.randrange(1 << 30), keep_permille=rng.choice((0, 300, 700, 1000)))
    return {
        "cycles": cycles,
        "seed": seed,
        "records_acknowledged": acked,
        "records_lost": lost,
        "catalog_splits": splits,  # cuts between the catalog copies' writes
        "copies_healed": healed,
        "problems": problems,
        "details": details[:20],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="walfs-powercut-") as wd:
        summary = run(args.cycles, args.seed, wd)
    print(json.dumps(summary, indent=2))
    return 1 if summary["records_lost"] or summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
