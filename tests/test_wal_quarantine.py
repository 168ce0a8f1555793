"""Damaged data is quarantined, not fatal (issue 36, its data row).

A WAL of three topics over several segments, a committed cursor and a per-topic setting;
then, while nothing has it open, one flipped byte (or a zeroed 4 KiB page) in records of
the active run of topic `t`, below its durable frontier. Before issue 36 the open failed
("... lies below the run's durable frontier: damaged, not cut"), and every topic with it.
Now the WAL opens as a writer, each damaged record raises CorruptRecordError (EIO on the
mount, CORRUPT_MESSAGE on a Kafka fetch), every other record of every topic reads back byte
for byte at its offset and at its byte position, appends go on after the run's end, the
cursor and the setting are where they were, and `walfs fsck` names the damage.

Where the open verifies the run (a frontier an older writer left, without the clean flag,
or one whose last record does not prove itself) the damage is also quarantined and reported
at every open (a line naming the file, offset and byte; the recovery report's
`quarantined`): there is no second copy of data to heal it from. Under the clean frontier
this writer leaves, the open trusts the run as it trusts a sealed one, and the read that
meets the damage reports it (issue 35: an open that reads every record of every last run
costs seconds at 100,000 topics). Real files, small geometry."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from conftest import SMALL
from conftest_mount import Mount, cli
from frontier_files import as_an_older_writers
from kafka_harness import Listener
from test_kafka_fetch_damage import fetch, values
from test_wal_recovery import crash_after, find, poke

import walfs
from walfs.kafka.messages import ErrorCode

pytest_plugins = ["conftest_mount"]

TOPICS = ("t", "u", "v")
HIST = 3000  # records per topic in the first session (several runs, sealed, over segments)
LIVE = 300  # records per topic in the second session: the active (unsealed) run
SEG_HDR = 4096
BLOCK = SMALL["block_size"]
GROUP_AT = 1234  # group g's committed offset of topic u
RETENTION_MS = 10**12  # topic v's own setting


def hist(topic: str, i: int) -> bytes:
    return b"%s-hist-%05d-" % (topic.encode(), i) + b"h" * 60


def live(topic: str, i: int) -> bytes:
    return b"%s-live-%04d-" % (topic.encode(), i) + b"a" * 24


def build(d: str) -> dict[str, list[bytes]]:
    """Writes the WAL (two sessions, closed cleanly) and returns every topic's values."""
    want: dict[str, list[bytes]] = {t: [] for t in TOPICS}
    with walfs.Wal(d, **SMALL) as w:  # type: ignore[arg-type]
        for k in range(0, HIST, 100):
            for t in TOPICS:
                batch = [hist(t, i) for i in range(k, k + 100)]
                w.append(t, batch)
                want[t] += batch
        w.commit("g", "u", GROUP_AT)
        w.retention("v", retention_ms=RETENTION_MS)
    with walfs.Wal(d, **SMALL) as w:  # type: ignore[arg-type]
        for k in range(0, LIVE, 10):
            for t in TOPICS:
                batch = [live(t, i) for i in range(k, k + 10)]
                w.append(t, batch)
                want[t] += batch
    assert len([f for f in os.listdir(d) if f.startswith("seg-")]) >= 2  # over segments
    return want


def record_start(d: str, value: bytes) -> tuple[str, int]:
    """The segment file and file byte where the record holding `value` starts."""
    path, pos = find(d, value)
    return path, pos - 36  # plain values: no meta section after the 36-byte header


def run_at(path: str, pos: int, block_size: int = BLOCK) -> tuple[int, int]:
    """(first byte, size) of the run holding file byte pos (in its first block): a small
    run in its slot of a carved block (the carve header names the class), else a block run
    (docs/format.md)."""
    block = pos - (pos - SEG_HDR) % block_size
    with open(path, "rb") as f:
        f.seek(block)
        head = f.read(256)
    carve = head[128:256]
    if carve[:8] == b"WALFSBLK" and int.from_bytes(carve[10:12], "little") == 4:
        size = int.from_bytes(carve[96:104], "little")
        return block + (pos - block) // size * size, size
    return block, int.from_bytes(head[12:16], "little") * block_size


def run_start(path: str, pos: int, block_size: int = BLOCK) -> int:
    return run_at(path, pos, block_size)[0]


