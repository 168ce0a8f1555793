"""Runs filled by small appends are written back off the appending thread (issue 20).

A run that fills up, and every WRITEBACK_MIN (4 MiB) of records in a run, is handed to the
core's writeback thread (csrc/writer.c writeback_run, csrc/writeback.c), under every fsync
policy, `never` included: a consumer's first read under `never` syncs the whole backlog
(engine_api.durable_end), and that sync now finds the filled runs on the disk already.
The appending thread only queues the range; the thread calls sync_file_range(WRITE).

What is checked, on the page cache's own counts (cachestat(2), as in
tests/writeback_probe.py) and never on times:
- filled runs are not left dirty after small appends (mapped one-record appends, batches,
  `append_nowait` as the Kafka listener's in-place appends use), with and without io_uring;
- the promise does not move: nothing is durable before a sync, and a power cut keeps the
  synced records and a whole-record prefix of the rest;
- a failed writeback is never dropped: the next sync (a consumer's read, `sync()`,
  `close()`) fails with it and the WAL refuses appends until reopened;
- close and reclamation with writeback queued or in flight: no range outlives its file
  (a writeback on a closed fd would log its failure).
"""

from __future__ import annotations

import errno
import logging

import pytest
from writeback_probe import VALUE, batch, check_recovered_prefix, dirty_pages, segment_files, values

import walfs
from walfs.engine.rules import durable_end
from walfs.local import debug

RUN = 1 << 20  # block size: a run fills every ~1 MiB of 1 KiB records
GEOMETRY = {"segment_size": 32 << 20, "block_size": RUN}
RUN_PAGES = RUN // 4096


def fill_runs(e, topic: str, first: int, nbytes: int, per_call: int) -> int:
    """Appends nbytes of VALUE-byte records, per_call records an append; returns the count."""
    vs = values(first, nbytes)
    for i in range(0, len(vs), per_call):
        e.append(topic, 0, *batch(vs[i : i + per_call]))
    return len(vs)


def one_segment(wal_dir: str):
    [seg] = segment_files(wal_dir)
    return seg


@pytest.mark.parametrize("per_call", [1, 16])
def test_runs_filled_by_small_appends_are_not_left_dirty_under_fsync_never(wal_dir, per_call):
    """One record a call (the writable mapping) and 16 a call (pwritev): 6 MiB fill five
    1 MiB runs of each of two streams; once the writeback thread took them, what stays
    dirty is at most the two runs still being filled. On main all ~3,200 pages stay
    dirty until a sync."""
    w = walfs.Wal(wal_dir, fsync="never", **GEOMETRY)
    try:
        e = w.engine
        for t in ("a", "b"):
            e.append(t, 0, *batch(values(0, VALUE)))
        w.sync()
        seg = one_segment(wal_dir)
        n = {}
        for t in ("a", "b"):
            n[t] = 1 + fill_runs(e, t, 1, 6 << 20, per_call)
        st = debug.writeback_wait(w)
        assert st["failed"] == 0 and st["queued"] >= 2 * 5
        cached, dirty = dirty_pages(seg)
        assert cached >= 2 * (6 << 20) // 4096
        assert dirty <= 2 * RUN_PAGES + 4, f"{dirty} pages dirty, more than the two runs being filled"
        # Nothing became durable: the consumer's first read still syncs, then reads all.
        assert e.info("a").durable_watermark == 1
        assert durable_end(e, "a", 0, 1) == n["a"]
        assert w.read("b", n["b"] - 3, max_records=3) == values(n["b"] - 3, 3 * VALUE)
    finally:
        w.close()


def test_append_nowait_hands_filled_runs_over_too(wal_dir):
    """The Kafka listener appends in place with append_nowait (no waiting on any lock):
    its filled runs are written back as well."""
    w = walfs.Wal(wal_dir, fsync="never", **GEOMETRY)
    try:
        e = w.engine
        e.append("t", 0, *batch(values(0, VALUE)))
        w.sync()
        seg = one_segment(wal_dir)
        vs = values(1, 6 << 20)
        refused = 0
        for i in range(0, len(vs), 16):
            if e.append_nowait("t", 0, *batch(vs[i : i + 16])) is None:
                refused += 1
                e.append("t", 0, *batch(vs[i : i + 16]))  # as the listener falls back
        assert refused < len(vs) // 16  # most went in place
        st = debug.writeback_wait(w)
        assert st["failed"] == 0 and st["queued"] >= 5
        assert dirty_pages(seg)[1] <= RUN_PAGES + 4
    finally:
        w.close()


def test_without_io_uring_filled_runs_are_written_back_too(wal_dir):
    """The writeback thread does not need the ring (no_io_uring: containers whose seccomp
    profile refuses io_uring)."""
    w = walfs.Wal(wal_dir, fsync="never", io_uring=False, **GEOMETRY)
    try:
        e = w.engine
        e.append("t", 0, *batch(values(0, VALUE)))
        w.sync()
        seg = one_segment(wal_dir)
        n = 1 + fill_runs(e, "t", 1, 6 << 20, 16)
        assert debug.writeback_wait(w)["failed"] == 0
        assert dirty_pages(seg)[1] <= RUN_PAGES + 4
        w.sync()
        assert e.info("t").durable_watermark == n
    finally:
        w.close()


