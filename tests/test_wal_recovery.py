"""Crashes and damage: SIGKILL of a writer process at random points, simulated power loss
(the core drops what was written since the last sync, page by page), torn tails, flipped
bytes, zeroed regions. Acknowledged records are never lost; batches are all or nothing;
damage that a crash cannot explain is reported, never skipped."""

import os
import random
import signal
import subprocess
import time
import zlib

import pytest
from conftest import PYTHON, REPO, SMALL, payload

import walfs
from walfs.local import debug

HERE = os.path.dirname(os.path.abspath(__file__))


def seg_files(d: str) -> list[str]:
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith("seg-"))


def find(d: str, needle: bytes) -> tuple[str, int]:
    """The segment file and position of a unique byte string."""
    hits = []
    for path in seg_files(d):
        with open(path, "rb") as f:
            data = f.read()
        pos = data.find(needle)
        while pos >= 0:
            hits.append((path, pos))
            pos = data.find(needle, pos + 1)
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def poke(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))


# --------------------------------------------------------------------------- SIGKILL


def run_and_kill(wal_dir: str, fsync: str, seed: int, delay: float) -> list[str]:
    # The tests folder for crash_writer.py, then this tree's walfs (not an installed one).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.path.dirname(HERE)]))
    proc = subprocess.Popen(
        [PYTHON, os.path.join(HERE, "crash_writer.py"), wal_dir, fsync, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("ready"), proc.stderr.read() if proc.stderr else ""
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    # Read through the same buffered file as readline() did (communicate() would skip
    # whatever that buffer already holds).
    out = proc.stdout.read()
    proc.wait(timeout=60)
    return [ready.strip()] + out.splitlines()


def check_after_kill(w: walfs.Wal, lines: list[str], base: dict[str, int]) -> dict[str, int]:
    acked = dict(base)
    in_flight: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if parts[0] == "ready":
            # The writer's view at open must be exactly what the previous check saw.
            assert {k: int(v) for k, v in (p.split("=") for p in parts[1:])} == {
                t: base.get(t, 0) for t in ("t0", "t1", "t2", "t3")
            }
        elif parts[0] == "will":
            in_flight = {parts[1]: int(parts[2])}
        elif parts[0] == "done":
            t, first, n = parts[1], int(parts[2]), int(parts[3])
            assert first == acked.get(t, 0)
            acked[t] = first + n
            in_flight = {}
    for t in set(acked) | set(in_flight):
        hwm = w.info(t).high_watermark
        done = acked.get(t, 0)
        # Every acknowledged record is there; of the batch in flight, all or nothing.
        assert hwm in (done, done + in_flight.get(t, 0)), (t, hwm, done, in_flight)
        got = w.read(t, 0, max_records=1 << 20, max_bytes=1 << 30)
        assert len(got) == hwm
        for off in range(hwm):
            assert got[off] == payload(t, off), (t, off)
        acked[t] = hwm
    return acked


@pytest.mark.parametrize("fsync", ["never", "interval", "always"])
def test_sigkill_at_random_points_loses_nothing_acknowledged(wal_dir, fsync):
    rng = random.Random(zlib.crc32(fsync.encode()))
    acked: dict[str, int] = {}
    for _round in range(5):
        lines = run_and_kill(wal_dir, fsync, rng.randrange(1 << 30), rng.uniform(0.05, 0.6))
        w = walfs.Wal(wal_dir, **SMALL)
        try:
            acked = check_after_kill(w, lines, acked)
            assert w.engine.verify() == []
        finally:
            w.close()
    assert sum(acked.values()) > 0


# --------------------------------------------------------------------------- power loss


class Model:
    """What the test appended: per topic, the values and the batch each belongs to."""

    def __init__(self) -> None:
        self.values: dict[str, list[bytes]] = {}
        self.batch_end: dict[str, set[int]] = {}
        self.durable: dict[str, int] = {}

    def append(self, t: str, vals: list[bytes]) -> None:
        self.values.setdefault(t, []).extend(vals)
        self.batch_end.setdefault(t, {0}).add(len(self.values[t]))

    def synced(self) -> None:
        self.durable = {t: len(v) for t, v in self.values.items()}

    def check(self, w: walfs.Wal) -> None:
        for t, vals in self.values.items():
            hwm = w.info(t).high_watermark
            assert self.durable.get(t, 0) <= hwm <= len(vals), (t, hwm)
            assert hwm in self.batch_end[t], f"{t}: {hwm} is inside a batch"
            got = w.read(t, 0, max_records=1 << 20, max_bytes=1 << 30)
            assert got == vals[:hwm], t
            # What the crash took is forgotten: the next appends continue from hwm.
            del vals[hwm:]
            self.batch_end[t] = {e for e in self.batch_end[t] if e <= hwm}
        assert w.engine.verify() == []


@pytest.mark.parametrize("seed", range(24))
def test_power_loss_keeps_every_synced_record_and_whole_batches(wal_dir, seed):
    rng = random.Random(seed)
    fsync = ["never", "always", "interval"][seed % 3]
    model = Model()
    topics = ["a", "b", "c"]
    for _cycle in range(3):
        w = walfs.Wal(wal_dir, fsync=fsync, fsync_interval_ms=1000, test_mode=True, **SMALL)
        model.check(w)
        for _ in range(rng.randrange(5, 40)):
            t = rng.choice(topics)
            n = rng.choice([1, 3, 40, 300])
            vals = [payload(t, rng.randrange(10**6), rng.randrange(0, 700)) for _ in range(n)]
            w.append(t, vals)
            model.append(t, vals)
            if fsync == "always":
                model.synced()
            elif rng.random() < 0.2:
                w.sync()
                model.synced()
        debug.power_cut(w, seed=rng.randrange(1 << 30), keep_permille=rng.choice([0, 300, 700, 1000]))
    w = walfs.Wal(wal_dir, test_mode=True, **SMALL)
    model.check(w)
    w.close()


def test_power_loss_in_the_middle_of_a_huge_batch(wal_dir):
    w = walfs.Wal(wal_dir, fsync="never", test_mode=True, **SMALL)
    w.append("t", [b"keep"] * 10)
    w.sync()
    # A batch over many blocks and segments, of which a random part reaches the disk.
    w.append("t", [b"x" * 900] * 5000)
    debug.power_cut(w, seed=7, keep_permille=500)
    w = walfs.Wal(wal_dir, **SMALL)
    assert w.info("t").high_watermark == 10
    assert w.read("t", 0, max_records=100) == [b"keep"] * 10
    assert w.engine.report()["cut_records"] >= 0
    w.append("t", b"next")
    w.close()
    w = walfs.Wal(wal_dir, **SMALL)
    assert w.read("t", 9, max_records=5) == [b"keep", b"next"]
    w.close()


# --------------------------------------------------------------------------- damage


def crash_after(w: walfs.Wal) -> None:
    """A process crash: every write stays (page cache), nothing more is synced."""
    debug.power_cut(w, seed=1, keep_permille=1000)


def test_torn_tail_is_cut_and_never_comes_back(open_wal, wal_dir):
    # Only records above the durable frontier can be a torn tail: the last one was never
    # synced (a synced record damaged the same way is reported: test_wal_damage.py).
    w = open_wal(test_mode=True, fsync="never")
    w.append("t", [b"rec-%04d" % i for i in range(99)])
    w.sync()
    w.append("t", b"LAST-RECORD-PAYLOAD")
    crash_after(w)
    path, pos = find(wal_dir, b"LAST-RECORD-PAYLOAD")
    poke(path, pos + 10, b"\0\0\0")  # the tail write was torn
    w = open_wal()
    assert w.info("t").high_watermark == 99
    assert w.engine.report()["cut_records"] == 1
    assert w.append("t", b"replacement") == 99
    w.close()
    w = open_wal()
    assert w.read("t", 98) == [b"rec-0098", b"replacement"]


def test_torn_record_header_in_active_block(open_wal, wal_dir):
    w = open_wal(test_mode=True, fsync="never")
    for i in range(20):
        w.append("t", b"value-%02d" % i)
        if i == 14:
            w.sync()  # records 15.. were never synced: a crash may tear them
    crash_after(w)
    path, pos = find(wal_dir, b"value-15")
    flip(path, pos - 20)  # inside record 15's header
    w = open_wal()
    assert w.info("t").high_watermark == 15
    assert w.read("t", 14) == [b"value-14"]


def fill_blocks(w: walfs.Wal, n: int = 600) -> list[bytes]:
    vals = [b"sealed-%05d-" % i + b"p" * 200 for i in range(n)]
    for i in range(0, n, 50):
        w.append("t", vals[i : i + 50])
    return vals


@pytest.mark.parametrize("where", ["header", "payload"])
def test_flipped_byte_in_sealed_block_is_reported_on_read(open_wal, wal_dir, where):
    w = open_wal()
    vals = fill_blocks(w)
    w.close()
    path, pos = find(wal_dir, b"sealed-00010-")
    flip(path, pos - 12 if where == "header" else pos + 50)
    w = open_wal()
    assert w.info("t").high_watermark == len(vals)
    with pytest.raises(walfs.CorruptRecordError, match="offset 10"):
        w.read("t", 10)
    assert w.read("t", 0, max_records=20) == vals[:10]  # the good ones before it
    assert w.read("t", 11, max_records=5) == vals[11:16]
    # The byte view checks CRCs four records at a time: a range that reaches the bad
    # record (third in its group of four) fails whole, from any start before it (never a
    # short read, which the mount would pass on as the end of the file), and a range
    # that ends right before it is served whole.
    view = b"".join(v + b"\n" for v in vals)
    bad_at = sum(len(v) + 1 for v in vals[:10])
    for start in (0, 3, bad_at - len(vals[9]) - 1, bad_at - 1):
        with pytest.raises(walfs.CorruptRecordError, match="offset 10"):
            w.read_bytes("t", start, len(view))
        assert w.read_bytes("t", start, bad_at - start) == view[start:bad_at]
    with pytest.raises(walfs.CorruptRecordError):
        w.read_bytes("t", bad_at, 100)
    after = bad_at + len(vals[10]) + 1
    assert w.read_bytes("t", after, 5000) == view[after : after + 5000]
    assert [(t, off) for t, _p, off, _w in w.engine.verify()] == [("t", 10)]
    w.close()
    fsck = subprocess.run([PYTHON, "-m", "walfs", "fsck", wal_dir], capture_output=True, text=True, cwd=REPO)
    assert fsck.returncode == 1 and "offset 10" in fsck.stdout


def test_zeroed_region_in_the_middle_is_reported(open_wal, wal_dir):
    w = open_wal()
    vals = fill_blocks(w)
    w.close()
    path, pos = find(wal_dir, b"sealed-00100-")
    poke(path, pos, b"\0" * 4096)
    w = open_wal()
    bad = sorted(off for _t, _p, off, _w in w.engine.verify())
    assert bad and bad[0] == 100 and len(bad) >= 10
    for off in bad:
        with pytest.raises(walfs.CorruptRecordError):
            w.read("t", off, max_records=1)
    good = [i for i in range(len(vals)) if i not in bad]
    for off in good[::37]:
        assert w.read("t", off, max_records=1) == [vals[off]]


def test_lost_block_header_before_sealed_data_is_reported(open_wal, wal_dir):
    w = open_wal()
    fill_blocks(w, 2000)
    w.close()
    path, pos = find(wal_dir, b"sealed-00700-")
    # Walk back to the start of the block run holding record 700 and wipe its header.
    block = SMALL["block_size"]
    run_start = 4096 + ((pos - 4096) // block) * block
    poke(path, run_start, b"\0" * 128)
    with pytest.raises(walfs.WalCorruptError):
        walfs.Wal(wal_dir, **SMALL)
    fsck = subprocess.run([PYTHON, "-m", "walfs", "fsck", wal_dir], capture_output=True, text=True, cwd=REPO)
    assert fsck.returncode == 2


def test_reopen_after_clean_close_verifies_only_tails(open_wal):
    w = open_wal()
    fill_blocks(w, 2000)
    w.close()
    w = open_wal()
    report = w.engine.report()
    assert report["records"] == 2000
    assert report["verified_records"] < 500  # sealed runs are trusted, not re-read
    assert report["cut_records"] == 0


def test_crash_during_segment_creation(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.close()
    # A segment file whose creation never finished (no durable header).
    with open(os.path.join(wal_dir, "seg-00000000000000ff.wal"), "wb") as f:
        f.truncate(SMALL["segment_size"])
    w = open_wal()
    assert w.read("t", 0) == [b"x"]
    assert not os.path.exists(os.path.join(wal_dir, "seg-00000000000000ff.wal"))
    w.append("t", [b"y" * 1000] * 3000)
    w.close()
    assert open_wal().info("t").high_watermark == 3001
