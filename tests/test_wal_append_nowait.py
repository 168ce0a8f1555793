"""LogEngine.append_nowait on the local engine (C walfs_append_nowait): it appends only
what it can without waiting on the disk, and refuses the rest with nothing appended, so a
caller on an event loop (the Kafka listener's produce) can append in place and fall back
to a worker thread. What it refuses: a stream that does not exist (creating one syncs the
catalog) and a batch that needs a new segment (created and fsynced under the WAL's lock)."""

from __future__ import annotations

import array

import pytest
from conftest import SMALL, payload

import walfs
from walfs.local import debug

SEGMENT = SMALL["segment_size"]


def batch(values: list[bytes]) -> tuple[bytes, array.array, array.array]:
    return b"".join(values), array.array("I", bytes(4 * len(values))), array.array("I", map(len, values))


def test_a_missing_stream_is_refused_and_not_created(open_wal):
    w = open_wal(fsync="never")
    e = w.engine
    assert e.append_nowait("t", 0, *batch([b"a"])) is None
    assert e.streams() == []
    with pytest.raises(ValueError):  # lengths are checked as append checks them
        e.append_nowait("t", 0, b"xy", array.array("I", [0]), array.array("I", [1]))


@pytest.mark.parametrize("fsync", ["never", "interval", "always"])
def test_appends_in_an_existing_segment_are_published_at_once_and_durable_after_sync(open_wal, fsync):
    w = open_wal(fsync=fsync, fsync_interval_ms=3_600_000)
    e = w.engine
    e.create("t")
    # A stream without records has no run yet and the WAL no segment: the first batch
    # would create one, so it is refused, with nothing appended.
    assert e.append_nowait("t", 0, *batch([b"first"])) is None
    assert e.info("t").high_watermark == 0
    assert e.append("t", 0, *batch([b"a", b"b"])) == 0
    w.sync()
    assert e.append_nowait("t", 0, *batch([b"c", b"d", b"e"])) == 2
    # Published at once, not waited for, whatever the policy: durable once a sync runs.
    assert e.info("t").high_watermark == 5
    assert e.info("t").durable_watermark == 2
    assert w.read("t", 0, max_records=10) == [b"a", b"b", b"c", b"d", b"e"]
    w.sync()
    assert e.info("t").durable_watermark == 5


def test_a_batch_that_needs_a_new_segment_is_refused_whole(open_wal):
    w = open_wal(fsync="never", reclaim_interval_s=3600)
    e = w.engine
    e.append("t", 0, *batch([payload("t", 0, 1000)]))
    n = 1
    # Fill the one segment with batches of 20 KiB until one does not fit.
    while True:
        values = [payload("t", n + j, 1000) for j in range(20)]
        got = e.append_nowait("t", 0, *batch(values))
        if got is None:
            break
        assert got == n
        n += 20
        assert n * 1000 < 2 * SEGMENT, "the segment never filled"
    assert n * 1000 > SEGMENT // 2  # refused at the segment's end, not before
    assert e.info("t").high_watermark == n  # the refused batch left nothing
    assert w.read("t", 0, max_records=n + 100) == [payload("t", k, 1000) for k in range(n)]
    # The plain append creates the next segment; after it, in place again.
    e.append("t", 0, *batch(values))
    assert e.append_nowait("t", 0, *batch([b"after"])) == n + 20
    assert w.read("t", n, max_records=100) == [*values, b"after"]


def test_records_appended_without_waiting_survive_a_power_cut_once_synced(wal_dir):
    w = walfs.Wal(wal_dir, fsync="never", test_mode=True, **SMALL)
    e = w.engine
    e.append("t", 0, *batch([b"a"]))
    assert e.append_nowait("t", 0, *batch([b"b", b"c"])) == 1
    w.sync()  # what the listener does before it answers acks=all under interval/always
    assert e.append_nowait("t", 0, *batch([b"lost"])) == 3
    debug.power_cut(w, seed=3, keep_permille=0)
    w = walfs.Wal(wal_dir, fsync="never", **SMALL)
    try:
        assert w.info("t").high_watermark == 3
        assert w.read("t", 0, max_records=10) == [b"a", b"b", b"c"]
    finally:
        w.close()
