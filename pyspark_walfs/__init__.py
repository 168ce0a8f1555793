"""Entry point PySpark discovers: any installed top-level module named pyspark_* with a
`DefaultSource` is registered under DefaultSource.name() (pyspark/sql/worker/
lookup_data_sources.py), so spark.read.format("walfs") works with no registration call.
The code lives in walfs.spark."""

from walfs.spark.source import WalfsDataSource as DefaultSource

__all__ = ["DefaultSource"]