def run_end(path: str, pos: int, block_size: int = BLOCK) -> int:
    start, size = run_at(path, pos, block_size)
    return start + size


def assert_in_the_active_run(path: str, pos: int, block_size: int = BLOCK) -> None:
    """The record at pos lies in an unsealed run that has a durable frontier."""
    with open(path, "rb") as f:
        f.seek(run_start(path, pos, block_size))
        head = f.read(1024)
    assert head[:8] == b"WALFSBLK"  # the open header
    assert head[256:264] == b"WALFSBLK"  # a frontier
    assert head[512:520] != b"WALFSBLK"  # no seal


def flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ 0x40]))


def damage(d: str, how: str, frontier: str = "an older writer's") -> set[int]:
    """Damages records of t's active run; returns the offsets of the damaged records. Under
    an older writer's frontier (no clean flag: docs/format.md) the open verifies the run and
    quarantines them; under the clean frontier this writer leaves, reads refuse them."""
    path, pos = record_start(d, live("t", 150))
    assert_in_the_active_run(path, pos)
    if frontier != "clean":
        as_an_older_writers(path, run_start(path, pos))
    if how == "flip":
        flip(path, pos + 36 + 5)  # a byte of its value
        return {HIST + 150}
    page = pos & ~4095
    assert page >= run_start(path, pos) + 1024  # records only: not the run's headers
    starts = [record_start(d, live("t", i))[1] for i in range(LIVE)]
    with open(path, "r+b") as f:
        f.seek(page)
        f.write(bytes(4096))
    bad = {HIST + i for i in range(LIVE - 1) if starts[i] < page + 4096 and starts[i + 1] > page}
    assert len(bad) > 30
    return bad


def read_all(w: walfs.Wal, topic: str) -> tuple[dict[int, bytes], set[int]]:
    """Every record of the topic that reads, and the offsets that raised CorruptRecordError."""
    got: dict[int, bytes] = {}
    errors: set[int] = set()
    off, high = 0, w.info(topic).high_watermark
    while off < high:
        try:
            recs = w.read_records(topic, off, max_records=500)
        except walfs.CorruptRecordError as e:
            assert e.offset == off and e.topic == topic, (e.offset, off)
            errors.add(off)
            off += 1
            continue
        for r in recs:
            got[r.offset] = bytes(r.value)
        off = recs[-1].offset + 1
    return got, errors


def view(values_: list[bytes]) -> bytes:
    return b"".join(v + b"\n" for v in values_)


def check_served(w: walfs.Wal, want: dict[str, list[bytes]], bad: set[int]) -> None:
    """The damaged records of t refuse every read; everything else reads back as written,
    by offset and in the byte view (whose positions did not move)."""
    for t in TOPICS:
        got, errors = read_all(w, t)
        assert errors == (bad if t == "t" else set()), t
        assert got == {o: v for o, v in enumerate(want[t]) if t != "t" or o not in bad}, t
    for o in bad:
        with pytest.raises(walfs.CorruptRecordError, match=f"offset {o}"):
            w.read("t", o)
    true = view(want["t"])
    assert w.info("t").byte_size == len(true)
    first, last = min(bad), max(bad)
    before, after = len(view(want["t"][:first])), len(view(want["t"][: last + 1]))
    assert w.read_bytes("t", 0, before) == true[:before]
    assert w.read_bytes("t", after, len(true)) == true[after:]
    assert w.locate("t", offset=last + 1) == after
    with pytest.raises(walfs.CorruptRecordError, match=f"offset {first}"):
        w.read_bytes("t", before - 10, 100)
    for t in ("u", "v"):
        assert w.read_bytes(t, 0, 1 << 30) == view(want[t])


def quarantine_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    msgs = [r.getMessage() for r in caplog.records if r.name == "walfs.core"]
    return [m for m in msgs if "quarantined" in m]


Damaged = tuple[dict[str, list[bytes]], set[int]]  # every topic's values, the damaged offsets of t


@pytest.fixture
def damaged(request: pytest.FixtureRequest, wal_dir: str) -> Iterator[Damaged]:
    want = build(wal_dir)
    yield want, damage(wal_dir, request.param)


