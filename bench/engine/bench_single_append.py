"""What one append call costs: walfs beside the seed's own crate, walrus-rust 0.2.0
(bench/engine/walrus_baseline, built with `make walrus-baseline`), in one run. Prints JSON.

    .venv/bin/python bench/engine/bench_single_append.py [--quick] [--rounds 3] [--dir DIR]
        [--fsync never|interval] [--out FILE]

Cases, each for 100-byte and 1 KiB records, alternating walfs and walrus in every round;
the figure is the median of the rounds, records per second:
- one:            one record per call. walfs: the stream handle (Wal.appender(topic)
                  .append(value): one C call); also Wal.append(topic, value) (the friendly
                  call: a dict look-up more) and LogEngine.append with one record (the
                  general path, which is what one append cost before the stream handle).
                  walrus: append_for_topic.
- batch:          2,000 records per call. walfs: Wal.append of a list; walrus:
                  batch_append_for_topic.
Both rates are reported: per second of wall time (the figure on a quiet machine) and per
second of CPU time (user + system; robust when the machine is shared and busy).
fsync: walfs fsync="never" / walrus FsyncSchedule::NoFsync (default), or "interval" (100 ms
both). Every case ends with the data written (walfs: its final sync is not timed, as
walrus's NoFsync never syncs).
"""

import argparse
import array
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import walfs

HERE = os.path.dirname(os.path.abspath(__file__))
WALRUS_BIN = os.path.join(HERE, "walrus_baseline", "target", "release", "walrus_baseline")
sys.path.insert(0, os.path.dirname(HERE))
import benchkit  # noqa: E402

BATCH = 2000


def fresh(base: str, name: str) -> str:
    path = os.path.join(base, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


def walfs_case(base: str, how: str, size: int, count: int, fsync: str) -> tuple[float, float]:
    """(records per second of wall time, of CPU time) of one walfs run."""
    path = fresh(base, "walfs")
    value = b"x" * size
    w = walfs.Wal(path, fsync=fsync, segment_size=1 << 30, block_size=10 << 20)
    try:
        if how == "handle":
            append = w.appender("bench").append
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(count):
                append(value)
        elif how == "wal_append":
            wal_append = w.append
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(count):
                wal_append("bench", value)
        elif how == "engine_append":
            engine_append = w.engine.append
            metas, values = array.array("I", [0]), array.array("I", [size])
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(count):
                engine_append("bench", 0, value, metas, values)
        elif how == "batch":
            batch = [value] * BATCH
            append_batch = benchkit.batch_append(w)
            t0, c0 = time.perf_counter(), time.process_time()
            done = 0
            while done < count:
                n = min(BATCH, count - done)
                append_batch("bench", batch if n == BATCH else batch[:n])
                done += n
        else:
            raise ValueError(how)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert w.engine.info("bench").high_watermark == count
    finally:
        w.close()
    shutil.rmtree(path, ignore_errors=True)
    return count / secs, count / cpu


def walrus_case(base: str, mode: str, size: int, count: int, fsync: str) -> tuple[float, float]:
    """(records per second of wall time, of CPU time: the process's user + system time,
    its start-up included)."""
    path = fresh(base, "walrus")
    os.makedirs(path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [WALRUS_BIN, path, mode, str(size), str(count), str(BATCH)],
        env=dict(os.environ, FSYNC=fsync),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    shutil.rmtree(path, ignore_errors=True)
    return float(json.loads(out.strip().splitlines()[-1])["records_per_s"]), count / cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small counts (proves the script works)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fsync", choices=("never", "interval"), default="never")
    p.add_argument("--dir", default=None, help="where the logs go (default: a temporary directory)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args()
    if not os.access(WALRUS_BIN, os.X_OK):
        sys.exit(f"{WALRUS_BIN} is missing: run `make walrus-baseline` first")
    counts = {100: 1_000_000, 1024: 300_000}
    if a.quick:
        counts = {100: 50_000, 1024: 20_000}
    base = a.dir or tempfile.mkdtemp(prefix="walfs-single-")
    run = benchkit.run_info(base)
    results: dict[str, dict[str, object]] = {}
    try:
        for size, count in counts.items():
            runs: dict[str, list[tuple[float, float]]] = {
                k: []
                for k in (
                    "walfs_handle",
                    "walfs_wal_append",
                    "walfs_engine_append",
                    "walrus_one",
                    "walfs_batch",
                    "walrus_batch",
                )
            }
            for _ in range(a.rounds):  # alternating, so that a busy moment hits both
                runs["walrus_one"].append(walrus_case(base, "one", size, count, a.fsync))
                runs["walfs_handle"].append(walfs_case(base, "handle", size, count, a.fsync))
                runs["walfs_wal_append"].append(walfs_case(base, "wal_append", size, count, a.fsync))
                runs["walfs_engine_append"].append(walfs_case(base, "engine_append", size, count, a.fsync))
                runs["walrus_batch"].append(walrus_case(base, "batch", size, count, a.fsync))
                runs["walfs_batch"].append(walfs_case(base, "batch", size, count, a.fsync))
            med = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
            cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
            results[f"{size}B"] = {
                "records": count,
                "median_records_per_s": {k: round(v) for k, v in med.items()},
                "median_records_per_cpu_s": {k: round(v) for k, v in cpu.items()},
                "runs_wall": {k: [round(w) for w, _ in v] for k, v in runs.items()},
                "one_per_call_vs_walrus": round(med["walfs_handle"] / med["walrus_one"], 2),
                "wal_append_vs_walrus": round(med["walfs_wal_append"] / med["walrus_one"], 2),
                "general_path_vs_walrus": round(med["walfs_engine_append"] / med["walrus_one"], 2),
                "batch_vs_walrus": round(med["walfs_batch"] / med["walrus_batch"], 2),
                "cpu_one_per_call_vs_walrus": round(cpu["walfs_handle"] / cpu["walrus_one"], 2),
                "cpu_batch_vs_walrus": round(cpu["walfs_batch"] / cpu["walrus_batch"], 2),
            }
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    report = {
        "bench": "single_append",
        "fsync": a.fsync,
        "rounds": a.rounds,
        "batch": BATCH,
        "results": results,
    }
    benchkit.write_json({"run": run, **report}, a.out)


if __name__ == "__main__":
    main()
