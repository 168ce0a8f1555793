"""Spark benchmark: walfs through Spark next to the same bytes in a plain file, one run.

    python bench/spark/bench_spark.py [--quick] [--dir DIR] [--size-mib 1024] [--records 10000000]
                                      [--record-bytes 100] [--repeat 1] [--skip-mount] [--out F.json]

1. The mount: one topic of --size-mib MiB of 100-byte lines, appended through a fresh
   `walfs mount` (dd bs=1M), and the same bytes in a plain file beside it. Then
   spark.read.text(...).count() and a filter (value contains "needle", 1% of lines) on
   each: seconds, MB/s, and mount/plain throughput.
2. The data source: --records records of --record-bytes bytes appended with the engine
   (append_batch), and the same values as lines of a plain file. Then
   spark.read.format("walfs").count() vs spark.read.text(plain).count(): rows per second.

One local[*] SparkSession runs everything; each figure is a single timed run. Data is
timed right after it was written (the page cache is warm for both sides alike). Before
timing, one small untimed query per path type (text, and format("walfs"), registered
explicitly so the bench does not depend on how walfs was installed) warms the JVM and
starts Spark's Python workers; the cost of that first walfs query is reported as
walfs_first_query_s. JSON goes to stdout (and --out). --quick: 64 MiB and 500,000 records.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import walfs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchkit  # noqa: E402

# The tree whose walfs this bench imports (PYTHONPATH's under bench/ab_trees.py), for the
# daemons it starts with `python -m`, which imports walfs from its working directory first.
WALFS_TREE = Path(walfs.__file__).resolve().parent.parent
LINE_BYTES = 100
NEEDLE_EVERY = 100  # one line in 100 holds the word "needle"


def machine(directory: Path) -> dict[str, Any]:
    """benchkit.run_info, with the versions of Spark and Java in its machine."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    import pyspark

    run = benchkit.run_info(directory)
    run["machine"].update({"pyspark": pyspark.__version__, "java": java[0] if java else ""})
    return run


def line(i: int) -> bytes:
    """Line i: LINE_BYTES bytes including its newline; every NEEDLE_EVERY-th has "needle"."""
    head = b"%012d %s " % (i, b"needle" if i % NEEDLE_EVERY == 0 else b"hay---")
    return head + b"x" * (LINE_BYTES - 1 - len(head)) + b"\n"


def write_plain(path: Path, n_lines: int) -> None:
    with open(path, "wb", buffering=8 << 20) as f:
        for start in range(0, n_lines, 100_000):
            f.write(b"".join(line(i) for i in range(start, min(start + 100_000, n_lines))))


