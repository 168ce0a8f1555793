"""Streaming reads: spark.readStream.format("walfs").

An offset is the next record offset to read of every selected stream, as Kafka's source
writes it: {"orders": {"0": 1200, "1": 998}}. Spark writes the end offset of a
micro-batch to its checkpoint before running it and calls partitions(start, end) with
exactly those dicts again after a restart, and walfs offsets never change meaning (records
are immutable and offsets dense), so a restarted query re-reads precisely the batch it had
not committed: no gaps, and no duplicates in an idempotent sink such as the file sink.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from walfs.spark.batch import read_partition
from walfs.spark.options import EARLIEST, StreamId, WalfsOptions
from walfs.spark.ranges import (
    Offsets,
    StreamBounds,
    check_data_loss,
    current_bounds,
    from_json,
    resolve,
    split,
    to_json,
)


class WalfsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: WalfsOptions) -> None:
        self.opts = opts
        # Trigger.AvailableNow: the high watermarks when the query started; later growth
        # belongs to the next run.
        self._cap: Offsets | None = None

    def _bounds(self) -> dict[StreamId, StreamBounds]:
        # A fresh view each time: a read-only engine only sees records present at open.
        return current_bounds(self.opts)

    def initialOffset(self) -> dict:
        bounds = self._bounds()
        return to_json(resolve(self.opts.starting, bounds, EARLIEST))

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = {sid: b.high for sid, b in self._bounds().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # This signature (PySpark >= 4.2) tells Spark the source supports read limits
        # (maxOffsetsPerTrigger) and Trigger.AvailableNow.
        begin = from_json(start)
        bounds = self._bounds()
        latest = {sid: b.high for sid, b in bounds.items()}
        if self._cap is not None:
            latest = {sid: min(high, self._cap[sid]) for sid, high in latest.items() if sid in self._cap}
        # A stream never goes backwards, also if it vanished from the listing (a topic
        # filter, an older copy of the directory): keep what was already planned.
        for sid, off in begin.items():
            latest[sid] = max(latest.get(sid, off), off)
        if isinstance(limit, ReadMaxRows):
            # A stream new to this query starts at its first stored record (partitions()
            # reads it from there), so its backlog counts from there too.
            base = {sid: begin[sid] if sid in begin else bounds[sid].low for sid in latest}
            latest = cap_rows(base, latest, limit.max_rows)
        return to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return to_json({sid: b.high for sid, b in self._bounds().items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        bounds = self._bounds()
        begin, stop = from_json(start), from_json(end)
        starts: Offsets = {}
        for sid in stop:
            if sid in begin:
                low = bounds[sid].low if sid in bounds else 0
                starts[sid] = check_data_loss(sid, begin[sid], low, self.opts.fail_on_data_loss)
            else:
                # A stream created after the query started: read it from its first record
                # (Kafka does the same for new partitions).
                starts[sid] = bounds[sid].low if sid in bounds else 0
        return split(self.opts, starts, stop, bounds)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(partition)

    def commit(self, end: dict) -> None:
        # Nothing to release: the WAL keeps records until it is trimmed, and progress
        # lives in Spark's checkpoint (like Kafka's source, no consumer group is touched).
        pass


def cap_rows(begin: Mapping[StreamId, int], latest: Mapping[StreamId, int], max_rows: int) -> Offsets:
    """Advances each stream from `begin` (which names every stream of `latest`) toward
    `latest`, at most max_rows in all, shared in proportion to what each stream has
    waiting (so no stream starves)."""
    waiting = {sid: high - begin[sid] for sid, high in latest.items()}
    total = sum(w for w in waiting.values() if w > 0)
    if total <= max_rows:
        return dict(latest)
    out: Offsets = {}
    given = 0
    for sid in sorted(latest):
        w = max(0, waiting[sid])
        take = w * max_rows // total
        out[sid] = begin[sid] + take
        given += take
    # Hand the rounding leftovers out in order, so a batch always makes progress.
    for sid in sorted(latest):
        if given >= max_rows:
            break
        extra = min(max_rows - given, latest[sid] - out[sid])
        if extra > 0:
            out[sid] += extra
            given += extra
    return out
