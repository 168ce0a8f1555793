"""Batch reads: spark.read.format("walfs")."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from walfs.spark import wal_cache
from walfs.spark.columnar import read_range
from walfs.spark.options import EARLIEST, LATEST, WalfsOptions
from walfs.spark.ranges import WalfsInputPartition, check_data_loss, current_bounds, resolve, split


class WalfsBatchReader(DataSourceReader):
    def __init__(self, opts: WalfsOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        # The offsets are fixed here, once, from a fresh view: every task then reads
        # exactly its planned range even while a writer keeps appending.
        bounds = current_bounds(self.opts)
        starts = resolve(self.opts.starting, bounds, EARLIEST)
        ends = resolve(self.opts.ending, bounds, LATEST)
        starts = {
            sid: check_data_loss(sid, off, bounds[sid].low, self.opts.fail_on_data_loss)
            for sid, off in starts.items()
        }
        return split(self.opts, starts, ends, bounds)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(partition)


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """One task's rows (shared by batch and stream readers)."""
    if not isinstance(partition, WalfsInputPartition):
        # When partitions() returns none, Spark still runs one task with
        # InputPartition(None): nothing is selected, so there is nothing to read.
        return
    p = partition
    if p.bootstrap:
        from walfs.spark.remote_read import read_remote_range  # kio: slow to import, only here

        yield from read_remote_range(p.bootstrap, p.topic, p.partition, p.start, p.end)
        return
    engine = wal_cache.wal_covering(p.path, p.org_id, p.topic, p.partition, p.end)
    yield from read_range(engine, p.topic, p.partition, p.start, p.end)
