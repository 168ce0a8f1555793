"""A large append hands its pages to the core's writeback thread (csrc/writer.c
WRITEBACK_MIN, csrc/writeback.c), under every fsync policy: once that thread has taken
them (debug.writeback_wait), they are on their way to the disk, not left dirty for the
sync that makes them durable. That changes when the disk gets the bytes, never what is
promised: nothing is durable before a sync, and what a power cut leaves is read back
whole or not at all, as before. Runs filled by small appends: test_wal_run_writeback.py.

The page cache's state is read with cachestat(2) (Linux 6.5), the kernel's own count of
a file range's dirty and under-writeback pages (tests/writeback_probe.py)."""

from __future__ import annotations

import pytest
from writeback_probe import VALUE, batch, check_recovered_prefix, dirty_pages, segment_files, values

import walfs
from walfs.local import debug

GEOMETRY = {"segment_size": 32 << 20, "block_size": 16 << 20}
BIG = 8 << 20  # one append, past WRITEBACK_MIN (4 MiB)
SMALL_APPEND = 64 << 10  # one append, under it
NO_SYNC = 3_600_000  # an interval no test waits for: no background sync runs meanwhile


def test_a_large_append_has_its_pages_written_back_and_a_small_one_does_not(wal_dir):
    w = walfs.Wal(wal_dir, fsync="interval", fsync_interval_ms=NO_SYNC, **GEOMETRY)
    try:
        e = w.engine
        # Past the stream's small runs (4 KiB to 4 MiB, 5.3 MiB in all with 16 MiB blocks),
        # so that what follows lands in a block run.
        first = values(0, 6 << 20)
        e.append("t", 0, *batch(first))
        w.sync()
        seg = segment_files(wal_dir)[-1]  # the newest: the stream's block run is there
        # (a sync may leave a page it writes after its fsync: the end marks)
        assert dirty_pages(seg)[1] <= 2
        # Under WRITEBACK_MIN: left dirty for the sync (16 pages).
        at = len(first)
        e.append("t", 0, *batch(values(at, SMALL_APPEND)))
        debug.writeback_wait(w)
        assert dirty_pages(seg)[1] >= SMALL_APPEND // 4096
        w.sync()
        assert dirty_pages(seg)[1] <= 2
        # Past it: the append's ~2,100 pages are written back or under writeback once the
        # writeback thread took them; what may stay dirty is a page or two at the run's
        # edges (the page of records and the page of slots still being filled).
        at += SMALL_APPEND // VALUE
        e.append("t", 0, *batch(values(at, BIG)))
        debug.writeback_wait(w)
        cached, dirty = dirty_pages(seg)
        assert cached >= BIG // 4096
        assert dirty <= 4, f"{dirty} pages still dirty after an 8 MiB append"
        assert w.read("t", at, max_records=2) == values(at, 2 * VALUE)
    finally:
        w.close()


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_every_policy_writes_a_large_append_back(wal_dir, fsync):
    """fsync="never" too (a consumer's first read syncs the backlog: issue 20), and
    "always" (its own fsync follows, the thread's writeback then finds little)."""
    w = walfs.Wal(wal_dir, fsync=fsync, **GEOMETRY)
    try:
        e = w.engine
        e.append("t", 0, *batch(values(0, VALUE)))
        w.sync()
        [seg] = segment_files(wal_dir)
        e.append("t", 0, *batch(values(1, BIG)))
        st = debug.writeback_wait(w)
        assert st["queued"] >= 1 and st["failed"] == 0
        assert dirty_pages(seg)[1] <= 4
        assert e.info("t").durable_watermark == (1 + BIG // VALUE if fsync == "always" else 1)
    finally:
        w.close()


@pytest.mark.parametrize("keep_permille", [0, 500, 1000])
def test_written_back_but_unsynced_records_are_not_durable_and_a_power_cut_keeps_whole_records(
    wal_dir, keep_permille
):
    """A power cut after a large append (writeback started, no sync): every record synced
    before it survives; of the unsynced append, what recovery brings back is a prefix of
    whole records (none when no page of it survived), never a damaged one."""
    w = walfs.Wal(wal_dir, fsync="interval", fsync_interval_ms=NO_SYNC, test_mode=True, **GEOMETRY)
    e = w.engine
    synced = values(0, 2 * VALUE)
    e.append("t", 0, *batch(synced))
    w.sync()
    unsynced = values(len(synced), BIG)
    assert e.append("t", 0, *batch(unsynced)) == len(synced)
    debug.writeback_wait(w)
    assert e.info("t").durable_watermark == len(synced)  # written back, not durable
    debug.power_cut(w, seed=7, keep_permille=keep_permille)
    check_recovered_prefix(wal_dir, GEOMETRY, synced, unsynced, keep_permille)
