"""Trim raises the low watermark durably; reclamation deletes whole segment files once all
their blocks are sealed and trimmed, also for files written before a restart; offsets never
change."""

import os

import pytest
from conftest import payload

import walfs


def segs(d: str) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.startswith("seg-"))


def fill(w: walfs.Wal, topic: str, n: int, start: int = 0) -> None:
    for k in range(start, start + n, 100):
        w.append_batch(topic, [payload(topic, k + j, 500) for j in range(min(100, start + n - k))])


def test_trim_raises_low_watermark_durably(open_wal):
    w = open_wal()
    fill(w, "t", 1000)
    w.trim("t", 400)
    assert (w.low_watermark("t"), w.high_watermark("t")) == (400, 1000)
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.read("t", 399)
    assert w.read("t", 400, max_records=1) == [payload("t", 400, 500)]
    w.trim("t", 100)  # never lowers
    assert w.low_watermark("t") == 400
    w.close()
    w = open_wal()
    assert (w.low_watermark("t"), w.high_watermark("t")) == (400, 1000)
    assert w.read("t", 400, max_records=1) == [payload("t", 400, 500)]
    assert w.stream_info("t").low_byte > 0
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.read_bytes("t", 0, 10)


def test_reclaim_deletes_only_fully_trimmed_segments(open_wal, wal_dir):
    w = open_wal()
    fill(w, "old", 6000)  # ~3 MiB: several 1 MiB segments
    fill(w, "keep", 50)
    before = segs(wal_dir)
    assert len(before) >= 3
    assert w.reclaim() == 0  # nothing trimmed yet
    w.trim("old", 6000)
    w.sync()  # seals are written after the data they cover is durable
    deleted = w.reclaim()
    assert deleted >= 2
    after = segs(wal_dir)
    assert len(after) == len(before) - deleted
    assert w.read("keep", 0, max_records=100) == [payload("keep", k, 500) for k in range(50)]
    assert (w.low_watermark("old"), w.high_watermark("old")) == (6000, 6000)
    assert w.append("old", b"more") == 6000  # offsets continue, never reused


def test_reclaim_works_for_files_from_before_a_restart(open_wal, wal_dir):
    w = open_wal()
    fill(w, "t", 6000)
    w.close()
    w = open_wal()
    fill(w, "t", 200, start=6000)
    w.trim("t", 5000)
    w.sync()
    assert w.reclaim() >= 2
    w.close()
    w = open_wal()
    assert (w.low_watermark("t"), w.high_watermark("t")) == (5000, 6200)
    assert w.read("t", 5000, max_records=1) == [payload("t", 5000, 500)]
    assert w.read("t", 6199, max_records=1) == [payload("t", 6199, 500)]
    assert w.verify() == []


def test_fully_reclaimed_stream_keeps_its_offsets_across_restart(open_wal, wal_dir):
    w = open_wal()
    fill(w, "gone", 4000)
    fill(w, "other", 4000)
    w.trim("gone", 4000)
    w.trim("other", 4000)
    w.sync()
    assert w.reclaim() >= 1
    w.close()
    w = open_wal()
    assert (w.low_watermark("gone"), w.high_watermark("gone")) == (4000, 4000)
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
