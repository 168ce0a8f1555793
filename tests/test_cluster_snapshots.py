"""Region snapshots on the Kafka cluster engine (issue 16): the cleaner snapshots a region
after `snapshot_every` log records, so opening a namespace replays only the records after
the newest snapshot, and opening with snapshots ignored (use_snapshots=False) replays the
whole log to the same state, or is refused once the cleaner deleted records that only a
snapshot describes. On the shared single-node broker (tests/real_kafka.py)."""

from __future__ import annotations

import pytest
from conftest_mount import wait_until
from real_kafka import fresh_target

from walfs.cluster.engine import KafkaEngine
from walfs.engine.rules import append_lines
from walfs.errors import WalError


def state(e: KafkaEngine) -> list[tuple[str, int, int, int, int]]:
    out = []
    for topic, p in e.streams():
        i = e.info(topic, p)
        out.append((topic, p, i.low_watermark, i.high_watermark, i.byte_size))
    return out


def test_periodic_snapshots_bound_what_an_open_replays() -> None:
    target = fresh_target(regions=2)
    w = KafkaEngine(target, reclaim_interval_s=0.2, snapshot_every=20)
    try:
        for k in range(60):  # 60 log records over 6 streams in 2 regions
            append_lines(w, f"s{k % 6}", 0, b"line %d\n" % k)

        # The cleaner (background, every 0.2 s) snapshots each region once it passed 20
        # records since its last one.
        def caught_up() -> bool:
            return all(w._state.pos[r] - w._snapshots.upto.get(r, 0) < 20 for r in range(2))  # noqa: SLF001

        wait_until(caught_up, 30, "the cleaner's snapshots")
        assert w.report()["snapshots"] >= 1
        want = state(w)
    finally:
        w.close()
    fast = KafkaEngine(target, read_only=True)
    slow = KafkaEngine(target, read_only=True, use_snapshots=False)
    try:
        assert state(fast) == state(slow) == want
        assert slow.report()["open_replayed"] == 60
        assert fast.report()["open_replayed"] < 20 * 2  # at most snapshot_every per region
        for topic, p, _lo, high, size in want:
            a, b = bytearray(4096), bytearray(4096)
            assert fast.read_bytes(topic, p, 0, a) == slow.read_bytes(topic, p, 0, b) == size
            k = int(topic[1:])
            assert a[:size] == b[:size] == b"".join(b"line %d\n" % i for i in range(k, 60, 6))
            assert high == 10
    finally:
        fast.close()
        slow.close()


def test_ignoring_snapshots_is_refused_once_the_cleaner_deleted_below_them() -> None:
    target = fresh_target(regions=1)
    w = KafkaEngine(target, reclaim_interval_s=3600)
    try:
        for k in range(10):
            append_lines(w, "t", 0, b"x%d\n" % k)
        w.trim("t", 0, 8)
        assert w.reclaim() == 1
    finally:
        w.close()
    with pytest.raises(WalError, match="use_snapshots=True"):
        KafkaEngine(target, read_only=True, use_snapshots=False)
    again = KafkaEngine(target, read_only=True)
    try:
        assert (again.info("t").low_watermark, again.info("t").high_watermark) == (8, 10)
    finally:
        again.close()
