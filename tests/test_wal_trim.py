"""Trim raises the low watermark durably; reclamation deletes whole segment files once all
their blocks are sealed and trimmed, also for files written before a restart; offsets never
change."""

import os

import pytest
from conftest import payload

import walfs
from walfs.local import debug


@pytest.fixture
def open_wal(open_wal):
    """The shared opener with no background reclamation pass (its default runs every 10 s):
    these tests count what their own reclaim() does, and on a slow machine the background
    pass took the segments first (reclaim() then returned 0)."""

    def opener(**kw: object) -> walfs.Wal:
        kw.setdefault("reclaim_interval_s", 3600)
        return open_wal(**kw)

    return opener


def segs(d: str) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.startswith("seg-"))


def fill(w: walfs.Wal, topic: str, n: int, start: int = 0) -> None:
    for k in range(start, start + n, 100):
        w.append(topic, [payload(topic, k + j, 500) for j in range(min(100, start + n - k))])


def test_trim_raises_low_watermark_durably(open_wal):
    w = open_wal()
    fill(w, "t", 1000)
    w.trim("t", 400)
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (400, 1000)
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.read("t", 399)
    assert w.read("t", 400, max_records=1) == [payload("t", 400, 500)]
    w.trim("t", 100)  # never lowers
    assert w.info("t").low_watermark == 400
    w.close()
    w = open_wal()
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (400, 1000)
    assert w.read("t", 400, max_records=1) == [payload("t", 400, 500)]
    assert w.info("t").low_byte > 0
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.read_bytes("t", 0, 10)


def test_reclaim_deletes_only_fully_trimmed_segments(open_wal, wal_dir):
    w = open_wal()
    fill(w, "old", 6000)  # ~3 MiB: several 1 MiB segments
    fill(w, "keep", 50)
    before = segs(wal_dir)
    assert len(before) >= 3
    assert w.engine.reclaim() == 0  # nothing trimmed yet
    w.trim("old", 6000)
    w.sync()  # seals are written after the data they cover is durable
    deleted = w.engine.reclaim()
    assert deleted >= 2
    after = segs(wal_dir)
    assert len(after) == len(before) - deleted
    assert w.read("keep", 0, max_records=100) == [payload("keep", k, 500) for k in range(50)]
    assert (w.info("old").low_watermark, w.info("old").high_watermark) == (6000, 6000)
    assert w.append("old", b"more") == 6000  # offsets continue, never reused


def test_reclaim_works_for_files_from_before_a_restart(open_wal, wal_dir):
    w = open_wal()
    fill(w, "t", 6000)
    w.close()
    w = open_wal()
    fill(w, "t", 200, start=6000)
    w.trim("t", 5000)
    w.sync()
    assert w.engine.reclaim() >= 2
    w.close()
    w = open_wal()
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (5000, 6200)
    assert w.read("t", 5000, max_records=1) == [payload("t", 5000, 500)]
    assert w.read("t", 6199, max_records=1) == [payload("t", 6199, 500)]
    assert w.engine.verify() == []


def test_fully_reclaimed_stream_keeps_its_offsets_across_restart(open_wal, wal_dir):
    w = open_wal()
    fill(w, "gone", 4000)
    fill(w, "other", 4000)
    w.trim("gone", 4000)
    w.trim("other", 4000)
    w.sync()
    assert w.engine.reclaim() >= 1
    w.close()
    w = open_wal()
    assert (w.info("gone").low_watermark, w.info("gone").high_watermark) == (4000, 4000)
    assert w.append("gone", b"after") == 4000
    w.close()
    w = open_wal()
    assert w.read("gone", 4000) == [b"after"]


def test_background_reclaim(open_wal, wal_dir):
    import time

    w = open_wal(reclaim_interval_s=0.05)
    fill(w, "t", 6000)
    n = len(segs(wal_dir))
    w.trim("t", 6000)
    w.sync()
    deadline = time.monotonic() + 10
    while len(segs(wal_dir)) == n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(segs(wal_dir)) < n


def cat_size(d: str) -> int:
    return os.path.getsize(os.path.join(d, "streams.cat"))


