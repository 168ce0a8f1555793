"""A Spark driver program for the end-to-end sink tests (run as its own process, so a test
can SIGKILL it, or point it at a standalone cluster):

    python spark_pipeline.py --master local[2] --source path=/data --sink path=/data \\
        --checkpoint /ckpt --trigger processing|available-now|batch[,...] [--workers 2]

Streaming: readStream walfs topic "in" -> upper-cased value, same key and partition ->
writeStream walfs topic "out". Batch: the same with read/write. Several triggers run one
after the other in one session. --source and --sink are
"path=DIR" or "bootstrap=HOST:PORT". Prints "executors N" once that many executors
(besides the driver) are up, and "done" at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def location(spec: str) -> dict[str, str]:
    name, _, value = spec.partition("=")
    assert name in ("path", "bootstrap"), spec
    return {name: value}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--trigger", required=True, help="processing, available-now, batch, or a comma list")
    ap.add_argument("--max-offsets", default="40")
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(args.master)
        .appName("walfs-sink-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executor.memory", "512m")
        .config("spark.driver.memory", "768m")
        .config("spark.cores.max", str(max(args.workers, 1)))
        .config("spark.executor.cores", "1")
        .config("spark.python.authenticate.socketTimeout", "300s")  # a loaded test machine
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if args.workers:
        deadline = time.monotonic() + 300
        while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < args.workers + 1:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "executors did not register"
            time.sleep(0.5)
        print("executors", spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1, flush=True)  # type: ignore[union-attr]
    source, sink = location(args.source), location(args.sink)
    for trigger in args.trigger.split(","):
        run(spark, trigger, source, sink, args.checkpoint, args.max_offsets)
        print("done", trigger, flush=True)


def run(
    spark: SparkSession,
    trigger: str,
    source: dict[str, str],
    sink: dict[str, str],
    ckpt: str,
    max_offsets: str,
) -> None:
    if trigger == "batch":
        df = spark.read.format("walfs").options(**source).option("topic", "in").load()
        out = df.select("key", F.upper(F.col("value").cast("string")).alias("value"), "partition")
        out.write.format("walfs").mode("append").options(**sink).option("topic", "out").save()
        return
    assert trigger in ("processing", "available-now"), trigger
    df = (
        spark.readStream.format("walfs")
        .options(**source)
        .option("topic", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )
    out = df.select("key", F.upper(F.col("value").cast("string")).alias("value"), "partition")
    w = (
        out.writeStream.format("walfs")
        .options(**sink)
        .option("topic", "out")
        .option("checkpointLocation", ckpt)
    )
    if trigger == "available-now":
        q = w.trigger(availableNow=True).start()
    else:
        q = w.trigger(processingTime="0 seconds").start()
    print("started", q.id, flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main()
