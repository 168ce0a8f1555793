"""Retention over a long run, compressed: a day of appends with a size limit. Prints JSON.

    .venv/bin/python bench/bench_retention.py [--minutes M] [--dir DIR] [--out FILE]

Two WALs in the same run, alternating in slices, same records (1 KiB, batches of 100,
fsync=interval): one with retention_bytes (background retention and reclamation every
`--every` s), one without (the baseline). Reported:
- disk use over time (bytes of segment files, sampled each slice) of the retained WAL:
  its maximum must stay under the limit + one segment per stream + the segment being
  filled;
- append throughput of each, and the ratio retained / baseline (the cost of retention
  running beside the appends).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time

import walfs

SEGMENT = 16 << 20
BLOCK = 1 << 20


def seg_bytes(d: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(d) if e.name.startswith("seg-"))


def run_slice(w: walfs.Wal, seconds: float, batch: list[bytes]) -> int:
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        w.append_batch("log", batch)
        n += len(batch)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--slice", type=float, default=2.0, help="seconds per alternation")
    ap.add_argument("--limit", type=int, default=64 << 20, help="retention_bytes")
    ap.add_argument("--every", type=float, default=1.0, help="retention + reclaim period (s)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="walfs-ret-", dir=a.dir)
    batch = [os.urandom(512).hex().encode() for _ in range(100)]  # 1 KiB each
    kept_dir, plain_dir = os.path.join(base, "kept"), os.path.join(base, "plain")
    kept = walfs.Wal(kept_dir, segment_size=SEGMENT, block_size=BLOCK, retention_bytes=a.limit,
                     reclaim_interval_s=a.every)
    plain = walfs.Wal(plain_dir, segment_size=SEGMENT, block_size=BLOCK, reclaim_interval_s=a.every)
    rates: dict[str, list[float]] = {"retention": [], "baseline": []}
    disk: list[tuple[float, int]] = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < a.minutes * 60:
            for name, w, d in (("retention", kept, kept_dir), ("baseline", plain, plain_dir)):
                n = run_slice(w, a.slice, batch)
                rates[name].append(n / a.slice)
                if name == "retention":
                    disk.append((round(time.monotonic() - t0, 1), seg_bytes(d)))
                else:
                    # The baseline keeps everything: bound the bench's own disk use by
                    # trimming and reclaiming it too, outside the timed slice.
                    w.trim("log", w.high_watermark("log"))
                    w.reclaim()
        bound = a.limit + 2 * SEGMENT
        out = {
            "bench": "retention",
            "machine": {
                "nproc": os.cpu_count(),
                "kernel": platform.release(),
                "python": platform.python_version(),
            },
            "minutes": a.minutes,
            "limit_bytes": a.limit,
            "segment_bytes": SEGMENT,
            "records_appended": int(sum(rates["retention"]) * a.slice),
            "disk_max_bytes": max(b for _, b in disk),
            "disk_bound_bytes": bound,
            "disk_within_bound": max(b for _, b in disk) <= bound,
            "disk_samples": disk,
            "append_rate_retention": {"median": statistics.median(rates["retention"]),
                                      "min": min(rates["retention"]), "max": max(rates["retention"])},
            "append_rate_baseline": {"median": statistics.median(rates["baseline"]),
                                     "min": min(rates["baseline"]), "max": max(rates["baseline"])},
            "ratio_median": statistics.median(rates["retention"]) / statistics.median(rates["baseline"]),
        }
    finally:
        kept.close()
        plain.close()
        shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
