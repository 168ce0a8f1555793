"""Issue 20, the default pair's consume: what a consumer's first read waits for under
`--fsync never`, and what the appending thread pays for the writeback of filled runs.

Per record size, on a fresh data directory (default geometry: 1 GiB segments, 10 MiB
runs), `fsync="never"`:

- **backlog**: a producer's backlog (--backlog-mb of records, in ~1 MiB batches as Kafka
  produce requests arrive, through `append_nowait` with `append` as the fallback, as the
  listener appends), then, after --gap-ms, the consumer's first read:
  `engine_api.durable_end`, whose sync makes the whole backlog durable. Reports the
  append time, the dirty pages left in the segment files when the read starts
  (cachestat(2)), and the time in that sync.
- **stall**: the same appends while another process keeps the disk's queue full (it
  writes --noise-mb to a scratch file and fdatasyncs it, over and over): every append
  call's time (p50, p99, max). With --inline, each append that filled a run also calls
  `sync_file_range(SYNC_FILE_RANGE_WRITE)` on the segment from the appending thread, as
  the variant tried and reverted last session did; those calls' times are reported apart.

Both report the core's writeback counts (`walfs.local.debug.writeback_wait`): ranges handed
over and written back, and `max_queue_ns`, the longest an appending thread spent handing
a range over (the lock and the signal, measured in C around the hand-over).

    python bench/writeback_backlog.py --sizes 16384,1024 --backlog-mb 320 --out f.json
    python bench/ab_trees.py --old OLD --new . --rounds 2 --out ab-writeback.json -- \\
        bench/writeback_backlog.py --sizes 16384,1024 --backlog-mb 320
"""

from __future__ import annotations

import argparse
import array
import ctypes
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import walfs
from walfs.engine.rules import durable_end
from walfs.local import debug

_SYS_CACHESTAT = 451
_SYNC_FILE_RANGE_WRITE = 2
_libc = ctypes.CDLL(None, use_errno=True)
_libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recent")]


def dirty_pages(directory: str) -> int | None:
    """Dirty pages of every segment file (cachestat(2), Linux >= 6.5), or None."""
    total = 0
    for seg in pathlib.Path(directory).glob("seg-*.wal"):
        fd = os.open(seg, os.O_RDONLY)
        try:
            st = _Stat()
            if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(_Range(0, 0)), ctypes.byref(st), 0) != 0:
                return None
            total += st.dirty
        finally:
            os.close(fd)
    return total


