"""One record per call (issue 19): the stream handle's write path and what it must keep.

A small append is copied into the segment's writable mapping (csrc/io.c seg_mwritev)
instead of written with pwritev, and its Python side takes no lock (walfs/local/core.py
append_one pins the handle; walfs/common/metrics.py tallies the counters). These tests hold that
path to the same contracts as the rest: no write syscall per record, readers in another
process see every acknowledged record, a fault on the mapping is an error and not a dead
process, a close racing appends loses nothing that was acknowledged, and the counters are
exact under threads.
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading

from conftest import SMALL, payload

import walfs
from walfs.errors import WalClosedError


def run(body: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body), *args], capture_output=True, text=True, timeout=timeout
    )


def test_single_appends_make_no_write_syscall_per_record(wal_dir):
    """2,000 single appends through the handle and Wal.append: the old path made two
    pwritev per record (the record, then its index slot); the mapped path makes none.
    strace is in the Makefile's APT_PACKAGES: without it this test fails, not skips."""
    assert shutil.which("strace"), "strace missing: `make deps` installs it"
    body = """
        import sys, walfs
        w = walfs.Wal(sys.argv[1], fsync="never", segment_size=1 << 24, block_size=1 << 20)
        w.append("t", [b"warm"])  # the run exists: what follows is the steady state
        a = w.appender("t")
        print("GO", flush=True)
        for i in range(1000):
            a.append(b"%d" % i * 10)
        for i in range(1000):
            w.append("t", b"%d" % i * 10)
        print("HW", w.info("t").high_watermark, flush=True)
        w.close()
        """
    out = os.path.join(os.path.dirname(wal_dir), "strace.txt")
    r = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            out,
            "-e",
            "trace=write,pwrite64,pwritev,pwritev2,writev",
            sys.executable,
            "-c",
            textwrap.dedent(body),
            wal_dir,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "HW 2001" in r.stdout, r.stdout
    lines = open(out).read().splitlines()
    # Only what follows the process's "GO" line counts (start-up and the warm batch do not).
    go = next(i for i, line in enumerate(lines) if re.search(r'write\(1, "GO', line))
    writes = [line for line in lines[go + 1 :] if re.search(r"\bp?writev?2?\(|pwrite64\(", line)]
    # close() writes seal/frontier headers and catalog entries: a handful, not 4,000.
    assert len(writes) < 50, (len(writes), writes[:20])


def test_single_appends_are_seen_by_a_reader_process_without_sync(wal_dir):
    """Published means readable by a read-only engine in another process, with no sync
    between: the mapped copy lands in the same page cache as pwritev did."""
    w = walfs.Wal(wal_dir, fsync="never", **SMALL)
    try:
        a = w.appender("t")
        for i in range(3000):  # several 64 KiB runs: new run headers go the mapped way too
            assert a.append(payload("t", i)) == i
        r = run(
            """
            import sys, walfs
            r = walfs.Wal(sys.argv[1], read_only=True)
            recs = r.read("t", 0, max_records=10_000)
            print(len(recs), r.info("t").high_watermark)
            for rec in recs:
                print(rec.hex())
            """,
            wal_dir,
        )
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "3000 3000", lines[0]
        assert [bytes.fromhex(x) for x in lines[1:]] == [payload("t", i) for i in range(3000)]
    finally:
        w.close()


