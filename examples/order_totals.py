"""A Structured Streaming aggregation from one walfs topic into another, through a walfs
daemon's Kafka listener (see README.md here and docs/spark.md).

    python examples/order_totals.py --bootstrap 127.0.0.1:9092 --checkpoint /tmp/totals-ckpt
                                    [--available-now]

Reads lines like "order 42 paid" from topic "orders", counts orders per status (the
third word) in 5-second windows of their append time, and writes each window's counts to
topic "totals" once the window has closed (a record appended after it closes it:
append mode with a watermark, the aggregation mode Python data sources support) as
key=status, value="<window start> <status> <count>", exactly once per micro-batch.
Without --available-now it runs until stopped, a micro-batch every 2 seconds; restarted
with the same checkpoint it continues where it stopped.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True, help="host:port of walfs mount/serve --kafka-listen")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this venv
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("walfs-order-totals")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    orders = (
        spark.readStream.format("walfs")
        .option("bootstrap", args.bootstrap)
        .option("topic", "orders")
        .option("startingOffsets", "earliest")
        .load()
    )
    status = F.split(F.col("value").cast("string"), " ").getItem(2)
    totals = (
        orders.withWatermark("timestamp", "0 seconds")
        .groupBy(F.window("timestamp", "5 seconds"), status.alias("status"))
        .count()
    )
    out = totals.select(
        F.col("status").alias("key"),
        F.concat_ws(
            " ", F.date_format("window.start", "HH:mm:ss"), F.col("status"), F.col("count").cast("string")
        ).alias("value"),
    )
    writer = (
        out.writeStream.format("walfs")
        .option("bootstrap", args.bootstrap)
        .option("topic", "totals")
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="2 seconds")
    writer.start().awaitTermination()


if __name__ == "__main__":
    main()
