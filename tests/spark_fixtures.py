"""Spark fixtures, loaded as a plugin by the Spark test modules
(`pytest_plugins = ["spark_fixtures"]`).

One local[2] SparkSession serves the whole test session: starting one takes seconds,
and every Spark test module shares it. PYSPARK_PYTHON points Spark's Python workers at
this interpreter (the venv), where walfs, pyspark_walfs and pyarrow are installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

# How long Spark waits for a Python worker to start and connect back (default 15 s): a
# loaded test machine can take longer, and the query then fails instead of waiting.
SLOW_MACHINE_TIMEOUT = "300s"
# The same for Spark programs the tests start as processes (README tour, examples).
SUBMIT_ARGS = f"--conf spark.python.authenticate.socketTimeout={SLOW_MACHINE_TIMEOUT} pyspark-shell"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("walfs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Small data: two shuffle partitions instead of 200 keep every aggregation quick.
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.authenticate.socketTimeout", SLOW_MACHINE_TIMEOUT)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