@pytest.mark.parametrize("fsync", ["never", "interval"])
@pytest.mark.parametrize("keep_permille", [0, 500, 1000])
def test_written_back_runs_are_not_durable_and_a_power_cut_keeps_exactly_the_promise(
    wal_dir, fsync, keep_permille
):
    """Filled runs on their way to the disk, no sync after them, then a power cut (test
    mode puts back any page written since its file's last sync, but the kept ones): every
    synced record survives; of the rest, recovery keeps a prefix of whole records, none
    when no page survived; no damage is reported."""
    w = walfs.Wal(wal_dir, fsync=fsync, fsync_interval_ms=3_600_000, test_mode=True, **GEOMETRY)
    e = w.engine
    synced = values(0, 2 * VALUE)
    e.append("t", 0, *batch(synced))
    w.sync()
    n = fill_runs(e, "t", len(synced), 5 << 20, 16)
    unsynced = values(len(synced), n * VALUE)
    st = debug.writeback_wait(w)
    assert st["failed"] == 0 and st["queued"] >= 4
    assert e.info("t").durable_watermark == len(synced)  # written back, not durable
    debug.power_cut(w, seed=11, keep_permille=keep_permille)
    check_recovered_prefix(wal_dir, GEOMETRY, synced, unsynced, keep_permille)


def test_a_failed_writeback_fails_the_consumers_sync_and_the_wal_until_reopened(wal_dir, caplog):
    """EIO from the writeback (injected where sync_file_range runs): logged, and the next
    sync round fails with it even though its fdatasync succeeded; so a consumer's first
    read under `never` (durable_end) raises instead of handing out records, nothing more
    becomes durable, appends are refused; reopened, every synced record is there."""
    caplog.set_level(logging.WARNING, logger="walfs.core")
    w = walfs.Wal(wal_dir, fsync="never", **GEOMETRY)
    e = w.engine
    synced = values(0, 2 * VALUE)
    e.append("t", 0, *batch(synced))
    w.sync()
    debug.inject_fault(w, "writeback", errno.EIO, count=1)
    n = fill_runs(e, "t", len(synced), 3 << 20, 16)
    st = debug.writeback_wait(w)
    assert st["failed"] == 1 and st["queued"] >= 2
    assert "writeback of segment" in caplog.text and "failed" in caplog.text
    assert not w.engine.failed  # the writeback promised nothing; the sync reports it
    with pytest.raises(walfs.WalFailedError):
        durable_end(e, "t", 0, len(synced))
    assert w.engine.failed
    assert e.info("t").durable_watermark == len(synced)
    with pytest.raises(walfs.WalFailedError):
        e.append("t", 0, *batch(values(0, VALUE)))
    with pytest.raises(walfs.WalError):
        w.close()
    w = walfs.Wal(wal_dir, fsync="never", **GEOMETRY)
    try:
        end = w.info("t").high_watermark
        assert len(synced) <= end <= len(synced) + n
        got = w.read("t", 0, max_records=end + 1, max_bytes=64 << 20)
        assert got == (synced + values(len(synced), n * VALUE))[:end]
    finally:
        w.close()


def test_a_failed_writeback_that_no_sync_saw_fails_the_close(wal_dir):
    """Under `never` nothing may sync before close: close's own sync reports it."""
    w = walfs.Wal(wal_dir, fsync="never", **GEOMETRY)
    e = w.engine
    e.append("t", 0, *batch(values(0, VALUE)))
    w.sync()
    debug.inject_fault(w, "writeback", errno.EIO, count=1)
    fill_runs(e, "t", 1, 2 << 20, 16)
    assert debug.writeback_wait(w)["failed"] == 1
    with pytest.raises(walfs.WalError) as info:
        w.close()
    assert getattr(info.value, "errno", errno.EIO) == errno.EIO
    assert w.closed


SMALL_RUNS = {"segment_size": 1 << 20, "block_size": 64 << 10}


@pytest.mark.parametrize("round_", range(3))
def test_close_with_writeback_queued_drains_it_before_the_files_close(wal_dir, caplog, round_):
    """~50 filled 64 KiB runs handed over, then close at once: the queued ranges are
    dropped (close's fsync covers them) and the one in flight ends before any fd closes;
    a writeback on a closed or reused fd would fail and log."""
    caplog.set_level(logging.WARNING, logger="walfs.core")
    w = walfs.Wal(wal_dir, fsync="never", **SMALL_RUNS)
    n = fill_runs(w.engine, "t", 0, 3 << 20, 16)
    w.close()
    assert "writeback" not in caplog.text
    w = walfs.Wal(wal_dir, fsync="never", **SMALL_RUNS)
    try:
        assert w.info("t").high_watermark == n
        assert w.read("t", n - 2, max_records=2) == values(n - 2, 2 * VALUE)
    finally:
        w.close()


def test_reclaim_of_segments_with_writeback_queued_forgets_it_first(wal_dir, caplog):
    """Segments whose runs are still queued for writeback are trimmed and reclaimed at
    once: reclamation drops their queued ranges and waits for the one in flight before it
    closes and unlinks them; nothing fails, the WAL goes on."""
    caplog.set_level(logging.WARNING, logger="walfs.core")
    w = walfs.Wal(wal_dir, fsync="never", reclaim_interval_s=3600, **SMALL_RUNS)
    try:
        e = w.engine
        n = fill_runs(e, "t", 0, 4 << 20, 16)
        w.sync()
        w.trim("t", n)
        assert w.engine.reclaim() >= 3
        more = fill_runs(e, "t", n, 1 << 20, 16)
        st = debug.writeback_wait(w)
        assert st["failed"] == 0 and st["queued"] >= 1
        assert "writeback" not in caplog.text
        assert w.read("t", n, max_records=2) == values(n, 2 * VALUE)
        assert w.info("t").high_watermark == n + more
    finally:
        w.close()