@pytest.mark.parametrize("how", ["flip", "page"])
def test_a_damaged_record_under_a_clean_frontier_is_refused_by_reads(
    wal_dir: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The frontier this writer leaves at every sync and close is clean: the open trusts the
    run's records as a sealed run's (it reads none of them), and the damage is found by the
    read that meets it (CorruptRecordError, EIO on the mount) and by fsck, never cut."""
    want = build(wal_dir)
    bad = damage(wal_dir, how, frontier="clean")
    for read_only in (False, True):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="walfs"):
            w = walfs.Wal(wal_dir, read_only=read_only, **SMALL)  # type: ignore[arg-type]
        try:
            report = w.engine.report()
            assert quarantine_lines(caplog) == []
            assert report["quarantined"] == 0 and report["cut_records"] == 0
            assert report["verified_records"] == 0  # every last run under a clean frontier
            assert [w.info(t).high_watermark for t in TOPICS] == [len(want[t]) for t in TOPICS]
            check_served(w, want, bad)
            if not read_only:
                more = [b"after-%d" % i for i in range(20)]
                assert w.append("t", more) == HIST + LIVE
                want["t"] += more
                check_served(w, want, bad)
        finally:
            w.close()
    res = cli("fsck", wal_dir, check=False)
    assert res.returncode == 1, res
    listed = [int(m) for m in re.findall(r"^  t\[0\] offset (\d+): ", res.stdout, re.M)]
    assert listed == sorted(bad), res.stdout


@pytest.mark.parametrize("damaged", ["flip", "page"], indirect=True)
def test_a_damaged_record_of_the_active_run_is_quarantined(
    wal_dir: str, damaged: Damaged, caplog: pytest.LogCaptureFixture
) -> None:
    want, bad = damaged
    path, _ = record_start(wal_dir, live("t", 0))
    with caplog.at_level(logging.INFO, logger="walfs"):
        w = walfs.Wal(wal_dir, **SMALL)  # type: ignore[arg-type]
    try:
        # Reported: an error line naming the file, the offsets and the byte; the count.
        [line] = quarantine_lines(caplog)
        assert os.path.basename(path) in line and "stream 0 (t, partition 0)" in line, line
        if len(bad) == 1:
            assert f"record at offset {min(bad)} (file byte " in line, line
        else:  # consecutive records (a zeroed page): one line
            assert f"{len(bad)} records at offsets {min(bad)} to {max(bad)} (from file byte " in line, line
        assert all(r.levelno == logging.ERROR for r in caplog.records if r.name == "walfs.core")
        summary = [r for r in caplog.records if r.name == "walfs.recovery"]
        assert len(summary) == 1 and summary[0].levelno == logging.WARNING
        assert f"{len(bad)} damaged records quarantined" in summary[0].getMessage()
        report = w.engine.report()
        assert report["quarantined"] == len(bad) and report["cut_records"] == 0
        # Offsets did not move; the cursor and the setting are where they were.
        assert [w.info(t).high_watermark for t in TOPICS] == [HIST + LIVE] * 3
        assert w.committed("g", "u") == GROUP_AT
        assert w.retention("v").ms == RETENTION_MS
        check_served(w, want, bad)
        # Appends go on after the run's end, and read back.
        more = [b"after-%d" % i for i in range(20)]
        assert w.append("t", more) == HIST + LIVE
        want["t"] += more
        assert w.read("t", HIST + LIVE, max_records=100) == more
        check_served(w, want, bad)
    finally:
        w.close()

    # Again at the next open (no copy to heal data from), read-only too; fsck names them.
    for read_only in (False, True):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="walfs"):
            w = walfs.Wal(wal_dir, read_only=read_only, **SMALL)  # type: ignore[arg-type]
        try:
            assert w.engine.report()["quarantined"] == len(bad) and len(quarantine_lines(caplog)) == 1
            check_served(w, want, bad)
            assert w.committed("g", "u") == GROUP_AT
        finally:
            w.close()
    res = cli("fsck", wal_dir, check=False)
    assert res.returncode == 1, res
    assert f"damaged records quarantined: {len(bad)}" in res.stdout
    listed = [int(m) for m in re.findall(r"^  t\[0\] offset (\d+): ", res.stdout, re.M)]
    assert listed == sorted(bad), res.stdout
    assert res.stdout.rstrip().endswith(f"{len(bad)} damaged record" + ("s" if len(bad) > 1 else ""))


def test_the_last_durable_record_damaged_keeps_the_byte_positions(open_wal, wal_dir: str) -> None:
    """The view length of a damaged record at the very end comes from the catalog's
    durable-end mark: appends after it keep their true byte positions."""
    w = open_wal()
    vals = [b"rec-%03d-" % i + b"x" * i for i in range(100)]
    w.append("t", vals)
    w.close()
    path, pos = record_start(wal_dir, vals[99])
    assert_in_the_active_run(path, pos)
    flip(path, pos + 36 + 3)
    w = open_wal()
    assert w.engine.report()["quarantined"] == 1
    with pytest.raises(walfs.CorruptRecordError, match="offset 99"):
        w.read("t", 99)
    assert w.info("t").byte_size == len(view(vals))
    assert w.append("t", b"next") == 100
    assert w.read_bytes("t", len(view(vals)), 100) == b"next\n"
    assert w.read("t", 0, max_records=99) == vals[:99]


@pytest.mark.parametrize("frontier", ["clean", "an older writer's"])
def test_a_damaged_index_slot_quarantines_its_record(open_wal, wal_dir: str, caplog, frontier: str) -> None:
    # 8 KiB blocks have no small-run classes: all 100 records in one active block run.
    w = open_wal(block_size=8192)
    vals = [b"rec-%03d" % i for i in range(100)]
    w.append("t", vals)
    w.close()
    path, pos = record_start(wal_dir, vals[40])
    assert_in_the_active_run(path, pos, 8192)
    if frontier != "clean":
        as_an_older_writers(path, run_start(path, pos, 8192))
    with open(path, "r+b") as f:  # slot 40 says record 40 starts 8 bytes later
        at = run_end(path, pos, 8192) - 12 * 41
        f.seek(at)
        slot = f.read(4)
        f.seek(at)
        f.write((int.from_bytes(slot, "little") + 8).to_bytes(4, "little"))
    with caplog.at_level(logging.ERROR, logger="walfs.core"):
        w = open_wal()
    if frontier == "clean":  # trusted at open: the read through the slot refuses it
        assert quarantine_lines(caplog) == [] and w.engine.report()["verified_records"] == 0
    else:
        [line] = quarantine_lines(caplog)
        assert "offset 40" in line and "index slot disagrees" in line
    with pytest.raises(walfs.CorruptRecordError, match="offset 40"):
        w.read("t", 40)
    assert w.read("t", 41, max_records=100) == vals[41:]
    assert w.read_bytes("t", len(view(vals[:41])), 1000) == view(vals[41:])


def test_a_torn_batch_above_the_frontier_is_cut_back_to_a_damaged_record(open_wal, wal_dir: str) -> None:
    """Rule 5 cuts an unfinished append, never below a frontier: a quarantined record ends
    the walk back (its batch_left is not read; the frontier counts whole appends)."""
    w = open_wal(test_mode=True, fsync="never")
    vals = [b"rec-%04d" % i for i in range(100)]
    w.append("t", vals)
    w.sync()
    w.sync()  # the frontier (100 records) is durable too
    w.append("t", [b"late-%04d" % i for i in range(50)])  # one append, never synced
    crash_after(w)
    path, pos = record_start(wal_dir, b"late-0049")
    poke(path, pos, bytes(36))  # its last record was torn
    path, pos = record_start(wal_dir, vals[99])
    flip(path, pos + 36 + 2)  # and the last durable record is damaged
    w = open_wal()
    report = w.engine.report()
    assert report["quarantined"] == 1 and report["cut_records"] == 49  # the zeroed one is no record
    assert w.info("t").high_watermark == 100
    assert w.read("t", 0, max_records=200) == vals[:99]
    with pytest.raises(walfs.CorruptRecordError, match="offset 99"):
        w.read("t", 99)
    assert w.append("t", b"next") == 100
    assert w.read("t", 100) == [b"next"]
    assert w.read_bytes("t", len(view(vals)), 100) == b"next\n"
    w.close()
    w = open_wal()
    assert w.engine.report()["quarantined"] == 1 and w.read("t", 100) == [b"next"]


def test_a_sealed_run_with_a_damaged_last_slot_opens(open_wal, wal_dir: str) -> None:
    """A sealed run is trusted from its seal, and one that later runs follow is not read at
    all (its last record's batch_left says nothing of the stream's end): its damaged last
    slot is found by the read that meets it and by fsck, and never fails the open."""
    w = open_wal()
    vals = [b"sealed-%05d-" % i + b"s" * 80 for i in range(2000)]
    for k in range(0, len(vals), 100):
        w.append("t", vals[k : k + 100])
    w.close()
    path, pos = record_start(wal_dir, vals[0])
    run = run_start(path, pos)
    with open(path, "r+b") as f:
        f.seek(run + 512)
        seal = f.read(128)
        assert seal[:8] == b"WALFSBLK"
        count = int.from_bytes(seal[48:56], "little")
        f.seek(run_end(path, pos) - 12 * count)
        f.write(bytes(12))  # the last record's index slot
    w = open_wal()
    assert w.engine.report()["quarantined"] == 0 and w.engine.report()["cut_records"] == 0
    with pytest.raises(walfs.CorruptRecordError, match=f"offset {count - 1}"):
        w.read("t", count - 1)
    got, errors = read_all(w, "t")
    assert errors == {count - 1} and got == {o: v for o, v in enumerate(vals) if o != count - 1}
    assert w.append("t", b"next") == len(vals)
    w.close()
    res = cli("fsck", wal_dir, check=False)
    assert res.returncode == 1 and f"t[0] offset {count - 1}: " in res.stdout, res


def test_kafka_fetch_of_a_quarantined_record_is_corrupt_message(wal_dir: str) -> None:
    want = build(wal_dir)
    (bad,) = damage(wal_dir, "flip")
    with walfs.Wal(wal_dir, **SMALL) as w, Listener(w) as lst:  # type: ignore[arg-type]
        with socket.create_connection(("127.0.0.1", lst.port), timeout=30) as s:
            code, records = fetch(s, bad - 5, 1)
            assert code == ErrorCode.none and values(records) == want["t"][bad - 5 : bad]
            code, records = fetch(s, bad, 2)
            assert code == ErrorCode.corrupt_message and records == b""
            code, records = fetch(s, bad + 1, 3)
            assert code == ErrorCode.none and values(records)[:5] == want["t"][bad + 1 : bad + 6]


def test_the_mount_serves_everything_but_the_quarantined_record(make_mount: Callable[[], Mount]) -> None:
    m = make_mount()
    want = build(str(m.data))
    (bad,) = damage(str(m.data), "flip")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    m.start("--metrics-listen", f"127.0.0.1:{port}")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert re.search(r"^walfs_recovery_quarantined_records 1\.0$", metrics, re.M), metrics
        res = m.sh("cat t", check=False)
        assert res.returncode != 0 and b"Input/output error" in res.stderr, res
        assert view(want["t"]).startswith(res.stdout)
        for t in ("u", "v"):
            assert m.sh(f"cat {t}").stdout == view(want[t])
        assert m.sh("tail -n 2 t").stdout == view(want["t"][-2:])
        m.sh("echo appended >> t")
        assert m.sh("tail -n 1 t").stdout == b"appended\n"
        with walfs.Wal(str(m.data), read_only=True) as w:
            assert w.info("t").high_watermark == HIST + LIVE + 1
            with pytest.raises(walfs.CorruptRecordError, match=f"offset {bad}"):
                w.read("t", bad)
    finally:
        m.stop()
    assert "quarantined" in m.read_log()


def test_a_seek_by_time_steps_over_a_quarantined_record(open_wal, wal_dir: str) -> None:
    """A damaged record tells no time: the search reads the next good one, and counts the
    damaged one as late enough, so a seek by time never passes it."""
    w = open_wal()
    vals = [b"rec-%03d" % i for i in range(200)]
    w.append("t", vals[:100])
    time.sleep(0.01)
    w.append("t", vals[100:])
    w.close()
    path, pos = record_start(wal_dir, vals[99])
    flip(path, pos + 36 + 1)
    w = open_wal()
    (late,) = {r.timestamp_ms for r in w.read_records("t", 100, max_records=100)}
    (early,) = {r.timestamp_ms for r in w.read_records("t", 0, max_records=99)}
    assert early < late
    assert w.locate("t", timestamp_ms=early) == 0
    assert w.locate("t", timestamp_ms=late) == 99  # the damaged record may be that late
    assert w.locate("t", timestamp_ms=late + 1) == 200
