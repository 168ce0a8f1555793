"""The data source: spark.read.format("walfs") / spark.readStream.format("walfs").

PySpark finds it without registration through the top-level module pyspark_walfs (its
`DefaultSource` is this class); spark.dataSource.register(WalfsDataSource) works too.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from walfs.spark.batch import WalfsBatchReader
from walfs.spark.options import parse_options
from walfs.spark.schema import SPARK_SCHEMA_DDL
from walfs.spark.stream import WalfsStreamReader


class WalfsDataSource(DataSource):
    """Reads walfs topics from a data directory; see docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "walfs"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return WalfsBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return WalfsStreamReader(parse_options(self.options, streaming=True))