def test_a_fault_on_the_mapping_is_eio_and_the_process_lives(wal_dir):
    """A segment cut short under the open writer (an operator's mistake): the mapped write
    of a single append faults (SIGBUS); the append reports EIO instead of killing the
    process, twice in a row (the fault handler leaves SIGBUS blocked; the write path
    unblocks it, or the second fault would kill). pwritev, before, grew the file back
    silently and the append 'succeeded' into a run whose header was gone."""
    r = run(
        """
        import errno, os, sys, walfs
        d = sys.argv[1]
        w = walfs.Wal(d, fsync="never", segment_size=1 << 20, block_size=64 << 10)
        a = w.appender("t")
        for i in range(5):  # the next appends still go to the stream's first (4 KiB) run,
            a.append(b"x" * 100)  # not to a new run whose fallocate would grow the file
        seg = os.path.join(d, "seg-0000000000000001.wal")
        for attempt in range(2):
            os.truncate(seg, 4096)
            try:
                a.append(b"y" * 100)
                print("NO ERROR")
            except walfs.WalIOError as e:
                print("EIO" if e.errno == errno.EIO else "OTHER", e)
        print("ALIVE")
        os._exit(0)  # the directory is damaged on purpose: no close
        """,
        wal_dir,
    )
    assert r.returncode == 0, (r.returncode, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("EIO") and lines[1].startswith("EIO"), r.stdout
    assert lines[2] == "ALIVE"


def close_racing_appends(d: str) -> None:
    w = walfs.Wal(d, fsync="never", **SMALL)
    acked: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def writer(t: str) -> None:
        a = w.appender(t)
        got = acked.setdefault(t, [])
        started.wait()
        i = 0
        try:
            while True:
                got.append(a.append(payload(t, i)))
                i += 1
        except WalClosedError:
            pass
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(f"t{k}",)) for k in range(4)]
    for th in threads:
        th.start()
    started.wait()
    while min(len(v) for v in acked.values()) < 200:
        threading.Event().wait(0.001)
    w.close()
    for th in threads:
        th.join(timeout=60)
        assert not th.is_alive()
    assert not errors, errors
    r = walfs.Wal(d, read_only=True)
    try:
        for t, offsets in acked.items():
            assert offsets == list(range(len(offsets)))
            assert r.info(t).high_watermark == len(offsets)
            assert r.read(t, 0, max_records=len(offsets) + 10) == [payload(t, i) for i in range(len(offsets))]
    finally:
        r.close()


def test_close_racing_single_appends_loses_nothing_acknowledged(wal_dir):
    """Four threads append through their handles while another closes the WAL: each
    append returns an offset or raises WalClosedError (never a crash on a freed handle),
    and every acknowledged offset holds its record after reopening."""
    for round_ in range(5):
        close_racing_appends(f"{wal_dir}-{round_}")


def test_counters_are_exact_when_threads_share_one_handle(wal_dir):
    """The handle counts without a lock (a per-stream tally folded under the stats lock):
    8 threads x 5,000 appends on one handle are 40,000 records and their bytes exactly,
    whether read while appending or after."""
    w = walfs.Wal(wal_dir, fsync="never", segment_size=1 << 24, block_size=1 << 20)
    try:
        a = w.appender("t")
        seen: list[int] = []
        stop = threading.Event()

        def scrape() -> None:
            while not stop.is_set():
                seen.append(w.engine.stats.records_appended)

        def work(k: int) -> None:
            for _ in range(5000):
                a.append(b"r" * (k + 1))

        scraper = threading.Thread(target=scrape)
        scraper.start()
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
        stop.set()
        scraper.join(timeout=60)
        assert seen == sorted(seen) and seen[-1] <= 40_000  # never backwards, never over
        assert w.engine.stats.records_appended == 40_000
        assert w.engine.stats.appends_by_stream()[("t", 0)] == (40_000, 5000 * sum(range(1, 9)))
        assert w.info("t").high_watermark == 40_000
    finally:
        w.close()


def test_a_reference_to_the_handles_append_follows_deletes(wal_dir):
    """`append = w.appender(t).append` taken once (what a hot loop does) stays right
    across deletes: of another stream (same stream, offsets go on), and of its own
    (the next append creates the new stream at offset 0), twice."""
    w = walfs.Wal(wal_dir, fsync="never", **SMALL)
    try:
        append = w.appender("t").append
        w.append("other", b"o")
        assert [append(b"a"), append(b"b")] == [0, 1]
        w.delete("other")
        assert append(b"c") == 2
        for round_ in range(2):
            w.delete("t")
            assert append(b"new%d" % round_) == 0
            assert append(b"more") == 1
            assert w.read("t", 0, max_records=10) == [b"new%d" % round_, b"more"]
        assert w.engine.stats.appends_by_stream()[("t", 0)][0] == 7
    finally:
        w.close()


def test_single_appends_of_two_orgs_stay_in_their_own_streams(wal_dir):
    """Wal.append caches each topic's handle; an org view (Wal.for_org) has its own
    cache, so the same topic name in two orgs are two streams."""
    w = walfs.Wal(wal_dir, fsync="never", **SMALL)
    try:
        other = w.for_org(7)
        assert [w.append("t", b"mine"), other.append("t", b"theirs"), w.append("t", b"mine2")] == [0, 0, 1]
        assert w.read("t", 0, max_records=10) == [b"mine", b"mine2"]
        assert other.read("t", 0, max_records=10) == [b"theirs"]
    finally:
        w.close()