def timed(fn: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def mount_vs_plain(spark: Any, base: Path, size_mib: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    n_lines = size_mib * (1 << 20) // LINE_BYTES
    plain = base / "plain.txt"
    write_plain(plain, n_lines)
    data, mnt = base / "mount-data", base / "mnt"
    mnt.mkdir()
    subprocess.run(
        [sys.executable, "-m", "walfs.cli.mount", str(data), str(mnt), "--log-file", str(base / "mount.log")],
        check=True,
        cwd=WALFS_TREE,  # `-m` imports walfs from the cwd first: the tree this bench imports
        timeout=120,  # a daemon that never starts serving must not hang the benchmark
    )
    try:
        topic = mnt / "bench"
        _, write_s = timed(
            lambda: subprocess.run(
                [
                    "dd",
                    f"if={plain}",
                    f"of={topic}",
                    "bs=1M",
                    "oflag=append",
                    "conv=notrunc,fsync",
                    "status=none",
                ],
                check=True,
            )
        )
        assert topic.stat().st_size == plain.stat().st_size
        out: dict[str, Any] = {
            "bytes": plain.stat().st_size,
            "lines": n_lines,
            "write_through_mount_MBps": round(plain.stat().st_size / write_s / 1e6, 1),
        }
        for name, path in (("plain", plain), ("mount", topic)):
            df = spark.read.text(str(path))
            count, count_s = timed(df.count)
            hits, filter_s = timed(lambda df=df: df.filter(F.col("value").contains("needle")).count())
            assert count == n_lines and hits == (n_lines + NEEDLE_EVERY - 1) // NEEDLE_EVERY, (count, hits)
            out[name] = {
                "count_s": round(count_s, 2),
                "count_MBps": round(out["bytes"] / count_s / 1e6, 1),
                "filter_s": round(filter_s, 2),
                "filter_MBps": round(out["bytes"] / filter_s / 1e6, 1),
            }
        out["mount_vs_plain_count"] = round(out["plain"]["count_s"] / out["mount"]["count_s"], 2)
        out["mount_vs_plain_filter"] = round(out["plain"]["filter_s"] / out["mount"]["filter_s"], 2)
        return out
    finally:
        subprocess.run([sys.executable, "-m", "walfs.cli.umount", str(mnt)], check=False, cwd=WALFS_TREE)


def source_vs_text(spark: Any, base: Path, records: int, record_bytes: int, repeat: int) -> dict[str, Any]:
    import walfs

    data, plain = base / "source-data", base / "source-plain.txt"
    value = b"v" * (record_bytes - 13)
    batch = 10_000
    t = time.perf_counter()
    with walfs.Wal(data, fsync="never") as wal, open(plain, "wb", buffering=8 << 20) as f:
        for start in range(0, records, batch):
            vals = [b"%012d " % i + value for i in range(start, min(start + batch, records))]
            wal.append("bench", vals)
            f.write(b"\n".join(vals) + b"\n")
    prepare_s = time.perf_counter() - t
    walfs_count, walfs_s = timed(
        lambda: spark.read.format("walfs").option("topic", "bench").load(str(data)).count()
    )
    text_count, text_s = timed(lambda: spark.read.text(str(plain)).count())
    assert walfs_count == text_count == records, (walfs_count, text_count)
    # Later runs in the same session show what the JVM's JIT and warm workers add.
    again = [
        timed(lambda: spark.read.format("walfs").option("topic", "bench").load(str(data)).count())[1]
        for _ in range(repeat - 1)
    ]
    return {
        "records": records,
        "record_bytes": record_bytes,
        "prepare_s": round(prepare_s, 1),
        "walfs_count_s": round(walfs_s, 2),
        "walfs_rows_per_s": round(records / walfs_s),
        "text_count_s": round(text_s, 2),
        "text_rows_per_s": round(records / text_s),
        "walfs_vs_text": round(text_s / walfs_s, 2),
        "walfs_count_again_s": [round(t, 2) for t in again],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None, help="where data goes (default: a temporary directory)")
    ap.add_argument("--size-mib", type=int, default=1024, help="size of the mount test's topic")
    ap.add_argument("--records", type=int, default=10_000_000, help="records for the data source test")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument(
        "--repeat", type=int, default=1, help="format(walfs) counts to run (the first is the figure)"
    )
    ap.add_argument("--skip-mount", action="store_true", help="only the data source test")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="64 MiB and 500,000 records: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.size_mib, args.records = 64, 500_000

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    base = Path(tempfile.mkdtemp(prefix="walfs-bench-spark-", dir=args.dir))
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("walfs-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        import walfs
        from walfs.spark import WalfsDataSource

        spark.dataSource.register(WalfsDataSource)
        warm = base / "warm.txt"
        warm.write_bytes(b"warm\n" * 1000)
        spark.read.text(str(warm)).count()
        with walfs.Wal(base / "warm-data") as wal:
            wal.append("warm", [b"warm"] * 1000)
        # Ten small tasks, so every executor core has started its Python worker.
        _, first_s = timed(
            lambda: (
                spark.read.format("walfs")
                .option("maxRecordsPerPartition", 100)
                .load(str(base / "warm-data"))
                .count()
            )
        )
        result = {
            "run": machine(base),
            "walfs_first_query_s": round(first_s, 1),
            "mount_vs_plain": None if args.skip_mount else mount_vs_plain(spark, base, args.size_mib),
            "walfs_source_vs_text": source_vs_text(spark, base, args.records, args.record_bytes, args.repeat),
        }
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    benchkit.write_json(result, args.out)


if __name__ == "__main__":
    main()
