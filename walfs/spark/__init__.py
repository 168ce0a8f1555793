"""Spark access to walfs: a PySpark Python data source named "walfs".

    spark.read.format("walfs").option("path", DATA_DIR).option("topic", "orders").load()

Needs pyspark >= 4.2 (read limits for streams), pyarrow and numpy; walfs itself does
not. One module per concern: options (option parsing), schema (row layout), columnar
(records to Arrow batches), ranges (offsets and input partitions), wal_cache (read-only
handles per worker), batch and stream (the readers), source (the DataSource).
"""

from walfs.spark.source import WalfsDataSource

__all__ = ["WalfsDataSource"]
