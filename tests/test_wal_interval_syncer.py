"""The interval syncer (csrc/sync.c, fsync="interval"): a round is due one interval after
the last round started, whoever led it, so callers that sync often (the Kafka listener's
rounds) get no extra fsync beside theirs. What the policy promises must still hold: an
append that no caller syncs is made durable by the syncer, also after rounds led by
others, and survives a power cut once it is (docs/durability.md)."""

from __future__ import annotations

import threading
import time

from kafka_harness import wait_until

import walfs
from walfs.local import debug

SMALL = {"segment_size": 16 << 20, "block_size": 1 << 20}


def test_the_syncer_makes_appends_durable_after_rounds_led_by_others(tmp_path):
    path = str(tmp_path / "data")
    w = walfs.Wal(path, fsync="interval", fsync_interval_ms=200, test_mode=True, **SMALL)
    for k in range(5):
        # A round led by a caller, then an append nobody syncs: the syncer's round comes
        # one interval after the caller's and covers it.
        w.append("t", b"synced-%d" % k)
        w.sync()
        w.append("t", b"left-%d" % k)
        wait_until(lambda k=k: w.info("t").durable_watermark == 2 * (k + 1), 30, "the syncer's round")
    debug.power_cut(w, seed=4, keep_permille=0)
    w = walfs.Wal(path, fsync="interval", **SMALL)
    try:
        assert w.read("t", 0, max_records=20) == [
            v for k in range(5) for v in (b"synced-%d" % k, b"left-%d" % k)
        ]
    finally:
        w.close()


def test_the_syncer_syncs_on_its_own_when_nobody_else_does(tmp_path):
    w = walfs.Wal(str(tmp_path / "data"), fsync="interval", fsync_interval_ms=100, **SMALL)
    try:
        before = w.engine.report()["syncs"]
        for k in range(3):
            w.append("t", b"v%d" % k)
            wait_until(lambda k=k: w.info("t").durable_watermark == k + 1, 30, "the syncer's round")
        assert w.engine.report()["syncs"] - before >= 3
    finally:
        w.close()


def test_a_round_due_while_a_slow_one_runs_starts_when_that_one_ends(tmp_path):
    # A slow disk: a caller's round takes one and a half intervals. An append made while it
    # runs is not covered by it. The syncer's round falls due during it and must start as
    # soon as it ends (1.5 s), not one interval after falling due (2 s), which is what the
    # syncer did before it waited for the running round's end.
    w = walfs.Wal(str(tmp_path / "data"), fsync="interval", fsync_interval_ms=1000, test_mode=True, **SMALL)
    try:
        w.append("t", b"covered by the slow round")
        debug.slow_sync(w, 1500)
        slow = threading.Thread(target=w.sync)
        start = time.monotonic()
        slow.start()
        time.sleep(0.2)  # the slow round has taken its files long before this
        w.append("t", b"left to the syncer")
        wait_until(lambda: w.info("t").durable_watermark == 2, 30, "the syncer's round")
        took = time.monotonic() - start
        slow.join()
        assert 1.5 <= took < 1.85, took
    finally:
        w.close()
