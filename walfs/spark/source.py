"""The data source: spark.read.format("walfs") / spark.readStream.format("walfs") to
read, df.write.format("walfs") / df.writeStream.format("walfs") to append.

PySpark finds it without registration through the top-level module pyspark_walfs (its
`DefaultSource` is this class); spark.dataSource.register(WalfsDataSource) works too.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from walfs.spark.batch import WalfsBatchReader
from walfs.spark.options import WalfsOptionError, parse_options, parse_sink_options
from walfs.spark.schema import SPARK_SCHEMA_DDL
from walfs.spark.sink import WalfsBatchWriter, WalfsStreamWriter, check_schema
from walfs.spark.stream import WalfsStreamReader


class WalfsDataSource(DataSource):
    """Reads and appends walfs topics, in a data directory or through a walfs daemon;
    see docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "walfs"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return WalfsBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return WalfsStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        opts = parse_sink_options(self.options)
        check_schema(schema.fieldNames(), opts.topic)
        return WalfsBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _append_only(overwrite)
        opts = parse_sink_options(self.options)
        check_schema(schema.fieldNames(), opts.topic)
        return WalfsStreamWriter(opts)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise WalfsOptionError(
            'a walfs topic is append-only: use mode("append") (or outputMode "append"/"update")'
        )
