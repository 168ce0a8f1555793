"""Retention over a long run, compressed: a day of appends with a size limit. Prints JSON.

    .venv/bin/python bench/retention/bench_retention.py [--quick] [--minutes M] [--limit B] [--segment B]
        [--block B] [--sample S] [--dir DIR] [--out FILE]

Two WALs in the same run, alternating in slices, same records (1 KiB, batches of 100,
fsync=interval): one with retention_bytes (the background pass and reclamation as the
daemons run them: woken when the stream is in more segment files than the limit keeps,
with appends that would take it past the limit + one segment waiting for a pass), one
without (the baseline; the bench trims it outside its timed slices so that its own disk
use stays bounded). A sampler thread, running through both slices alike, looks every
--sample s at the retained WAL's data directory:
- `seg`: the apparent size of its segment files (what retention_bytes bounds);
- `du`: the blocks the files take (st_blocks): the segment files' (with the file system's
  own extent blocks) and the other files' (catalog, cursors, settings) apart;
- `statvfs`: the file system's used bytes, minus what was used at the start (the whole
  file system: other processes' writes show up in it too);
- `kept`: the retained stream's byte view from its low watermark (what the limit keeps,
  in the bytes a reader sees).
Reported: the maxima against the limit and against the bound of docs/operations.md
("How much disk a size limit uses": limit + one segment), how many samples broke it,
the appends that waited for retention, and the append rate of each WAL with the ratio
retained / baseline (the cost of retention running beside the appends). --quick: 20 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import walfs
from walfs.engine.settings import file_budget

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchkit  # noqa: E402


def dir_use(d: str) -> tuple[int, int, int]:
    """(apparent bytes of segment files, their st_blocks bytes, st_blocks bytes of the
    other files) in d."""
    seg = seg_du = other_du = 0
    for e in os.scandir(d):
        try:
            st = e.stat()
        except FileNotFoundError:  # reclaimed while we looked
            continue
        if e.name.startswith("seg-"):
            seg += st.st_size
            seg_du += st.st_blocks * 512
        else:
            other_du += st.st_blocks * 512
    return seg, seg_du, other_du


def fs_used(d: str) -> int:
    st = os.statvfs(d)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def run_slice(w: walfs.Wal, seconds: float, batch: list[bytes]) -> int:
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        w.append("log", batch)
        n += len(batch)
    return n


def percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": xs[len(xs) // 2], "p99": xs[int(len(xs) * 0.99)], "max": xs[-1]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--slice", type=float, default=2.0, help="seconds per alternation")
    ap.add_argument("--limit", type=int, default=16 << 20, help="retention_bytes")
    ap.add_argument("--segment", type=int, default=4 << 20, help="segment_size (bytes)")
    ap.add_argument("--block", type=int, default=256 << 10, help="block_size (bytes)")
    ap.add_argument("--sample", type=float, default=0.01, help="seconds between disk samples")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="20 s: a smoke run")
    a = ap.parse_args()
    if a.quick:
        a.minutes = 1 / 3
    base = tempfile.mkdtemp(prefix="walfs-ret-", dir=a.dir)
    batch = [os.urandom(512).hex().encode() for _ in range(100)]  # 1 KiB each
    kept_dir, plain_dir = os.path.join(base, "kept"), os.path.join(base, "plain")
    seg_size, limit = a.segment, a.limit
    keep_files, cap_files = file_budget(limit, seg_size)
    bound = cap_files * seg_size  # limit + one segment (file_budget)

    kept = walfs.Wal(kept_dir, segment_size=seg_size, block_size=a.block, retention_bytes=limit)
    plain = walfs.Wal(plain_dir, segment_size=seg_size, block_size=a.block)
    rates: dict[str, list[float]] = {"retention": [], "baseline": []}
    # (s, seg, seg du, other du, statvfs delta, kept view, low watermark)
    samples: list[tuple[float, int, int, int, int, int, int]] = []
    fs0 = fs_used(base)
    stop = threading.Event()
    t0 = time.monotonic()

    def sampler() -> None:
        while not stop.wait(a.sample):
            info = kept.info("log")
            seg, seg_du, other_du = dir_use(kept_dir)
            samples.append(
                (
                    round(time.monotonic() - t0, 3),
                    seg,
                    seg_du,
                    other_du,
                    fs_used(base) - fs0,
                    info.byte_size - info.low_byte,
                    info.low_watermark,
                )
            )

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    try:
        while time.monotonic() - t0 < a.minutes * 60:
            for name, w in (("retention", kept), ("baseline", plain)):
                rates[name].append(run_slice(w, a.slice, batch) / a.slice)
                if name == "baseline":
                    # The baseline keeps everything: bound the bench's own disk use by
                    # trimming and reclaiming it too, outside the timed slice.
                    w.trim("log", w.info("log").high_watermark)
                    w.engine.reclaim()
        stop.set()
        th.join()
        steady = [s for s in samples if s[6] > 0]  # after the first trim
        out = {
            "bench": "retention",
            "run": benchkit.run_info(base),
            "minutes": a.minutes,
            "limit_bytes": limit,
            "segment_bytes": seg_size,
            "block_bytes": a.block,
            "record_bytes": len(batch[0]),
            "files_kept_after_pass": keep_files,
            "files_cap": cap_files,
            "bound_bytes": bound,
            "records_appended": int(sum(rates["retention"]) * a.slice),
            "samples": len(samples),
            "sample_interval_s": a.sample,
            "seg_max_bytes": max(s[1] for s in samples),
            "seg_max_over_limit_in_segments": (max(s[1] for s in samples) - limit) / seg_size,
            "seg_over_limit_in_segments": percentiles([(s[1] - limit) / seg_size for s in samples]),
            "samples_seg_over_bound": sum(s[1] > bound for s in samples),
            "seg_du_max_bytes": max(s[2] for s in samples),
            "samples_seg_du_over_bound": sum(s[2] > bound for s in samples),
            "other_du_max_bytes": max(s[3] for s in samples),
            "du_max_bytes": max(s[2] + s[3] for s in samples),
            "du_max_over_limit_in_segments": (max(s[2] + s[3] for s in samples) - limit) / seg_size,
            "statvfs_delta_max_bytes": max(s[4] for s in samples),
            "kept_view_bytes": percentiles([float(s[5]) for s in steady])
            | {"min": min(s[5] for s in steady)},
            "backpressure_waits": kept.engine.stats.backpressure_waits,
            "reclaimed_segments": kept.engine.stats.reclaimed_segments,
            "append_rate_retention": benchkit.spread(rates["retention"]),
            "append_rate_baseline": benchkit.spread(rates["baseline"]),
            "ratio_median": statistics.median(rates["retention"]) / statistics.median(rates["baseline"]),
        }
    finally:
        stop.set()
        kept.close()
        plain.close()
        shutil.rmtree(base, ignore_errors=True)
    benchkit.write_json(out, a.out)


if __name__ == "__main__":
    main()
