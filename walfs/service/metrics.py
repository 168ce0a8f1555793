"""Metrics for operators: a Prometheus endpoint (`--metrics-listen HOST:PORT`, off by
default) on the mount daemon and `walfs serve`, and a summary of the same text (bounded:
per-topic series summed, no histogram buckets) as the mount root's `user.walfs.metrics`
xattr for people without Prometheus. The counters are walfs.common.metrics'; everything
else (consumer lag, disk free, segment files, fsync rounds, recovery figures) is computed
here when scraped, through the engine contract and its capabilities."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from walfs.common.metrics import BUCKETS, Latency
from walfs.engine.capabilities import Checks, DiskUse, has
from walfs.engine.rules import committed_offset
from walfs.errors import WalError


class Metrics:
    """What one daemon exposes: its engine's figures (walfs.engine.contract.LogEngine) plus
    request latencies of its faces."""

    def __init__(self, engine: Any, *, fuse: Latency | None = None) -> None:
        self.engine = engine
        # The mount passes the histogram its request handlers time into (LoopLatency).
        self.fuse = Latency() if fuse is None else fuse
        self.kafka = Latency()
        self._server: Any = None

    # -- exposition ---------------------------------------------------------------------
    def families(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        engine = self.engine
        stats = engine.stats
        appends = CounterMetricFamily("walfs_appends", "records appended", labels=["topic", "partition"])
        nbytes = CounterMetricFamily(
            "walfs_append_bytes", "value bytes appended", labels=["topic", "partition"]
        )
        for (topic, partition), (n, b) in stats.appends_by_stream().items():
            appends.add_metric([topic, str(partition)], n)
            nbytes.add_metric([topic, str(partition)], b)
        yield appends
        yield nbytes
        report: dict[str, int] = engine.report() if has(engine, Checks) else {}
        syncs = report.get("syncs", 0)
        yield CounterMetricFamily("walfs_fsync_rounds", "fsync rounds since open", value=syncs)
        total = stats.records_appended
        yield GaugeMetricFamily(
            "walfs_records_per_fsync", "records appended per fsync round since open",
            value=total / syncs if syncs else 0.0,
        )
        yield from _disk_families(engine)
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
        for group, topic, partition, behind in consumer_lags(engine):
            lag.add_metric([group, topic, str(partition)], behind)
        yield lag
        st = os.statvfs(engine.path)
        yield GaugeMetricFamily("walfs_disk_free_bytes", "free bytes on the data directory's file system",
                                value=st.f_bavail * st.f_frsize)
        segs = [e for e in os.scandir(engine.path) if e.name.startswith("seg-")]
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
                                value=report.get("cut_records", 0))
        yield GaugeMetricFamily("walfs_recovery_verified_records", "records checked by CRC at the last open",
                                value=report.get("verified_records", 0))
        yield GaugeMetricFamily("walfs_recovery_metadata_damaged",
                                "damaged metadata copies (a catalog copy, a segment header) the last open "
                                "found and served from a good one",
                                value=report.get("metadata_damaged", 0))
        yield GaugeMetricFamily("walfs_recovery_quarantined_records",
                                "damaged durable records the last open kept and refuses to read",
                                value=report.get("quarantined", 0))
        yield CounterMetricFamily(
            "walfs_healed_copies",
            "metadata copies (catalog, segment headers, topics.conf, cursors.manifest, cursor files) found "
            "damaged, missing or behind at the open or a first read, and rewritten from their good copy",
            value=report.get("healed", 0) + report.get("healed_files", 0),
        )
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
def _disk_families(engine: Any) -> Iterator[Any]:
    """etcd's etcd_disk_wal_fsync_duration_seconds and etcd_disk_wal_write_bytes_total,
    as walfs_*: the C core's own counts (walfs_disk_stats), for an engine that has them."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    if not has(engine, DiskUse):
        return
    d = engine.disk_stats()
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


def consumer_lags(engine: Any) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, records behind the high watermark) for every cursor."""
    out = []
    streams = engine.streams()
    for group in engine.groups():
        for topic, partition in streams:
            try:
                offset = committed_offset(engine, group, topic, partition)
            except WalError:
                continue  # a damaged cursor file is reported where it is read
            if offset is not None:
                behind = max(engine.info(topic, partition).high_watermark - offset, 0)
                out.append((group, topic, partition, behind))
    return out
