"""ListOffsets by record timestamp (walfs/kafka/record_times.py): over many chunks of the
running-maximum index, with timestamps out of append order, the answer is the first
offset whose record timestamp is at least the target, exactly what a scan of every
record gives; after a trim the index starts again at the new log start."""

from __future__ import annotations

import random

from walfs.kafka.record_times import CHUNK, RecordTimes


def _brute(ts: list[int], low: int, target: int) -> tuple[int, int]:
    for off in range(low, len(ts)):
        if ts[off] >= target:
            return ts[off], off
    return -1, -1


def test_matches_a_full_scan_over_many_chunks(open_wal) -> None:
    w = open_wal()
    rnd = random.Random(5)
    ts: list[int] = []
    base = 1_700_000_000_000
    n = 3 * CHUNK + 123
    for start in range(0, n, 1000):
        rows = []
        for i in range(start, min(n, start + 1000)):
            t = base + i * 10 + rnd.randrange(-5000, 5000)  # roughly growing, often out of order
            if i in (CHUNK + 500, 2 * CHUNK + 7):
                t = base + 10**9  # far-future stamps raise the running maximum mid-log
            ts.append(t)
            rows.append((None, b"v", None, t))
        w.append("t", rows)
    # some records without a producer timestamp: their append time counts
    w.append("t", [b"plain"] * 10)
    for r in w.read_records("t", n, max_records=10):
        ts.append(r.timestamp_ms)
    times = RecordTimes()
    high = w.info("t").high_watermark
    targets = [base - 1, base, base + 5, base + 20_000, base + 40_000, ts[-1], max(ts), max(ts) + 1]
    targets += [rnd.randrange(base, base + n * 10) for _ in range(40)]
    answers = {times.offset_for(w.engine, "t", 0, t, 0, high)[1] for t in targets}
    assert len(answers) > 10  # the targets land all over the log, not on one record
    for target in targets:
        assert times.offset_for(w.engine, "t", 0, target, 0, high) == _brute(ts, 0, target), target
    best = max(ts)
    assert times.max_timestamp(w.engine, "t", 0, 0, high) == (best, ts.index(best))
    # The partition grows: the index extends; the new records are found.
    w.append("t", [(None, b"late", None, best + 7)])
    ts.append(best + 7)
    assert times.offset_for(w.engine, "t", 0, best + 1, 0, high + 1) == (best + 7, high)
    assert times.max_timestamp(w.engine, "t", 0, 0, high + 1) == (best + 7, high)
    # A trim moves the log start: the index starts again there.
    w.trim("t", CHUNK + 1)
    low = w.info("t").low_watermark
    for target in targets[:10]:
        assert times.offset_for(w.engine, "t", 0, target, low, high + 1) == _brute(ts, low, target)
    assert times.max_timestamp(w.engine, "t", 0, low, low) == (-1, -1)
