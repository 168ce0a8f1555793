"""A Spark program for tests/test_spark_sink_retry.py: batch writes on a local[2,2]
master (Spark retries a failed task once: the shared test session's local[2] never
retries), with the sink's fault point (option walfs.test.failAfterAppend) failing a task
after its rows were appended.

    python spark_sink_retry_job.py JOBS_JSON

JOBS_JSON: a list of {"options": {...}, "topic": NAME}; each job writes rows 0..39 (four
Spark partitions of ten, partition i = rows 10i..10i+9) as values "<row>" to `topic`.
Prints one JSON line: per job, null when the job succeeded, else Spark's error.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from spark_fixtures import SLOW_MACHINE_TIMEOUT

ROWS, PARTITIONS = 40, 4


def main() -> None:
    jobs = json.loads(sys.argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2,2]")
        .appName("walfs-sink-retry")
        .config("spark.ui.enabled", "false")
        .config("spark.python.authenticate.socketTimeout", SLOW_MACHINE_TIMEOUT)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    results: list[str | None] = []
    try:
        for job in jobs:
            df = spark.range(0, ROWS, numPartitions=PARTITIONS).select(
                F.lit(job["topic"]).alias("topic"), F.col("id").cast("string").alias("value")
            )
            try:
                df.write.format("walfs").mode("append").options(**job["options"]).save()
                results.append(None)
            except PySparkException as e:
                results.append(str(e) or type(e).__name__)
    finally:
        spark.stop()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