def batches(size: int, backlog: int) -> list[tuple[bytes, array.array, array.array]]:
    per = max(1, (1 << 20) // size)  # ~1 MiB a batch, as Kafka's produce requests
    n = backlog // size
    value = os.urandom(size)
    out = []
    for first in range(0, n, per):
        k = min(per, n - first)
        out.append((value * k, array.array("I", bytes(4 * k)), array.array("I", [size] * k)))
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def process_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def spread(xs: list[float]) -> dict[str, float]:
    return {"p50": pct(xs, 0.5), "p99": pct(xs, 0.99), "max": pct(xs, 1.0)}


NOISE = """
import os, sys, time
path, mb, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
buf = os.urandom(1 << 20)
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
with open(log, "a", buffering=1) as out:
    while True:
        for i in range(mb):
            os.pwrite(fd, buf, i << 20)
        print("sync", file=out)
        t = time.perf_counter()
        os.fdatasync(fd)
        print((time.perf_counter() - t) * 1e3, file=out)
"""


class Noise:
    """Keeps the disk's queue full from another process (not a thread: the appends' times
    must not include waits for the GIL): it writes a scratch file and fdatasyncs it, in a
    loop; the appends start once its first fdatasync is under way."""

    def __init__(self, directory: str, mb: int) -> None:
        self.path = os.path.join(directory, "noise")
        self.log = os.path.join(directory, "noise.log")
        self.mb = mb
        self.syncs: list[float] = []

    def __enter__(self) -> Noise:
        self.proc = subprocess.Popen([sys.executable, "-c", NOISE, self.path, str(self.mb), self.log])
        while not (os.path.exists(self.log) and "sync" in open(self.log).read()):
            if self.proc.poll() is not None:
                raise RuntimeError("the noise writer died")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
        self.syncs = [float(x) for x in open(self.log).read().split() if x != "sync"]


def append_all(w: walfs.Wal, todo: list, run_bytes: int, inline: bool) -> tuple[list[float], list[float]]:
    e = w.engine
    calls: list[float] = []
    inline_calls: list[float] = []
    written = 0
    for data, metas, lens in todo:
        t = time.perf_counter()
        if e.append_nowait("t", 0, data, metas, lens) is None:
            e.append("t", 0, data, metas, lens)
        calls.append((time.perf_counter() - t) * 1e3)
        before, written = written, written + len(data)
        if inline and before // run_bytes != written // run_bytes:
            # The reverted variant: the appending thread starts the writeback itself.
            seg = max(pathlib.Path(w.path).glob("seg-*.wal"))
            fd = os.open(seg, os.O_RDONLY)
            try:
                t = time.perf_counter()
                _libc.sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
                inline_calls.append((time.perf_counter() - t) * 1e3)
            finally:
                os.close(fd)
    return calls, inline_calls


def writeback_stats(w: walfs.Wal) -> dict | None:
    """The core's writeback counts (None on a tree without the writeback thread)."""
    if not hasattr(debug, "writeback_wait"):
        return None
    return debug.writeback_wait(w)


def one_size(size: int, args: argparse.Namespace) -> dict:
    res: dict = {"size": size}
    todo = batches(size, args.backlog_mb * 1_000_000)
    geometry = {"segment_size": args.segment_mib << 20, "block_size": args.run_mib << 20}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = os.path.join(tmp, "wal")
        w = walfs.Wal(d, fsync="never", **geometry)
        try:
            w.engine.append("t", 0, *todo[0])
            w.sync()
            assert dirty_pages(d) in (None, 0, 1, 2), "a fresh segment left dirty"
            t, cpu = time.perf_counter(), process_cpu()
            calls, _ = append_all(w, todo, args.run_mib << 20, False)
            res["append_s"] = round(time.perf_counter() - t, 3)
            res["append_cpu_s"] = round(process_cpu() - cpu, 3)  # every thread, the writeback one too
            time.sleep(args.gap_ms / 1000)
            res["dirty_pages_at_first_read"] = dirty_pages(d)
            at = w.engine.info("t", 0).durable_watermark  # a consumer at the synced end
            t = time.perf_counter()
            durable_end(w.engine, "t", 0, at)
            res["first_read_sync_ms"] = round((time.perf_counter() - t) * 1e3, 1)
            res["append_call_ms"] = spread(calls)
            res["writeback"] = writeback_stats(w)
        finally:
            w.close()
        shutil.rmtree(d)
        if args.stall:
            w = walfs.Wal(d, fsync="never", **geometry)
            try:
                w.engine.append("t", 0, *todo[0])
                w.sync()
                with Noise(tmp, args.noise_mb) as noise:
                    calls, inline_calls = append_all(w, todo, args.run_mib << 20, args.inline)
                res["stall"] = {
                    "append_call_ms": spread(calls),
                    "noise_fdatasync_ms": [round(x, 1) for x in noise.syncs],
                    "writeback": writeback_stats(w),
                }
                if inline_calls:
                    res["stall"]["inline_sync_file_range_ms"] = {
                        "p50": pct(inline_calls, 0.5),
                        "max": pct(inline_calls, 1.0),
                        "n": len(inline_calls),
                    }
            finally:
                w.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16384,1024")
    ap.add_argument("--backlog-mb", type=int, default=320)
    ap.add_argument("--gap-ms", type=int, default=0, help="between the last append and the first read")
    ap.add_argument("--segment-mib", type=int, default=1024)
    ap.add_argument("--run-mib", type=int, default=10)
    ap.add_argument("--stall", action="store_true", help="also the appends under a full disk queue")
    ap.add_argument("--noise-mb", type=int, default=512)
    ap.add_argument("--inline", action="store_true", help="stall: the reverted inline sync_file_range too")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    runs = [one_size(int(s), args) for _ in range(args.rounds) for s in args.sizes.split(",")]
    doc = {"walfs": walfs.__file__, "args": vars(args), "runs": runs}
    for r in runs:
        print(json.dumps(r))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
