"""Where a Kafka fetch is read (walfs/kafka/fetch.py): on the event loop only when it
cannot wait there, that is with every partition's records in the page cache and no sync
due; in a worker thread otherwise (records on disk only, records past the durable mark,
more than MAX_INLINE_PARTITIONS partitions). Real engine, real page cache: the segment's
pages are dropped with posix_fadvise(DONTNEED) to put records on disk only. Either way the
consumer gets the same records (checked through the real listener)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kafka_harness import Listener, consume, fetch_request, rdkafka_consumer

import walfs
from walfs.kafka.broker import Broker
from walfs.kafka.dispatch import SUPPORTED
from walfs.kafka.fetch import MAX_INLINE_PARTITIONS, _readable_inline

# Runs of 1 MiB: the open maps each run's header and index (and the kernel maps 64 KiB
# around each page it faults in), which posix_fadvise cannot then drop; the records
# between them it can.
GEOMETRY = {"segment_size": 16 << 20, "block_size": 1 << 20}
HOUR_MS = 3_600_000  # an interval syncer that never runs during a test


def request(topic: str, partitions: list[int], offset: int) -> Any:
    return fetch_request(topic, dict.fromkeys(partitions, offset))


def drop_page_cache(data: Path) -> None:
    for name in os.listdir(data):
        if name.startswith("seg-"):
            fd = os.open(data / name, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def test_a_sync_due_or_many_partitions_send_the_read_to_a_thread(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "d"), fsync="interval", fsync_interval_ms=HOUR_MS, **GEOMETRY) as w:
        broker = Broker(w.engine, api_versions=dict(SUPPORTED))
        w.append("t", [b"v%03d" % i for i in range(100)])
        assert w.engine.info("t", 0).durable_watermark < 100
        assert not _readable_inline(broker, request("t", [0], 0))  # durable_end would fsync
        w.sync()
        assert _readable_inline(broker, request("t", [0], 0))
        assert _readable_inline(broker, request("t", [0], 100))  # at the end: nothing to read
        for p in range(1, MAX_INLINE_PARTITIONS + 1):
            w.create("t", p)
        assert _readable_inline(broker, request("t", list(range(MAX_INLINE_PARTITIONS)), 0))
        assert not _readable_inline(broker, request("t", list(range(MAX_INLINE_PARTITIONS + 1)), 0))
        assert not _readable_inline(broker, request("t", [-1], 0))


def test_records_on_disk_only_are_read_in_a_thread_and_served_the_same(tmp_path: Path) -> None:
    data = tmp_path / "d"
    values = [os.urandom(1000) for _ in range(2000)]  # ~2 MB: more than one fetch's MiB
    with walfs.Wal(str(data), fsync="never", **GEOMETRY) as w:
        w.append("t", values)
    with walfs.Wal(str(data), fsync="never", **GEOMETRY) as w, Listener(w) as lst:
        drop_page_cache(data)  # after the open, which reads the runs' headers and index
        broker = Broker(w.engine, api_versions=dict(SUPPORTED))
        # From offset 1000 (1 MB in): past the stream's first runs, small runs of 4 to 256
        # KiB whose headers the open mapped, and their records with them (format.md, "Small
        # runs"); these records lie in a block run's pages, which DONTNEED drops.
        at = w.engine.locate("t", 0, offset=1000)
        # DONTNEED is advice: a page still in another CPU's LRU batch or under writeback
        # is skipped (seen once in a full run beside a 9 GB write). Asked again a few times.
        for _ in range(20):
            if not w.engine.resident("t", 0, at, 1 << 20):
                break
            time.sleep(0.1)
            drop_page_cache(data)
        else:
            raise AssertionError("the segment's pages stayed in the page cache after DONTNEED")
        assert not _readable_inline(broker, request("t", [0], 1000))
        c = rdkafka_consumer(lst.bootstrap, "g")
        try:
            c.subscribe(["t"])
            got = [m.value() for m in consume(c, len(values), timeout=120)]  # bounded, not a speed check
        finally:
            c.close()
        assert got == values
        # Read once, the records are in the page cache: the next fetch stays on the loop.
        assert _readable_inline(broker, request("t", [0], 1000))
