"""Spark access to walfs: a PySpark Python data source named "walfs", to read and write.

    spark.read.format("walfs").option("path", DATA_DIR).option("topic", "orders").load()
    spark.read.format("walfs").option("bootstrap", "host:9092").option("topic", "orders").load()
    df.write.format("walfs").mode("append").option("path", DATA_DIR).option("topic", "t").save()

Needs pyspark >= 4.2 (read limits for streams), pyarrow and numpy; walfs itself does
not. One module per concern: options (option parsing), schema (row layout), columnar
(records to Arrow batches), ranges (offsets and input partitions), wal_cache (read-only
handles per worker), batch and stream (the readers), remote (a client of a walfs daemon's
Kafka listener) and remote_read (ranges read through it), sink (the writers and their
commit protocol), sink_rows (rows to stored records in bulk), sink_target (where they
append: the data directory) and sink_remote (through a daemon), source (the DataSource).
"""

from walfs.spark.source import WalfsDataSource

__all__ = ["WalfsDataSource"]