def test_catalog_is_compacted_while_trimming_and_keeps_every_fact(open_wal, wal_dir):
    # Every trim appends a catalog entry; a WAL that trims after each batch would grow its
    # catalog without end. Compaction rewrites it once most entries are dead.
    w = open_wal()
    fill(w, "gone", 4000)
    fill(w, "other", 4000)
    for t in ("a", "b", "c"):
        w.append(t, b"x")
    w.trim("gone", 4000)
    w.sync()
    assert w.engine.reclaim() >= 1  # a FLOOR entry: "gone" has no run left
    sizes = []
    for k in range(1, 3001):
        w.trim("other", k)
        sizes.append(cat_size(wal_dir))
    assert max(sizes) < 1300 * 28  # bounded: ~24-byte TRIM entries, compacted past 1024
    assert sizes[-1] < sizes[1000] or min(sizes[1000:]) < 2000
    assert (w.info("other").low_watermark, w.info("other").high_watermark) == (3000, 4000)
    w.close()
    w = open_wal()
    assert (w.info("gone").low_watermark, w.info("gone").high_watermark) == (4000, 4000)
    assert (w.info("other").low_watermark, w.info("other").high_watermark) == (3000, 4000)
    assert sorted(w.topics()) == ["a", "b", "c", "gone", "other"]
    assert w.read("other", 3000, max_records=1) == [payload("other", 3000, 500)]
    assert w.append("gone", b"after") == 4000  # the floor survived compaction
    assert w.engine.verify() == []


def test_compacted_catalog_serves_readers_and_a_stale_temporary_is_ignored(open_wal, wal_dir):
    w = open_wal()
    fill(w, "t", 6000)
    reader = walfs.Wal(wal_dir, read_only=True)  # opened before the compactions below
    try:
        for k in range(1, 5001):
            w.trim("t", k)  # several compactions replace the catalog file
        w.sync()
        assert w.engine.reclaim() >= 1
        late = walfs.Wal(wal_dir, read_only=True)  # reads the replaced catalog
        try:
            assert late.info("t").low_watermark == 5000
            assert late.read("t", 5000, max_records=1) == [payload("t", 5000, 500)]
        finally:
            late.close()
        # The earlier reader keeps its snapshot: its mapped segments stay readable.
        assert (reader.info("t").low_watermark, reader.info("t").high_watermark) == (0, 6000)
        assert reader.read("t", 0, max_records=1) == [payload("t", 0, 500)]
    finally:
        reader.close()
    w.close()
    with open(os.path.join(wal_dir, "streams.cat.tmp"), "wb") as f:
        f.write(b"left by a crash in the middle of a compaction")
    w = open_wal()
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (5000, 6000)
    assert w.read("t", 5999, max_records=1) == [payload("t", 5999, 500)]


def test_read_only_open_survives_a_compaction_during_its_segment_scan(open_wal, wal_dir, monkeypatch):
    # A read-only open reads the catalog, scans the segments, then re-reads the catalog
    # for trims written meanwhile (their segments may be gone from the scan). A writer
    # that compacts in that window replaces the file, and trims after the compaction
    # exist only in the new one: the reader must notice, or it misses a trim whose
    # segments are gone and takes the hole for damage. test_mode compacts every 16
    # entries; WALFS_TEST_SCAN_DELAY_MS holds the reader between catalog read and scan.
    import threading

    w = open_wal(test_mode=True)
    fill(w, "t", 6000)  # several 1 MiB segments
    w.sync()
    monkeypatch.setenv("WALFS_TEST_SCAN_DELAY_MS", "1500")
    opened: list[walfs.Wal] = []
    failure: list[BaseException] = []

    def open_reader() -> None:
        try:
            opened.append(walfs.Wal(wal_dir, read_only=True, test_mode=True))
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=open_reader)
    t.start()
    import time

    time.sleep(0.1)  # the reader has read the catalog and waits before its scan (1.5 s: room
    # for 40 synced trims on a busy machine)
    for k in range(1, 41):
        w.trim("t", 100 * k)  # 40 TRIMs: two compactions, the last trims in the new file
    w.sync()
    assert w.engine.reclaim() >= 1
    t.join()
    assert not failure, failure
    r = opened[0]
    try:
        assert r.info("t").low_watermark == 4000
        assert r.read("t", 4000, max_records=1) == [payload("t", 4000, 500)]
    finally:
        r.close()


