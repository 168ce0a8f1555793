"""Engine benchmarks, each side by side with a baseline in the same run. Prints JSON.

    .venv/bin/python bench/engine/bench_engine.py [--quick] [--dir DIR] [--out FILE]

- append_1k:    1 KiB records via append_batch (fsync=never, final sync) vs the same bytes
                written to a plain file from Python (final fsync), same directory.
- append_100b:  100-byte records via append_batch on one thread: records per second.
- always_N:     fsync=always, single-record appends from 1, 4 and 16 threads; the 16/1
                ratio shows group commit. Baseline: write+fdatasync per record on a plain
                file from one thread.
- read:         reading a stream back (records/s, MB/s) vs reading the plain file.
- recovery:     opening a WAL of N 100-byte records after a clean close and after SIGKILL.
- overhead:     bytes on disk per record beyond the payload; RSS of the process.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import walfs

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchkit  # noqa: E402


def fresh(base: str, name: str) -> str:
    path = os.path.join(base, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


def bench_append_1k(base: str, total_mb: int, rounds: int = 3) -> dict[str, object]:
    """Alternates walfs and the plain file `rounds` times; the median ratio is the figure."""
    rec = os.urandom(1024)
    batch = [rec] * 1024  # 1 MiB per batch
    wal_s, plain_s = [], []
    for _ in range(rounds):
        path = fresh(base, "a1k")
        w = walfs.Wal(path, fsync="never")
        append = benchkit.batch_append(w)
        t0 = time.perf_counter()
        for _ in range(total_mb):
            append("t", batch)
        w.sync()
        wal_s.append(time.perf_counter() - t0)
        w.close()
        shutil.rmtree(path)
        plain = os.path.join(base, "plain-1k")
        t0 = time.perf_counter()
        with open(plain, "wb") as f:
            for _ in range(total_mb):
                f.write(b"".join(batch))  # the same list of records, written as one buffer
            f.flush()
            os.fsync(f.fileno())
        plain_s.append(time.perf_counter() - t0)
        os.unlink(plain)
    mb = total_mb * (1 << 20) / 1e6
    ratios = sorted(p / w for p, w in zip(plain_s, wal_s, strict=True))
    return {
        "walfs_MBps": [mb / s for s in wal_s],
        "plain_file_MBps": [mb / s for s in plain_s],
        "ratio_median": ratios[len(ratios) // 2],
    }


def bench_append_100b(base: str, n: int) -> dict[str, float]:
    rec = os.urandom(100)
    batch = [rec] * 100_000
    path = fresh(base, "a100")
    w = walfs.Wal(path, fsync="never")
    append = benchkit.batch_append(w)
    t0 = time.perf_counter()
    for _ in range(n // len(batch)):
        append("t", batch)
    elapsed = time.perf_counter() - t0
    w.sync()
    w.close()
    shutil.rmtree(path)
    return {"records_per_s": n / elapsed, "records": n}


def bench_always(base: str, seconds: float) -> dict[str, object]:
    out: dict[str, object] = {}
    rec = os.urandom(100)
    for threads in (1, 4, 16):
        path = fresh(base, f"always{threads}")
        w = walfs.Wal(path, fsync="always")
        stop = time.perf_counter() + seconds
        counts = [0] * threads

        def writer(i: int, w: walfs.Wal, stop: float, counts: list[int]) -> None:
            while time.perf_counter() < stop:
                w.append(f"t{i % 4}", rec)
                counts[i] += 1

        ts = [threading.Thread(target=writer, args=(i, w, stop, counts)) for i in range(threads)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out[f"threads_{threads}_records_per_s"] = sum(counts) / (time.perf_counter() - t0)
        out[f"threads_{threads}_records_per_fsync"] = sum(counts) / max(1, w.engine.report()["syncs"])
        w.close()
        shutil.rmtree(path)
    plain = os.path.join(base, "plain-sync")
    fd = os.open(plain, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    stop = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < stop:
        os.write(fd, rec)
        os.fdatasync(fd)
        n += 1
    out["plain_file_write_fdatasync_per_s"] = n / (time.perf_counter() - t0)
    os.close(fd)
    os.unlink(plain)
    out["ratio_16_to_1"] = out["threads_16_records_per_s"] / out["threads_1_records_per_s"]  # type: ignore[operator]
    return out


def bench_read(base: str, n: int) -> dict[str, float]:
    rec = os.urandom(100).replace(b"\n", b"x")  # one line per record in the plain file
    path = fresh(base, "read")
    w = walfs.Wal(path, fsync="never")
    for _ in range(n // 100_000):
        benchkit.batch_append(w)("t", [rec] * 100_000)
    w.sync()
    t0 = time.perf_counter()
    off, got = 0, 0
    while True:
        recs = w.read("t", off, max_records=100_000, max_bytes=64 << 20)
        if not recs:
            break
        off += len(recs)
        got += len(recs)
    el = time.perf_counter() - t0
    t0 = time.perf_counter()
    pos, size = 0, w.engine.info("t").byte_size
    while pos < size:
        pos += len(w.read_bytes("t", pos, 1 << 20))
    el_bytes = time.perf_counter() - t0
    w.close()
    shutil.rmtree(path)
    plain = os.path.join(base, "plain-read")
    with open(plain, "wb") as f:
        f.write((rec + b"\n") * n)
    t0 = time.perf_counter()
    with open(plain, "rb") as f:
        lines = sum(1 for _ in f)
    el_plain = time.perf_counter() - t0
    os.unlink(plain)
    assert got == n and lines == n
    return {
        "records_per_s": n / el,
        "MBps": n * 100 / el / 1e6,
        "byte_view_MBps": size / el_bytes / 1e6,
        "plain_file_lines_per_s": n / el_plain,
        "ratio_records_vs_plain_lines": el_plain / el,
    }


WRITER = """
import sys, time, walfs
w = walfs.Wal(sys.argv[1], fsync="never")
rec = b"x" * 100
for _ in range(int(sys.argv[2]) // 100000):
    getattr(w, "append_batch", w.append)("t", [rec] * 100000)  # before issue 34: append_batch
print("done", flush=True)
time.sleep(600)
"""

OPENER = """
import importlib, sys, time, walfs
# The engine's modules first (open_engine imports them late): the figure is the open, not
# the first import (bench/engine/bench_engine.py reports that apart, as import_engine_s).
t_imp = time.perf_counter()
for m in ("walfs.local.engine", "walfs.local_engine"):  # the second: trees before issue 34
    try:
        importlib.import_module(m)
        break
    except ImportError:
        pass
imp = time.perf_counter() - t_imp
t0 = time.perf_counter()
w = walfs.Wal(sys.argv[1])
el = time.perf_counter() - t0
assert w.engine.info("t").high_watermark == int(sys.argv[2])
# Anonymous memory only: the mapped segment pages a verification touched are page cache.
anon = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("RssAnon"))
print(el, anon / 1024, w.engine.report()["verified_records"], imp)
w.close()
"""


def timed_open(path: str, n: int) -> tuple[float, float, int, float]:
    """Opens the WAL in a fresh process: (seconds, its anonymous RSS in MB, records verified,
    seconds the engine's modules took to import before)."""
    out = subprocess.run(
        [sys.executable, "-c", OPENER, path, str(n)], capture_output=True, text=True, check=True
    )
    el, rss, verified, imp = out.stdout.split()
    return float(el), float(rss), int(verified), float(imp)


def bench_recovery(base: str, n: int) -> dict[str, float]:
    # An open after a clean close verifies the records of each stream's active run (the
    # unsealed last one), so its time follows how full that run happens to be at n records,
    # which the layout decides (since format version 3 a stream's first runs are small,
    # which moves every later run's boundary). So the open is timed on four WALs of n, n +
    # 17,700, n + 35,400 and n + 53,100 records (a quarter of a 10 MiB run of 100 B records
    # apart), each written in one session, and the figure is their median.
    rec = b"x" * 100
    opens = []
    for k in range(4):
        path = fresh(base, "recovery")
        w = walfs.Wal(path, fsync="never")
        append = benchkit.batch_append(w)
        for _ in range(n // 100_000):
            append("t", [rec] * 100_000)
        if k:
            append("t", [rec] * (17_700 * k))
        w.close()
        opens.append(timed_open(path, n + 17_700 * k))
        if k < 3:
            shutil.rmtree(path)
    clean_s, clean_rss, clean_verified, import_s = sorted(opens)[len(opens) // 2]
    used = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.startswith("seg-"))
    shutil.rmtree(path)
    p = subprocess.Popen([sys.executable, "-c", WRITER, path, str(n)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "done"
    p.send_signal(signal.SIGKILL)
    p.wait()
    kill_s, kill_rss, kill_verified, _ = timed_open(path, n)
    shutil.rmtree(path)
    return {
        "records": n,
        "open_after_clean_close_s": clean_s,  # the higher middle of the four opens
        "open_after_clean_close_each_s": [o[0] for o in opens],
        "records_verified_each_clean_open": [o[2] for o in opens],
        "import_engine_s": import_s,
        "open_after_sigkill_s": kill_s,
        "records_verified_after_clean_close": clean_verified,
        "records_verified_after_sigkill": kill_verified,
        "anon_rss_MB_after_open": max(clean_rss, kill_rss),
        "segment_bytes_preallocated": used,
        # 36-byte header + 12-byte slot per record, 1 KiB per 10 MiB block: see docs/format.md
        "format_overhead_bytes_per_record": 48 + 1024 / ((10 << 20) // (100 + 48)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir under /var/tmp)")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="walfs-bench-", dir="/var/tmp")
    q = args.quick
    results = {
        "run": benchkit.run_info(base),
        "append_1k": bench_append_1k(base, 64 if q else 1024),
        "append_100b": bench_append_100b(base, 1_000_000 if q else 10_000_000),
        "always": bench_always(base, 1.0 if q else 5.0),
        "read": bench_read(base, 1_000_000 if q else 10_000_000),
        "recovery": bench_recovery(base, 1_000_000 if q else 10_000_000),
    }
    shutil.rmtree(base, ignore_errors=True)
    benchkit.write_json(results, args.out)


if __name__ == "__main__":
    main()
