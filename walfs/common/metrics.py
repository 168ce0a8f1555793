"""Metrics for operators: a Prometheus endpoint (`--metrics-listen HOST:PORT`, off by
default) on the mount daemon and `walfs serve`, and a summary of the same text (bounded:
per-topic series summed, no histogram buckets) as the mount root's `user.walfs.metrics`
xattr for people without Prometheus.

Hot paths pay almost nothing: the Wal keeps plain integer counters (appends and bytes per
stream, reclaimed files) and a `Latency` histogram of durability waits; FUSE requests
(walfs.fuse.requests) are timed into the mount's lock-free `LoopLatency`, Kafka requests
into a `Latency` kept here.
Everything else (consumer lag, disk free, segment files, fsync rounds, recovery figures)
is computed when scraped.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from walfs.errors import WalError

# Seconds: 50 us .. 10 s, enough for a FUSE round trip and a slow fsync alike.
BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Latency:
    """A fixed-bucket histogram per label value (thread-safe; one lock per observe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self._errors: dict[str, int] = {}

    def observe(self, label: str, seconds: float, error: bool = False) -> None:
        i = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            counts = self._counts.get(label)
            if counts is None:
                counts = self._counts[label] = [0] * (len(BUCKETS) + 1)
                self._sums[label] = 0.0
            counts[i] += 1
            self._sums[label] += seconds
            if error:
                self._errors[label] = self._errors.get(label, 0) + 1

    def snapshot(self) -> list[tuple[str, list[int], float, int]]:
        with self._lock:
            return [(k, list(v), self._sums[k], self._errors.get(k, 0)) for k, v in self._counts.items()]

    def time(self, label: str) -> _Timer:
        return _Timer(self, label)


class LoopLatency(Latency):
    """A Latency that one thread writes (an event loop: the mount's FUSE requests) and any
    thread reads (a scrape): `observe` takes no lock.

    Each label has one list, `slots[label]` (made up front for `labels`, by `slot()`
    for others): the bucket counts, then the error count (ERRORS) and the sum of
    seconds (SUM). The writer changes its items in place, and a reader copies the list;
    each item's store is atomic under the GIL, so a snapshot taken during a request may
    miss that request in some items, never count it twice. Labels never observed are
    left out of snapshots. The mount's request wrapper (walfs.fuse.requests) updates a
    slot inline: a method call with a lock per request was a measurable share of a
    small request's time."""

    ERRORS = len(BUCKETS) + 1
    SUM = len(BUCKETS) + 2

    def __init__(self, labels: Iterable[str] = ()) -> None:
        super().__init__()
        self.slots: dict[str, list[Any]] = {label: self._new_slot() for label in labels}

    @staticmethod
    def _new_slot() -> list[Any]:
        return [0] * (len(BUCKETS) + 2) + [0.0]

    def slot(self, label: str) -> list[Any]:
        s = self.slots.get(label)
        if s is None:
            with self._lock:  # slots are made by the writer, listed by readers
                s = self.slots.setdefault(label, self._new_slot())
        return s

    def observe(self, label: str, seconds: float, error: bool = False) -> None:
        s = self.slot(label)
        s[bisect.bisect_left(BUCKETS, seconds)] += 1
        s[self.SUM] += seconds
        if error:
            s[self.ERRORS] += 1

    def snapshot(self) -> list[tuple[str, list[int], float, int]]:
        with self._lock:
            slots = list(self.slots.items())
        out = []
        for label, s in slots:
            copy = list(s)
            counts = copy[: len(BUCKETS) + 1]
            if any(counts):
                out.append((label, counts, copy[self.SUM], copy[self.ERRORS]))
        return out


class _Timer:
    def __init__(self, hist: Latency, label: str) -> None:
        self.hist, self.label = hist, label

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.hist.observe(self.label, time.perf_counter() - self.t0, exc_type is not None)


TALLY_FOLD = 1024  # a single appender folds its stream's tally once it holds this many appends


class WalStats:
    """The Wal's own counters: plain integers on the append path, read when scraped.

    Single appends (the stream handle, LocalAppender) do not take the lock: each adds its
    byte count to its stream's tally (stream_tally), a list that only grows by
    list.append (atomic under the GIL); whoever holds the lock folds tallies into the
    counters (fold), the appender itself once a tally is long, and every read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._appends: dict[tuple[str, int], list[int]] = {}
        self._tallies: dict[tuple[str, int], list[int]] = {}
        self._records_appended = 0
        self.reclaimed_segments = 0
        self.backpressure_waits = 0  # appends that waited for retention (size limit + one segment)
        self.open_seconds = 0.0
        self.durable_waits = Latency()
        self.corrupt = CorruptRecords()

    def appended(self, topic: str, partition: int, n: int, nbytes: int) -> None:
        with self._lock:
            self._count(topic, partition, n, nbytes)

    def _count(self, topic: str, partition: int, n: int, nbytes: int) -> None:
        c = self._appends.get((topic, partition))
        if c is None:
            c = self._appends[(topic, partition)] = [0, 0]
        c[0] += n
        c[1] += nbytes
        self._records_appended += n

    def stream_tally(self, topic: str, partition: int) -> list[int]:
        """The list single appends to (topic, partition) add their byte counts to."""
        with self._lock:
            t = self._tallies.get((topic, partition))
            if t is None:
                t = self._tallies[(topic, partition)] = []
            return t

    def fold(self) -> None:
        with self._lock:
            self._fold()

    def _fold(self) -> None:
        for (topic, partition), t in self._tallies.items():
            k = len(t)
            if k:
                nbytes = sum(t[:k])
                del t[:k]  # appends that came meanwhile stay, after the first k
                self._count(topic, partition, k, nbytes)

    @property
    def records_appended(self) -> int:
        with self._lock:
            self._fold()
            return self._records_appended

    def appends_by_stream(self) -> dict[tuple[str, int], tuple[int, int]]:
        with self._lock:
            self._fold()
            return {k: (v[0], v[1]) for k, v in self._appends.items()}


# -- damaged records met by reads (walfs_corrupt_records_total) -------------------------

CORRUPT_REMEMBERED = 4096  # damaged records remembered, so that each is logged once


class CorruptRecords:
    """Damaged records that reads ran into (the engine raises CorruptRecordError for
    them): `first` says whether this one is new, so that it is logged and counted once,
    not at every read that reaches it again (a kernel's or a Kafka client's retries).
    Bounded: past CORRUPT_REMEMBERED the oldest is forgotten (and would count again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, int], None] = {}  # (stream number, offset), oldest first
        self.total = 0

    def first(self, stream_no: int, offset: int) -> bool:
        key = (stream_no, offset)
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= CORRUPT_REMEMBERED:
                del self._seen[next(iter(self._seen))]
            self._seen[key] = None
            self.total += 1
            return True

    def __len__(self) -> int:
        return len(self._seen)


