"""Durable watermarks (issue 9, findings 1 and 6): nothing that is not durable is recorded
by reclamation or a trim, handed to a consumer, or committed by one."""

import logging
import threading

import pytest
from conftest import payload, stream_key

import walfs
from walfs.local import debug


def fill(w: walfs.Wal, topic: str, n: int, start: int = 0, size: int = 500) -> None:
    for k in range(start, start + n, 100):
        w.append(topic, [payload(topic, k + j, size) for j in range(min(100, start + n - k))])


def test_reclaim_after_unsynced_appends_survives_a_power_cut(open_wal):
    # Finding 1: append, sync, trim, append more without sync, reclaim, power cut.
    w = open_wal(fsync="never", test_mode=True, reclaim_interval_s=3600)
    fill(w, "a", 2000)
    w.sync()
    w.trim("a", 2000)
    fill(w, "a", 10, start=2000)  # not durable
    assert w.engine.reclaim() >= 1
    debug.power_cut(w, seed=1, keep_permille=0)

    w = open_wal(fsync="always", test_mode=True, reclaim_interval_s=3600)
    assert w.info("a").low_watermark == 2000
    assert w.info("a").high_watermark == 2000  # the 10 unsynced records are gone, nothing else
    off = w.append("a", b"after the cut")  # acknowledged, fsynced
    assert off == 2000
    assert w.read("a", off, max_records=1) == [b"after the cut"]
    w.close()
    w = open_wal(fsync="always", test_mode=True, reclaim_interval_s=3600)
    assert w.info("a").high_watermark == 2001
    assert w.read("a", 2000, max_records=1) == [b"after the cut"]


def test_trim_past_the_durable_mark_makes_it_durable_first(open_wal):
    w = open_wal(fsync="never", test_mode=True, reclaim_interval_s=3600)
    fill(w, "a", 300)
    w.sync()
    fill(w, "a", 50, start=300)
    assert w.info("a").durable_watermark == 300
    w.trim("a", 340)  # beyond what is durable: the records it keeps must be durable
    assert w.info("a").durable_watermark == 350
    debug.power_cut(w, seed=2, keep_permille=0)
    w = open_wal(fsync="never", test_mode=True)
    assert (w.info("a").low_watermark, w.info("a").high_watermark) == (340, 350)
    assert w.read("a", 340, max_records=100) == [payload("a", k, 500) for k in range(340, 350)]


@pytest.mark.parametrize("fsync", ["never", "interval", "always"])
def test_durable_watermark_follows_syncs(open_wal, fsync):
    w = open_wal(fsync=fsync, fsync_interval_ms=60_000)
    assert w.info("t").durable_watermark == 0
    w.append("t", [b"x"] * 5)
    assert w.info("t").high_watermark == 5
    if fsync == "always":
        assert w.info("t").durable_watermark == 5
    else:
        assert w.info("t").durable_watermark == 0
    w.sync()
    assert w.info("t").durable_watermark == 5
    w.close()
    w = open_wal(fsync=fsync)
    assert w.info("t").durable_watermark == 5


def test_consumer_is_handed_only_durable_records(open_wal):
    w = open_wal(fsync="never", fsync_interval_ms=60_000)
    w.append("t", [b"a", b"b", b"c"])
    w.sync()
    w.append("t", [b"d", b"e"])
    assert w.info("t").durable_watermark == 3
    c = w.consumer("g", "t")
    assert [r.value for r in c.read_next()] == [b"a", b"b", b"c"]  # durable: no sync needed
    assert w.info("t").durable_watermark == 3
    assert [r.value for r in c.read_next()] == [b"d", b"e"]  # made durable before handed out
    assert w.info("t").durable_watermark == 5
    assert c.read_next() == []


def test_commit_past_the_durable_mark_waits_for_a_sync_and_past_the_end_is_refused(open_wal):
    w = open_wal(fsync="never", fsync_interval_ms=60_000)
    w.append("t", [b"r"] * 10)
    assert w.info("t").durable_watermark == 0
    w.commit("g", "t", 7)  # within what was appended: made durable, then committed
    assert w.info("t").durable_watermark == 10
    assert w.committed("g", "t") == 7
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.commit("g", "t", 11)
    assert w.committed("g", "t") == 7


def test_cursor_past_the_end_after_a_power_cut_is_clamped_and_logged(open_wal, caplog):
    w = open_wal(fsync="never", test_mode=True)
    w.append("t", [b"r"] * 10)
    w.sync()
    w.commit("g", "t", 10)
    w.append("t", [b"s"] * 5)
    debug.power_cut(w, seed=3, keep_permille=0)
    # Simulate a cursor that outran the log (a power cut under fsync=never in an older
    # release, or a restored backup): the log ends at 10, the cursor says 14.
    w = open_wal(fsync="never", test_mode=True)
    assert w.info("t").high_watermark == 10
    debug.local_engine(w).cursors.put("g", stream_key("t"), 14)
    w.close()
    with caplog.at_level(logging.WARNING, logger="walfs"):
        w = open_wal(fsync="never")
    assert w.committed("g", "t") == 10
    assert any("past the end" in r.getMessage() for r in caplog.records)
    w.append("t", b"new")
    assert [r.value for r in w.consumer("g", "t").read_next()] == [b"new"]


def test_concurrent_commits_never_move_a_cursor_backwards(open_wal):
    w = open_wal(fsync="always")
    w.append("t", [b"r"] * 2000)
    errors: list[BaseException] = []

    def committer(start: int) -> None:
        try:
            for off in range(start, 2001, 4):
                w.commit("g", "t", off, advance_only=True)
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)

    seen: list[int] = []
    stop = threading.Event()

    def watcher() -> None:
        while not stop.is_set():
            v = w.committed("g", "t")
            if v is not None:
                seen.append(v)

    threads = [threading.Thread(target=committer, args=(k,)) for k in range(1, 5)]
    wt = threading.Thread(target=watcher)
    wt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    wt.join()
    assert not errors
    assert w.committed("g", "t") == 2000
    assert seen == sorted(seen)
    w.commit("g", "t", 5)  # an explicit seek back is allowed
    assert w.committed("g", "t") == 5


def test_kafka_fetch_hands_out_only_durable_records_and_commits_stay_below_the_end(tmp_path):
    from confluent_kafka import Consumer, TopicPartition
    from kafka_harness import Listener

    w = walfs.Wal(tmp_path / "data", fsync="never", fsync_interval_ms=60_000, segment_size=16 << 20,
                  block_size=1 << 20)
    try:
        w.append("t", [b"v%d" % i for i in range(20)])
        assert w.info("t").durable_watermark == 0
        with Listener(w) as lst:
            c = Consumer({"bootstrap.servers": lst.bootstrap, "group.id": "g", "enable.auto.commit": False,
                          "auto.offset.reset": "earliest"})
            try:
                c.assign([TopicPartition("t", 0, 0)])
                got: list[bytes] = []
                for _ in range(60):
                    m = c.poll(0.5)
                    if m is not None and m.error() is None:
                        got.append(m.value())
                        # What a consumer holds is durable by the time it holds it.
                        assert w.info("t").durable_watermark >= m.offset() + 1
                    if len(got) == 20:
                        break
                assert got == [b"v%d" % i for i in range(20)]
                lo, hi = c.get_watermark_offsets(TopicPartition("t", 0), timeout=10)
                assert (lo, hi) == (0, 20)
                c.commit(offsets=[TopicPartition("t", 0, 20)], asynchronous=False)
                assert w.committed("g", "t") == 20
            finally:
                c.close()
    finally:
        w.close()
