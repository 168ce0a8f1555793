"""What an open reads (issue 35): the records below a clean durable frontier are trusted as
a sealed run's, so an open after a clean close reads run headers, not records; after a
crash only the records above the frontier on disk are verified, and the open's own sync
rewrites the frontier so that the next open trusts them too. A frontier an older writer
left (no clean flag) has its run verified whole, then rewritten clean. Real files, the
core's power-cut simulator (docs/format.md, "Frontier header" and validity rule 3)."""

from __future__ import annotations

from conftest import payload
from frontier_files import CLEAN, as_an_older_writers, frontier_count, frontier_flags
from test_wal_quarantine import record_start, run_start
from test_wal_recovery import crash_after

import walfs
from walfs.local import debug

TOPICS = [f"t{i}" for i in range(40)]


def write(open_wal, sessions: int, per_session: int) -> dict[str, list[bytes]]:
    """Every topic gets per_session records in each of `sessions` clean sessions (small runs
    that grow into block runs for the busy ones)."""
    want: dict[str, list[bytes]] = {t: [] for t in TOPICS}
    for _ in range(sessions):
        w = open_wal()
        for i, t in enumerate(TOPICS):
            n = per_session * (1 + (i % 4) * 5)  # some topics many times busier
            vals = [payload(t, len(want[t]) + j, 40) for j in range(n)]
            w.append(t, vals)
            want[t] += vals
        w.close()
    return want


def read_back(w: walfs.Wal, want: dict[str, list[bytes]]) -> None:
    for t, vals in want.items():
        assert w.read(t, 0, max_records=len(vals) + 10) == vals, t


def test_an_open_after_a_clean_close_reads_no_record(open_wal, wal_dir: str) -> None:
    want = write(open_wal, sessions=3, per_session=30)
    w = open_wal()
    report = w.engine.report()
    assert report["verified_records"] == 0 and report["cut_records"] == 0
    assert report["records"] == sum(map(len, want.values()))
    read_back(w, want)
    more = {t: [payload(t, len(want[t]) + j, 40) for j in range(3)] for t in TOPICS}
    for t in TOPICS:
        assert w.append(t, more[t]) == len(want[t])
        want[t] += more[t]
    w.close()
    w = open_wal(read_only=True)
    assert w.engine.report()["verified_records"] == 0
    read_back(w, want)


def test_after_a_crash_only_the_records_above_the_frontier_are_verified(open_wal, wal_dir: str) -> None:
    want = write(open_wal, sessions=1, per_session=20)
    w = open_wal(test_mode=True, fsync="never")
    late = {t: [payload(t, len(want[t]) + j, 40) for j in range(7)] for t in TOPICS}
    for t in TOPICS:
        w.append(t, late[t][:4])
    w.sync()
    w.sync()  # the frontiers of those 4 records each are durable
    for t in TOPICS:
        w.append(t, late[t][4:])  # never synced
        want[t] += late[t]
    crash_after(w)  # a SIGKILL: the page cache keeps every write
    w = open_wal()
    report = w.engine.report()
    assert report["verified_records"] == 3 * len(TOPICS) and report["cut_records"] == 0
    read_back(w, want)
    w.close()
    path, pos = record_start(wal_dir, late["t0"][6])
    run = run_start(path, pos)
    assert frontier_flags(path, run) == CLEAN
    w = open_wal()
    assert w.engine.report()["verified_records"] == 0  # the open's sync rewrote the frontiers
    read_back(w, want)


def test_a_power_cut_after_the_open_that_followed_a_crash_loses_nothing(open_wal, wal_dir: str) -> None:
    """The frontier the open rewrites over records it verified lags as every frontier does
    (durable at the next sync round): a power cut before that leaves the old one, and the
    records are verified again, none cut; after a clean close the next open reads none."""
    want = write(open_wal, sessions=1, per_session=10)
    w = open_wal(test_mode=True, fsync="never")
    for t in TOPICS:
        vals = [payload(t, len(want[t]) + j, 40) for j in range(5)]
        w.append(t, vals)
        want[t] += vals
    crash_after(w)
    for _ in range(2):
        w = open_wal(test_mode=True, fsync="never")
        assert w.engine.report()["verified_records"] == 5 * len(TOPICS)
        debug.power_cut(w, seed=7, keep_permille=0)
    w = open_wal()
    report = w.engine.report()
    assert report["verified_records"] == 5 * len(TOPICS)
    assert report["cut_records"] == 0 and report["quarantined"] == 0
    read_back(w, want)
    w.close()
    w = open_wal()
    assert w.engine.report()["verified_records"] == 0
    read_back(w, want)


def test_an_older_writers_frontier_is_verified_once_then_made_clean(open_wal, wal_dir: str) -> None:
    w = open_wal(block_size=8192)  # one block run: all 100 records in the stream's open run
    vals = [b"rec-%03d" % i for i in range(100)]
    w.append("t", vals)
    w.close()
    path, pos = record_start(wal_dir, vals[0])
    run = run_start(path, pos, 8192)
    as_an_older_writers(path, run)
    w = open_wal(block_size=8192, read_only=True)  # changes nothing
    assert w.engine.report()["verified_records"] == 100
    w.close()
    assert frontier_flags(path, run) == 0
    w = open_wal(block_size=8192)
    assert w.engine.report()["verified_records"] == 100
    assert w.read("t", 0, max_records=200) == vals
    w.close()
    assert frontier_flags(path, run) == CLEAN and frontier_count(path, run) == 100
    w = open_wal(block_size=8192)
    assert w.engine.report()["verified_records"] == 0
    assert w.read("t", 0, max_records=200) == vals


def test_a_frontier_whose_last_record_fails_verifies_the_run_whole(open_wal, wal_dir: str, caplog) -> None:
    w = open_wal(block_size=8192)
    vals = [b"rec-%03d" % i for i in range(100)]
    w.append("t", vals)
    w.close()
    path, pos = record_start(wal_dir, vals[99])
    with open(path, "r+b") as f:  # a byte of the last record's value
        f.seek(pos + 36 + 2)
        b = f.read(1)[0]
        f.seek(pos + 36 + 2)
        f.write(bytes([b ^ 1]))
    with caplog.at_level("INFO", logger="walfs.core"):
        w = open_wal(block_size=8192)
    assert any("does not end where its durable frontier says" in r.getMessage() for r in caplog.records)
    report = w.engine.report()
    assert report["verified_records"] == 99 and report["quarantined"] == 1 and report["cut_records"] == 0
    assert w.read("t", 0, max_records=99) == vals[:99]
    w.close()
    w = open_wal(block_size=8192, read_only=True)  # found again at every open
    assert w.engine.report()["quarantined"] == 1 and w.engine.report()["verified_records"] == 99