class Metrics:
    """What one daemon exposes: its engine's figures (walfs.engine.contract.LogEngine) plus
    request latencies of its faces."""

    def __init__(self, wal: Any, *, fuse: Latency | None = None) -> None:
        self.wal = wal
        # The mount passes the histogram its request handlers time into (LoopLatency).
        self.fuse = Latency() if fuse is None else fuse
        self.kafka = Latency()
        self._server: Any = None

    # -- exposition ---------------------------------------------------------------------
    def families(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        wal = self.wal
        stats = wal.stats
        appends = CounterMetricFamily("walfs_appends", "records appended", labels=["topic", "partition"])
        nbytes = CounterMetricFamily(
            "walfs_append_bytes", "value bytes appended", labels=["topic", "partition"]
        )
        for (topic, partition), (n, b) in stats.appends_by_stream().items():
            appends.add_metric([topic, str(partition)], n)
            nbytes.add_metric([topic, str(partition)], b)
        yield appends
        yield nbytes
        report = wal.report()
        yield CounterMetricFamily("walfs_fsync_rounds", "fsync rounds since open", value=report["syncs"])
        total = stats.records_appended
        yield GaugeMetricFamily(
            "walfs_records_per_fsync", "records appended per fsync round since open",
            value=total / report["syncs"] if report["syncs"] else 0.0,
        )
        yield from _disk_families(wal)
        yield _histogram(HistogramMetricFamily, "walfs_durable_wait_seconds",
                         "time appenders and sync() waited for durability", "kind", stats.durable_waits)
        yield _histogram(HistogramMetricFamily, "walfs_fuse_request_seconds", "FUSE requests by op",
                         "op", self.fuse)
        yield _errors(CounterMetricFamily, "walfs_fuse_request_errors",
                      "FUSE requests answered with an error", "op", self.fuse)
        yield _histogram(HistogramMetricFamily, "walfs_kafka_request_seconds", "Kafka requests by API",
                         "api", self.kafka)
        yield _errors(CounterMetricFamily, "walfs_kafka_request_errors",
                      "Kafka requests that failed or closed their connection", "api", self.kafka)
        lag = GaugeMetricFamily("walfs_consumer_lag", "records a group has not committed",
                                labels=["group", "topic", "partition"])
        for group, topic, partition, behind in consumer_lags(wal):
            lag.add_metric([group, topic, str(partition)], behind)
        yield lag
        st = os.statvfs(wal.path)
        yield GaugeMetricFamily("walfs_disk_free_bytes", "free bytes on the data directory's file system",
                                value=st.f_bavail * st.f_frsize)
        segs = [e for e in os.scandir(wal.path) if e.name.startswith("seg-")]
        yield GaugeMetricFamily("walfs_segment_files", "segment files", value=len(segs))
        yield GaugeMetricFamily("walfs_segment_bytes", "bytes in segment files",
                                value=sum(e.stat().st_size for e in segs))
        yield CounterMetricFamily("walfs_reclaimed_segments", "segment files deleted by reclamation",
                                  value=stats.reclaimed_segments)
        yield CounterMetricFamily("walfs_backpressure_waits",
                                  "appends that waited for retention at their size limit plus one segment",
                                  value=stats.backpressure_waits)
        yield GaugeMetricFamily("walfs_recovery_seconds", "time the last open took", value=stats.open_seconds)
        yield GaugeMetricFamily("walfs_recovery_cut_records", "torn records cut at the last open",
                                value=report["cut_records"])
        yield GaugeMetricFamily("walfs_recovery_verified_records", "records checked by CRC at the last open",
                                value=report["verified_records"])
        yield CounterMetricFamily("walfs_corrupt_records",
                                  "damaged records (failing their checksum) that reads ran into, each once",
                                  value=stats.corrupt.total)

    def text(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return bytes(generate_latest(registry))

    def summary_text(self) -> bytes:
        """The mount root's user.walfs.metrics: `text()` bounded to fit an xattr (64 KiB)
        whatever the number of topics and groups (summary)."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_SummaryCollector(self))
        return bytes(generate_latest(registry))

    def serve(self, listen: str) -> tuple[str, int]:
        """Starts the HTTP endpoint on HOST:PORT (a thread); returns the bound address."""
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import start_http_server

        from walfs.common.addresses import parse_listen_address

        host, port = parse_listen_address(listen)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        server, _thread = start_http_server(port, addr=host, registry=registry)
        self._server = server
        return host, int(server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        return self.metrics.families()


# -- the disk as etcd's WAL metrics name it (issue 33) ------------------------------------
def _disk_families(wal: Any) -> Iterator[Any]:
    """etcd's etcd_disk_wal_fsync_duration_seconds and etcd_disk_wal_write_bytes_total,
    as walfs_*: the C core's own counts (walfs_disk_stats), for an engine that has them."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    disk_stats = getattr(wal, "disk_stats", None)
    if disk_stats is None:
        return
    d = disk_stats()
    cumulative, acc = [], 0
    for bound, c in zip((*map(str, d["fsync_bounds"]), "+Inf"), d["fsync_counts"], strict=True):
        acc += c
        cumulative.append((bound, acc))
    yield HistogramMetricFamily(
        "walfs_disk_wal_fsync_duration_seconds",
        "time each sync round took to fdatasync every dirty segment file",
        buckets=cumulative,
        sum_value=d["fsync_sum"],
    )
    yield CounterMetricFamily(
        "walfs_disk_wal_write_bytes", "bytes appends wrote into segment files", value=d["write_bytes"]
    )


# -- the xattr's summary (issue 33) --------------------------------------------------------
# Labels whose values grow with the data (topics, partitions, groups): a series carrying
# one is summed into one series without labels in the xattr.
PER_TOPIC_LABELS = frozenset({"topic", "partition", "group"})


class _SummaryCollector:
    """The endpoint's families with every per-topic series summed into one unlabelled
    series and histograms without their buckets (count and sum stay): what is left grows
    only with the fixed sets of FUSE ops and Kafka APIs, a few KiB."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.metrics_core import Metric

        for fam in self.metrics.families():
            out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            summed: dict[str, float] = {}
            for sample in fam.samples:
                if fam.type == "histogram" and sample.name.endswith("_bucket"):
                    continue
                if PER_TOPIC_LABELS & sample.labels.keys():
                    summed[sample.name] = summed.get(sample.name, 0.0) + sample.value
                else:
                    out.add_sample(sample.name, sample.labels, sample.value)
            for name, total in summed.items():
                out.add_sample(name, {}, total)
            yield out


def _histogram(family: Any, name: str, doc: str, label: str, hist: Latency) -> Any:
    fam = family(name, doc, labels=[label])
    for key, counts, total, _errs in hist.snapshot():
        cumulative, acc = [], 0
        for bound, c in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
            acc += c
            cumulative.append((bound, acc))
        fam.add_metric([key], cumulative, total)
    return fam


def _errors(family: Any, name: str, doc: str, label: str, hist: Latency) -> Any:
    fam = family(name, doc, labels=[label])
    for key, _counts, _total, errs in hist.snapshot():
        fam.add_metric([key], errs)
    return fam


def consumer_lags(wal: Any) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, records behind the high watermark) for every cursor."""
    out = []
    streams = wal.streams()
    for group in wal.groups():
        for topic, partition in streams:
            try:
                offset = wal.committed(group, topic, partition)
            except WalError:
                continue  # a damaged cursor file is reported where it is read
            if offset is not None:
                behind = max(wal.info(topic, partition).high_watermark - offset, 0)
                out.append((group, topic, partition, behind))
    return out