def test_failed_compaction_keeps_the_old_catalog_and_the_trim(open_wal, wal_dir):
    import errno

    w = open_wal(test_mode=True)  # compacts at 20 entries (4 x live: OPEN, DEFINE, SEGMENT and 17 TRIMs)
    fill(w, "t", 100)
    for k in range(1, 17):
        w.trim("t", k)
    grown = cat_size(wal_dir)
    debug.inject_fault(w, "write", errno.ENOSPC, after=1, count=1)  # the TRIM passes, the rewrite fails
    w.trim("t", 17)
    assert w.info("t").low_watermark == 17
    assert cat_size(wal_dir) > grown  # the old catalog, one entry longer
    assert not os.path.exists(os.path.join(wal_dir, "streams.cat.tmp"))
    w.trim("t", 18)  # the next trim compacts
    assert cat_size(wal_dir) < grown
    w.close()
    w = open_wal()
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (18, 100)


def test_writer_open_compacts_a_long_catalog(open_wal, wal_dir):
    w = open_wal()
    fill(w, "t", 1000)
    for k in range(1, 501):
        w.trim("t", k)  # 500 TRIMs: under the 1,024 entries that trigger compaction
    w.close()
    long = cat_size(wal_dir)
    w = open_wal(test_mode=True)  # test_mode compacts from 16 entries: at this open
    assert cat_size(wal_dir) < long // 10
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (500, 1000)
    w.close()
    w = open_wal()
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (500, 1000)
    assert w.read("t", 500, max_records=1) == [payload("t", 500, 500)]


def test_a_stream_trimmed_to_its_end_pins_no_segment(open_wal, wal_dir):
    # Issue 10: a stream's last run used to stay unsealed until full, so a topic trimmed
    # to its end (or idle after a trim) kept its segment file forever.
    w = open_wal(reclaim_interval_s=3600)
    w.append("a", [payload("a", i, 200) for i in range(20)])  # a small run in segment 1
    fill(w, "b", 5000)  # several segments
    assert len(segs(wal_dir)) >= 3
    w.trim("a", 20)
    w.trim("b", 5000)
    w.engine.reclaim()
    assert len(segs(wal_dir)) == 1  # only the segment being filled
    # Both streams go on from their offsets, before and after a restart.
    assert w.append("a", b"next a") == 20
    assert w.append("b", b"next b") == 5000
    w.close()
    w = open_wal(reclaim_interval_s=3600)
    assert (w.info("a").low_watermark, w.info("a").high_watermark) == (20, 21)
    assert w.read("a", 20) == [b"next a"]
    assert w.read("b", 5000) == [b"next b"]
    fill(w, "c", 3000)  # new data reuses space and is reclaimed like any other
    w.trim("c", 3000)
    w.trim("a", 21)
    w.trim("b", 5001)
    w.engine.reclaim()
    assert len(segs(wal_dir)) == 1


def test_an_appender_racing_reclamation_keeps_its_records(open_wal, wal_dir):
    import threading

    w = open_wal(reclaim_interval_s=3600)
    w.append("a", b"first")
    fill(w, "b", 3000)
    stop = threading.Event()
    written: list[int] = []

    def appender() -> None:
        while not stop.is_set():
            off = w.append("a", b"x%d" % len(written))
            written.append(off)
            w.trim("a", off)  # keep "a" trimmed to just below its last record

    t = threading.Thread(target=appender)
    t.start()
    try:
        for _ in range(50):
            w.trim("b", w.info("b").high_watermark)
            w.engine.reclaim()
    finally:
        stop.set()
        t.join()
    last = written[-1]
    assert w.read("a", last) == [b"x%d" % (len(written) - 1)]
    w.close()
    w = open_wal()
    assert w.read("a", last) == [b"x%d" % (len(written) - 1)]
