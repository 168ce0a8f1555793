"""Planning: which records of which streams a query reads, cut into input partitions.

Offsets here are per-stream record offsets, keyed by (topic, partition) in Python and
serialised as Kafka's source does: {"topic": {"0": 23}}. One input partition is one Spark
task; a stream is cut into ranges bounded both in records and in (estimated) bytes so a
single large stream still spreads over all cores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from walfs import OffsetOutOfRangeError
from walfs.engine.contract import LogEngine
from walfs.spark import wal_cache
from walfs.spark.options import EARLIEST, LATEST, OffsetSpec, StreamId, WalfsOptions

if TYPE_CHECKING:
    from walfs.spark.remote import RemoteWal

Offsets = dict[StreamId, int]


@dataclass(frozen=True)
class StreamBounds:
    low: int  # first record still stored (below it: trimmed)
    high: int  # high watermark: one past the last complete record
    bytes_per_record: float  # mean size in the byte view, for byte-bounded splits


class WalfsInputPartition(InputPartition):
    """Records start..end-1 of topic[partition] in the data directory `path`.

    Carries everything a task needs (it is pickled to an executor that shares nothing
    else with the driver but the data directory, or with `bootstrap`, not even that)."""

    def __init__(
        self,
        path: str,
        org_id: int,
        topic: str,
        partition: int,
        start: int,
        end: int,
        bootstrap: str | None = None,
    ) -> None:
        super().__init__((topic, partition, start, end))
        self.path = path
        self.bootstrap = bootstrap  # read through this daemon's Kafka listener instead of `path`
        self.org_id = org_id
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"WalfsInputPartition({self.topic!r}[{self.partition}] {self.start}..{self.end})"


def current_bounds(opts: WalfsOptions) -> dict[StreamId, StreamBounds]:
    """Every selected stream as it is now: from a fresh read-only open of the data
    directory, or from the daemon named by `bootstrap`."""
    if opts.bootstrap:
        # Imported here: the Kafka client (kio) is slow to import, and Spark gives a
        # Python worker 10 s to start.
        from walfs.spark.remote import RemoteWal

        with RemoteWal(opts.bootstrap) as remote:
            return remote_stream_bounds(remote, opts)
    with wal_cache.open_fresh(opts.path, opts.org_id) as engine:
        return stream_bounds(engine, opts)


def remote_stream_bounds(remote: RemoteWal, opts: WalfsOptions) -> dict[StreamId, StreamBounds]:
    """Kafka's view: partitions 0..n-1 of each selected topic, from the log start offset
    to the high watermark (the durable end). Record sizes are not known: splits are
    bounded by maxRecordsPerPartition only."""
    from walfs.spark.remote import EARLIEST as REMOTE_EARLIEST
    from walfs.spark.remote import LATEST as REMOTE_LATEST

    counts = remote.topics()
    sids = [(t, p) for t in opts.select(counts) for p in range(counts[t])]
    lows = remote.list_offsets(sids, REMOTE_EARLIEST)
    highs = remote.list_offsets(sids, REMOTE_LATEST)
    return {sid: StreamBounds(lows[sid], max(lows[sid], highs[sid]), 0.0) for sid in sids}


def stream_bounds(engine: LogEngine, opts: WalfsOptions) -> dict[StreamId, StreamBounds]:
    """Every selected stream as the read-only handle `wal` sees it."""
    out: dict[StreamId, StreamBounds] = {}
    for topic in opts.select(sorted({t for t, _ in engine.streams()})):
        for _, p in engine.streams(topic):
            info = engine.info(topic, p)
            n = info.high_watermark - info.low_watermark
            per = (info.byte_size - info.low_byte) / n if n > 0 else 0.0
            out[(topic, p)] = StreamBounds(info.low_watermark, info.high_watermark, per)
    return out


def resolve(spec: OffsetSpec, bounds: Mapping[StreamId, StreamBounds], missing: int) -> Offsets:
    """Turns earliest/latest/explicit into concrete offsets for every stream in `bounds`.

    Explicit offsets are clamped to the high watermark (Kafka does the same for an end
    offset past the log); offsets below the low watermark are left as given so the reader
    can apply failOnDataLoss."""
    out: Offsets = {}
    for sid, b in bounds.items():
        want = spec.for_stream(sid, missing)
        if want == EARLIEST:
            out[sid] = b.low
        elif want == LATEST:
            out[sid] = b.high
        else:
            out[sid] = min(want, b.high)
    return out


def check_data_loss(sid: StreamId, start: int, low: int, fail: bool) -> int:
    """The first offset to read: `start`, or the low watermark if records were trimmed
    away and the query accepts that (failOnDataLoss=false)."""
    if start >= low:
        return start
    if fail:
        raise OffsetOutOfRangeError(
            f"{sid[0]!r}[{sid[1]}]: offsets {start}..{low - 1} were trimmed before Spark read them; "
            'set .option("failOnDataLoss", "false") to skip them'
        )
    return low


def split(
    opts: WalfsOptions,
    starts: Mapping[StreamId, int],
    ends: Mapping[StreamId, int],
    bounds: Mapping[StreamId, StreamBounds],
) -> list[WalfsInputPartition]:
    """Input partitions covering starts[s]..ends[s] for every stream, in bounded ranges."""
    parts: list[WalfsInputPartition] = []
    for sid in sorted(ends):
        start, end = starts.get(sid, 0), ends[sid]
        if end <= start:
            continue
        per = bounds[sid].bytes_per_record if sid in bounds else 0.0
        step = opts.max_records_per_partition
        if per > 0:
            step = max(1, min(step, int(opts.max_bytes_per_partition // per)))
        for lo in range(start, end, step):
            parts.append(
                WalfsInputPartition(
                    opts.path, opts.org_id, sid[0], sid[1], lo, min(lo + step, end), opts.bootstrap
                )
            )
    return parts


def to_json(offsets: Mapping[StreamId, int]) -> dict[str, dict[str, int]]:
    """Kafka's offset layout, which Spark stores in the checkpoint as JSON."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = off
    return out


def from_json(doc: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(p)): int(off) for topic, parts in doc.items() for p, off in parts.items()}
