"""Torture (b): simulated power cuts of the engine (Wal(test_mode=True) and walfs.local.debug.power_cut) with
appends, syncs, trims, reclaims and cursor commits in the mix. After every cut the WAL is
reopened and checked: every record acknowledged durable (sync returned) is there, byte for
byte, from the durable low watermark on; no record is other than what was appended; every
committed cursor reads back. Part of `make torture` (tools/torture.py); standalone:
    python tools/torture_powercut.py --cycles 50 --seed 1

The metadata fault model (issue 36): after a cut, with --meta-faults (default on), ONE copy
of one metadata file is hurt the way a disk hurts it: a torn write (the copy cut short or
its tail zeroed), a misdirected write (a 512-byte sector of another metadata file, or of
another offset of the same, lands in it), a crash between the two copies' writes (the copy
goes back to its content of an earlier cycle), or a zeroed 4 KiB page (a cursor file's one
slot, a segment file's header). The other copy is intact, so the WAL must open (a refused
open is counted as a problem), heal, and lose nothing acknowledged.
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
# The metadata files that have a second copy (docs/format.md): "<name>.mirror".
MIRRORED = ("streams.cat", "topics.conf", "cursors.manifest")


def _metadata_files(d: str) -> list[str]:
    out = [os.path.join(d, n + m) for n in MIRRORED for m in ("", ".mirror")]
    out = [f for f in out if os.path.exists(f)]
    cur = os.path.join(d, "cursors")
    for root, _dirs, files in os.walk(cur):
        out += [os.path.join(root, f) for f in files if not f.startswith(".") and ".tmp" not in f]
    return out


def _metadata_fault(rng: random.Random, d: str, earlier: dict[str, bytes]) -> str:
    """Hurts one copy of one metadata file (see the module's docstring); says what it did."""
    segs = sorted(f for f in os.listdir(d) if f.startswith("seg-") and f.endswith(".wal"))
    files = _metadata_files(d)
    kind = rng.choice(("torn", "misdirected", "stale", "page", "segment_header"))
    if kind == "segment_header" and segs:
        f = os.path.join(d, rng.choice(segs))
        with open(f, "r+b") as fh:
            if rng.random() < 0.5 or len(segs) < 2:
                fh.write(bytes(4096))
                return f"zeroed the header page of {f}"
            with open(os.path.join(d, rng.choice([x for x in segs if x != os.path.basename(f)])), "rb") as o:
                fh.write(o.read(512))  # another segment's header sector: a misdirected write
            return f"wrote another segment's header sector into {f}"
    if not files:
        return "no metadata file"
    f = rng.choice(files)
    data = open(f, "rb").read()
    if "/cursors/" in f and kind in ("stale", "torn"):
        kind = "page"  # a cursor file holds both its copies: only a fault that hurts one slot
    if kind == "stale" and f in earlier and earlier[f] != data:
        new = earlier[f]
        what = "went back to its content of an earlier cycle (a crash between the two copies' writes)"
    elif kind == "torn" and len(data) > 8:
        cut = rng.randrange(8, len(data))
        new = data[:cut] + (bytes(len(data) - cut) if rng.random() < 0.5 else b"")
        what = f"torn at byte {cut}"
    elif kind == "misdirected" and len(data) > 0:
        src = open(rng.choice(files), "rb").read()
        start = rng.randrange(0, max(1, len(src) - 512)) & ~511
        chunk = src[start : start + 512]
        at = rng.randrange(0, max(1, len(data))) & ~511
        new = data[:at] + chunk + data[at + len(chunk) :]
        what = f"got a misdirected 512-byte write at byte {at}"
    else:
        at = rng.randrange(0, max(1, len(data))) & ~4095
        new = data[:at] + bytes(min(4096, len(data) - at)) + data[at + 4096 :]
        what = f"had the 4 KiB page at byte {at} zeroed"
    if f.endswith(".mirror") or os.path.exists(f + ".mirror") or "/cursors/" in f:
        with open(f, "wb") as fh:
            fh.write(new)
        return f"{f} {what}"
    return "no mirrored file"


def _value(rng: random.Random, t: str, i: int) -> bytes:
    head = f"{t}:{i}:".encode()
    return head + bytes([97 + i % 26]) * rng.choice((0, 1, 50, 700, 5000, 70_000))


def run(cycles: int, seed: int, workdir: str, meta_faults: bool = True) -> dict[str, Any]:
    rng = random.Random(seed)
    d = os.path.join(workdir, "wal")
    written: dict[str, list[bytes]] = {t: [] for t in TOPICS}  # all appended, cut back after a cut
    durable: dict[str, int] = {t: 0 for t in TOPICS}
    low: dict[str, int] = {t: 0 for t in TOPICS}
    cursors: dict[tuple[str, str], int] = {}
    acked = lost = problems = refused = faults = splits = healed = 0
    details: list[str] = []
    earlier: dict[str, bytes] = {}
    for cycle in range(cycles):
        try:
            w = walfs.Wal(
                d,
                fsync=rng.choice(("never", "always", "interval")),
                fsync_interval_ms=50,
                test_mode=True,
                reclaim_interval_s=3600,
                **SMALL,
            )
        except walfs.WalCorruptError as exc:
            refused += 1
            details.append(f"cycle {cycle}: open refused: {exc}")
            break
        rep = w.engine.report()
        healed += rep["healed"] + rep.get("healed_files", 0)  # the C core's copies, the Python files'

        # --- check what the last cut left
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
        if meta_faults:
            if cycle % 3 == 0:  # the copies' content a few cycles back, for "stale" faults
                earlier = {f: open(f, "rb").read() for f in _metadata_files(d)}
            what = _metadata_fault(rng, d, earlier)
            faults += what.startswith("/")
            if len(details) < 200:
                details.append(f"cycle {cycle}: {what}")
    return {
        "cycles": cycles,
        "seed": seed,
        "records_acknowledged": acked,
        "records_lost": lost,
        "catalog_splits": splits,  # cuts between the catalog copies' writes
        "copies_healed": healed,
        "problems": problems,
        "refused_opens": refused,
        "metadata_faults": faults,
        "details": [x for x in details if "open refused" in x or "differ" in x or "<" in x or "!=" in x][:20],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-meta-faults", action="store_true", help="power cuts only")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="walfs-powercut-") as wd:
        summary = run(args.cycles, args.seed, wd, meta_faults=not args.no_meta_faults)
    print(json.dumps(summary, indent=2))
    return 1 if summary["records_lost"] or summary["problems"] or summary["refused_opens"] else 0


if __name__ == "__main__":
    sys.exit(main())
