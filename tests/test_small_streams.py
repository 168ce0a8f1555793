"""Issue 35: a stream costs what it holds. A stream's first runs are small (4 KiB, then 4x
larger per run) and live in carved blocks; a stream that grows gets block runs. These tests
use real files: many small streams beside big ones, bytes on disk, SIGKILL and power cuts,
trims and reclamation, a damaged carve header, a full disk."""

import errno
import logging
import os
import random
import signal
import struct
import subprocess
import sys
import time

import pytest
from conftest import PYTHON, REPO, payload

import walfs
from walfs.local import debug

# Blocks of 1 MiB: classes of 4, 16, 64 and 256 KiB, then block runs.
GEO = {"segment_size": 16 << 20, "block_size": 1 << 20}
SEG_HDR, CARVE_OFF = 4096, 128


def du(d: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(d):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def segs(d: str) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.startswith("seg-"))


def test_many_small_streams_mixed_with_big_ones_read_back_byte_for_byte(wal_dir):
    rng = random.Random(35)
    w = walfs.Wal(wal_dir, fsync="never", **GEO)
    want: dict[str, list[bytes]] = {}
    small = [f"s{i}" for i in range(400)]
    big = ["big0", "big1", "big2"]
    for _rnd in range(6):
        for t in small:
            n = rng.choice([1, 1, 1, 2, 5])
            recs = [payload(t, len(want.get(t, [])) + k) for k in range(n)]
            if n == 1:
                w.append(t, recs[0])
            else:
                w.append(t, recs)
            want.setdefault(t, []).extend(recs)
        for t in big:  # ~0.6 MB per round each: through every class into block runs
            have = len(want.get(t, []))
            recs = [payload(t, have + k, size=rng.choice([10, 700, 5000])) for k in range(300)]
            w.append(t, recs)
            want.setdefault(t, []).extend(recs)
    big_record = b"B" * 300_000  # larger than the 64 KiB class: the class that holds it
    w.append("s7", big_record)
    want["s7"].append(big_record)

    def check(w: walfs.Wal) -> None:
        for t, recs in want.items():
            assert w.info(t).high_watermark == len(recs), t
            assert w.read(t, 0, max_records=len(recs) + 1) == recs, t

    check(w)
    w.close()
    w = walfs.Wal(wal_dir, **GEO)
    check(w)
    w.append("s0", b"after")  # appends go on after the reopen
    want["s0"].append(b"after")
    w.close()
    w = walfs.Wal(wal_dir, read_only=True)
    check(w)
    w.close()


def test_a_one_record_stream_costs_a_few_kib(tmp_path):
    """The goal: at most 8 KiB of disk per one-record stream beyond its records (the data
    directory's du, catalog and cursor manifest included)."""
    d = str(tmp_path / "wal")
    n = 3000
    w = walfs.Wal(d, fsync="never", **GEO)
    for i in range(n):
        w.append(f"topic-{i}", b"hello")
    w.close()
    per_stream = du(d) / n
    assert per_stream <= 8192, per_stream
    w = walfs.Wal(d, read_only=True)
    assert w.read("topic-2999", 0) == [b"hello"]
    w.close()


def test_the_default_geometry_also_keeps_one_record_streams_small(tmp_path):
    d = str(tmp_path / "wal")
    w = walfs.Wal(d, fsync="never", segment_size=1 << 30, block_size=10 << 20)
    for i in range(300):  # issue 35: 3.1 GB on main
        w.append(f"t{i}", b"x" * 5)
    w.close()
    assert du(d) < 12 << 20  # one carved 10 MiB block (and headers), not 300 blocks


def written_extents_reported(path: str) -> bool:
    """Whether the file system tells written from unwritten extents (FIEMAP: ext4, xfs;
    tmpfs does not)."""
    import fcntl

    buf = bytearray(32 + 56 * 8)
    struct.pack_into("=QQIIII", buf, 0, 0, os.path.getsize(path), 0, 0, 8, 0)
    try:
        with open(path, "rb") as f:
            fcntl.ioctl(f.fileno(), 0xC020660B, buf)  # FS_IOC_FIEMAP
    except OSError:
        return False
    return True


def mapped_kib(path: str) -> int:
    """KiB of `path` this process has mapped and resident (its mappings' Rss)."""
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if not line[0].isupper():  # a mapping's first line: address range, ..., path
                ours = line.rstrip().endswith(path)
            elif ours and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def test_a_warm_open_reads_only_the_slots_ever_written(tmp_path):
    """After a clean close, a writer's open reads the slots a file system extent says were
    written, not every slot whose page of zeros sits in the page cache (docs/format.md,
    "Small runs": a writer's mapping pulls never-written slots into the cache around the
    pages it writes, and SEEK_DATA reports those as data)."""
    d = str(tmp_path / "wal")
    block = 10 << 20
    with walfs.Wal(d, fsync="never", segment_size=1 << 30, block_size=block) as w:
        w.append("one", b"x")  # slot 0 of a 4 KiB-class block: 2,560 slots
    seg = os.path.join(d, segs(d)[0])
    if not written_extents_reported(seg):
        pytest.skip("the file system does not report written extents (FIEMAP)")
    with open(seg, "rb") as f:  # every page of the carved block in the cache, as zeros
        f.seek(SEG_HDR)
        f.read(block)
    with walfs.Wal(d) as w:
        assert w.read("one", 0) == [b"x"]
        # A page fault maps its neighbours already cached (fault-around, 64 KiB): a probe
        # of every slot would have mapped the block's 10 MiB twice over.
        assert mapped_kib(seg) < 1024, mapped_kib(seg)


def carved_blocks(d: str, block_size: int) -> list[tuple[str, int, int]]:
    """(file, block, class size) of every block whose carve header is there (magic, kind)."""
    out = []
    for name in segs(d):
        with open(os.path.join(d, name), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for i in range((size - SEG_HDR) // block_size):
                f.seek(SEG_HDR + i * block_size + CARVE_OFF)
                h = f.read(128)
                if h[:8] == b"WALFSBLK" and struct.unpack_from("<HH", h, 8) == (2, 4):
                    out.append((name, i, struct.unpack_from("<Q", h, 96)[0]))
    return out


def test_a_growing_stream_passes_through_the_classes_into_block_runs(wal_dir):
    w = walfs.Wal(wal_dir, fsync="never", **GEO)
    recs = [payload("g", k, size=1000) for k in range(3000)]  # ~3 MB
    for k in range(0, 3000, 10):
        w.append("g", recs[k : k + 10])
    w.close()
    classes = sorted({c for _f, _i, c in carved_blocks(wal_dir, GEO["block_size"])})
    assert classes == [4096, 16384, 65536, 262144]
    w = walfs.Wal(wal_dir, read_only=True)
    assert w.read("g", 0, max_records=5000) == recs
    w.close()


def test_a_damaged_carve_header_is_rebuilt_from_its_first_run(wal_dir, caplog):
    w = walfs.Wal(wal_dir, fsync="always", **GEO)
    for i in range(50):
        w.append(f"t{i}", payload(f"t{i}", 0))
    w.close()
    [(name, i, cls)] = carved_blocks(wal_dir, GEO["block_size"])
    assert cls == 4096
    with open(os.path.join(wal_dir, name), "r+b") as f:
        f.seek(SEG_HDR + i * GEO["block_size"] + CARVE_OFF + 40)
        f.write(b"\xff")  # one flipped byte: the carve header fails its crc
    assert carved_blocks(wal_dir, GEO["block_size"]) == [(name, i, 4096)]  # magic and kind still there
    with caplog.at_level(logging.WARNING, logger="walfs"):
        w = walfs.Wal(wal_dir, **GEO)
    assert "carve header damaged" in caplog.text
    for k in range(50):
        assert w.read(f"t{k}", 0) == [payload(f"t{k}", 0)]
    w.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="walfs"):
        w = walfs.Wal(wal_dir, **GEO)
    assert "carve header" not in caplog.text  # rewritten by the first open
    w.close()


def test_a_run_header_on_disk_without_its_carve_header_is_never_taken_for_a_run(wal_dir, caplog):
    """A carve header is written but not synced on its own (allocator.c carve_block): the
    kernel may write a later slot's run header back without it, for a run no sync
    promised. After the power cut recovery sees a free block (nothing promised is lost);
    carved again for the same class, the block's new carve id keeps the stale headers out."""
    w = walfs.Wal(wal_dir, fsync="never", test_mode=True, **GEO)
    for k in range(6):
        w.append(f"s{k}", b"never synced %d" % k)  # slots 0..5 of one carved block
    [(name, blk, cls)] = carved_blocks(wal_dir, GEO["block_size"])
    debug.power_cut(w, seed=3, keep_permille=1000)  # every page kept ...
    with open(os.path.join(wal_dir, name), "r+b") as f:  # ... but the carve header's page
        f.seek(SEG_HDR + blk * GEO["block_size"])  # (and slot 0's run, in the same sector)
        f.write(bytes(4096))
    assert carved_blocks(wal_dir, GEO["block_size"]) == []
    w = walfs.Wal(wal_dir, fsync="never", **GEO)
    assert [w.info(f"s{k}").high_watermark for k in range(6)] == [0] * 6
    w.append("fresh", b"after the cut")  # the block is carved again, for the same class
    assert carved_blocks(wal_dir, GEO["block_size"]) == [(name, blk, cls)]
    w.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="walfs"):
        w = walfs.Wal(wal_dir, **GEO)  # slots 1..5 still hold the old carve's headers
    assert [w.info(f"s{k}").high_watermark for k in range(6)] == [0] * 6
    assert w.read("fresh", 0) == [b"after the cut"]
    w.append("s3", b"s3 again")
    assert w.read("s3", 0, max_records=5) == [b"s3 again"]
    assert not caplog.records, caplog.text
    w.close()


def test_a_directory_of_block_runs_in_whole_preallocated_segments_opens_as_it_is(wal_dir):
    """What format version 3 wrote before small runs joined it (and versions 1 and 2):
    block runs only, segment files fallocate()d whole. Read as they are; new streams get
    small runs beside them; nothing is reported."""
    w = walfs.Wal(wal_dir, fsync="never", **GEO)
    big = b"B" * 300_000  # larger than the largest class (256 KiB here): block runs from the start
    for k in range(6):
        w.append(f"old{k}", [big, payload(f"old{k}", 1)])
    w.close()
    assert carved_blocks(wal_dir, GEO["block_size"]) == []
    for name in segs(wal_dir):
        fd = os.open(os.path.join(wal_dir, name), os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)  # as older releases made them
        finally:
            os.close(fd)
    w = walfs.Wal(wal_dir, fsync="never", **GEO)
    assert w.engine.report()["metadata_damaged"] == 0 and w.engine.report()["cut_records"] == 0
    for k in range(6):
        assert w.read(f"old{k}", 0, max_records=5) == [big, payload(f"old{k}", 1)]
        w.append(f"new{k}", payload(f"new{k}", 0))
    w.close()
    assert carved_blocks(wal_dir, GEO["block_size"])  # the new streams' small runs
    w = walfs.Wal(wal_dir, read_only=True)
    for k in range(6):
        assert w.read(f"old{k}", 0, max_records=5) == [big, payload(f"old{k}", 1)]
        assert w.read(f"new{k}", 0) == [payload(f"new{k}", 0)]
    w.close()


def test_a_stream_appended_a_little_each_session_keeps_to_the_class_it_needs(wal_dir):
    """A writer's open starts new runs (a new epoch's gids do not fit an older run's slots).
    A stream given one record a session takes a 4 KiB run each session, not the next class
    each time (after five sessions that was a block per session); a stream that fills its
    runs still climbs the classes within a session."""
    for n in range(8):
        w = walfs.Wal(wal_dir, fsync="never", **GEO)
        for k in range(50):
            w.append(f"t{k}", payload(f"t{k}", n))
        w.append("grows", [payload("grows", n * 1000 + j, size=500) for j in range(1000)])
        w.close()
    classes = sorted({c for _f, _i, c in carved_blocks(wal_dir, GEO["block_size"])})
    assert classes == [4096, 16384, 65536, 262144]  # "grows" climbs; the small ones stay at 4 KiB
    # 50 streams x 8 runs of 4 KiB: two carved 1 MiB blocks of that class (256 slots each)
    assert len([c for _f, _i, c in carved_blocks(wal_dir, GEO["block_size"]) if c == 4096]) == 2
    w = walfs.Wal(wal_dir, read_only=True)
    for k in range(50):
        assert w.read(f"t{k}", 0, max_records=20) == [payload(f"t{k}", n) for n in range(8)]
    assert w.info("grows").high_watermark == 8000
    w.close()


def test_trimmed_small_streams_let_their_segment_go(wal_dir):
    geo = {"segment_size": 1 << 20, "block_size": 64 << 10}  # 15 blocks: classes 4 and 16 KiB
    w = walfs.Wal(wal_dir, fsync="never", reclaim_interval_s=3600, **geo)
    small = [f"s{i}" for i in range(300)]  # 300 x 4 KiB: more than one segment (240 slots)
    for t in small:
        w.append(t, payload(t, 0))
    w.append("s0", [payload("s0", k) for k in range(1, 200)])  # s0 grows into a 16 KiB run and more
    first = segs(wal_dir)
    assert len(first) >= 2
    w.sync()
    for t in small:
        w.trim(t, w.info(t).high_watermark)
    assert w.engine.reclaim() >= 1
    left = segs(wal_dir)
    assert first[0] not in left
    for t in small:  # the offsets go on where they were
        hwm = w.info(t).high_watermark
        assert w.append(t, b"next") == hwm
    w.close()
    w = walfs.Wal(wal_dir, **geo)
    assert w.read("s0", 200) == [b"next"]
    assert w.read("s5", 1) == [b"next"]
    w.close()


WRITER = r"""
import random, sys
sys.path[:0] = [sys.argv[4], sys.argv[5]]
from conftest import payload
import walfs
path, fsync, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
w = walfs.Wal(path, fsync=fsync, fsync_interval_ms=20, segment_size=1 << 20, block_size=64 << 10)
topics = [f"t{i}" for i in range(60)]
nxt = {t: w.info(t).high_watermark for t in topics}
print("ready", flush=True)
while True:
    t = rng.choice(topics)
    n = rng.choice([1, 1, 1, 3, 40, 200])
    print(f"will {t} {n}", flush=True)
    if n == 1:
        first = w.append(t, payload(t, nxt[t]))
    else:
        first = w.append(t, [payload(t, nxt[t] + i) for i in range(n)])
    assert first == nxt[t]
    nxt[t] += n
    print(f"done {t} {first} {n}", flush=True)
"""


@pytest.mark.parametrize("fsync", ["always", "interval"])
def test_sigkill_at_random_points_over_many_small_streams(wal_dir, fsync):
    here = os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(fsync)
    acked: dict[str, int] = {}
    for rnd in range(6):
        proc = subprocess.Popen(
            [PYTHON, "-c", WRITER, wal_dir, fsync, str(rnd), here, str(REPO)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("ready"), proc.stderr.read() if proc.stderr else ""
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        lines = proc.stdout.read().splitlines()
        proc.wait(timeout=60)
        in_flight: dict[str, int] = {}
        done = dict(acked)
        for line in lines:
            p = line.split()
            if p[0] == "will":
                in_flight = {p[1]: int(p[2])}
            elif p[0] == "done":
                assert int(p[2]) == done.get(p[1], 0)
                done[p[1]] = int(p[2]) + int(p[3])
                in_flight = {}
        w = walfs.Wal(wal_dir, segment_size=1 << 20, block_size=64 << 10)
        for t in set(done) | set(in_flight) | set(acked):
            hwm = w.info(t).high_watermark
            n = done.get(t, 0)
            # Every acknowledged record is there (a SIGKILL loses nothing the page cache
            # holds, whatever the fsync policy); of the batch in flight, all or nothing.
            assert hwm in (n, n + in_flight.get(t, 0)), (t, hwm, n, in_flight)
            assert w.read(t, 0, max_records=hwm + 1) == [payload(t, k) for k in range(hwm)], t
            acked[t] = hwm
        w.close()


@pytest.mark.parametrize("seed", range(4))
def test_power_cuts_over_small_and_big_streams(wal_dir, seed):
    rng = random.Random(seed)
    geo = {"segment_size": 1 << 20, "block_size": 64 << 10}
    durable: dict[str, int] = {}
    for rnd in range(3):
        w = walfs.Wal(wal_dir, fsync="never", test_mode=True, reclaim_interval_s=3600, **geo)
        for t, n in durable.items():
            assert w.info(t).high_watermark >= n, t
            durable[t] = w.info(t).high_watermark
            assert w.read(t, 0, max_records=n) == [payload(t, k) for k in range(n)], t
        for _step in range(40):
            t = f"t{rng.randrange(80)}" if rng.random() < 0.9 else "big"
            base = w.info(t).high_watermark
            n = rng.choice([1, 2, 30]) if t != "big" else 300
            w.append(t, [payload(t, base + k) for k in range(n)])
            if rng.random() < 0.3:
                w.sync()
                durable = {x: w.info(x).high_watermark for x in set(durable) | {t}}
        debug.power_cut(w, seed=seed * 10 + rnd, keep_permille=rng.choice([0, 500, 1000]))
    w = walfs.Wal(wal_dir, **geo)
    for t, n in durable.items():
        assert w.info(t).high_watermark >= n
        assert w.read(t, 0, max_records=n) == [payload(t, k) for k in range(n)]
    w.close()


def tmpfs(path: str, size: str) -> None:
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)


def test_a_full_disk_is_enospc_when_a_run_is_reserved(tmp_path):
    """Blocks are reserved (fallocate) before a run or a carve takes them: many small streams
    fill a small file system to ENOSPC at a run's allocation, nothing torn, no SIGBUS; every
    acknowledged record reads back after a reopen, and appends go on once there is room."""
    mnt = str(tmp_path / "small")
    tmpfs(mnt, "3m")
    try:
        d = os.path.join(mnt, "wal")
        w = walfs.Wal(d, fsync="never", segment_size=1 << 20, block_size=64 << 10)
        acked: dict[str, int] = {}
        with pytest.raises(walfs.WalIOError) as e:
            for i in range(100_000):
                t = f"t{i % 2000}"
                w.append(t, payload(t, acked.get(t, 0), size=200))
                acked[t] = acked.get(t, 0) + 1
        assert e.value.errno == errno.ENOSPC
        assert len(acked) > 200
        w.close()
        w = walfs.Wal(d)
        for t, n in acked.items():
            assert w.read(t, 0, max_records=n + 1) == [payload(t, k, size=200) for k in range(n)], t
        w.close()
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def idle_and_big(wal_dir: str, **kw: object) -> walfs.Wal:
    """An idle one-record stream in segment 1, beside a big stream that fills segment 1 and
    more and is then trimmed to its end: only the idle stream's small run pins segment 1."""
    geo = {"segment_size": 1 << 20, "block_size": 64 << 10}
    w = walfs.Wal(wal_dir, fsync="never", reclaim_interval_s=3600, **geo, **kw)  # type: ignore[arg-type]
    w.append("idle", payload("idle", 0))
    w.append("idle2", [payload("idle2", k) for k in range(3)])
    for k in range(0, 3000, 100):
        w.append("big", [payload("big", k + j, size=1000) for j in range(100)])
    w.sync()
    w.trim("big", 3000)
    return w


def test_an_idle_small_stream_is_moved_and_its_segment_reclaimed(wal_dir, caplog):
    w = idle_and_big(wal_dir)
    first = segs(wal_dir)[0]
    with caplog.at_level(logging.INFO, logger="walfs"):
        assert w.engine.reclaim() >= 1
    assert "cleaner: copied 2 small runs" in caplog.text
    assert first not in segs(wal_dir)
    assert w.read("idle", 0) == [payload("idle", 0)]
    assert w.read("idle2", 0, max_records=5) == [payload("idle2", k) for k in range(3)]
    assert w.append("idle", b"next") == 1  # the copy takes appends, at the same offsets
    assert w.append("idle2", [b"a", b"b"]) == 3
    w.close()
    for ro in (False, True):
        w = walfs.Wal(wal_dir, read_only=ro)
        assert w.read("idle", 0, max_records=5) == [payload("idle", 0), b"next"]
        assert w.read("idle2", 0, max_records=9) == [payload("idle2", k) for k in range(3)] + [b"a", b"b"]
        w.close()


def test_a_cleaner_cut_before_its_segment_gone_entry_keeps_the_originals(wal_dir, caplog):
    """The copies are durable, the SEGMENT_GONE entry is not (a power cut between): the
    next open drops the copies and reads the originals; nothing lost, nothing doubled."""
    w = idle_and_big(wal_dir, test_mode=True)
    first = segs(wal_dir)[0]
    debug.inject_fault(w, "reclaim", errno.EIO)
    with pytest.raises(walfs.WalError):
        w.engine.reclaim()
    debug.power_cut(w, seed=7, keep_permille=0)  # the zeroing of the copies undone too
    with caplog.at_level(logging.WARNING, logger="walfs"):
        w = walfs.Wal(wal_dir, reclaim_interval_s=3600)
    assert caplog.text.count("whose original is still in force") == 2  # the two copies, dropped
    assert first in segs(wal_dir)
    assert w.read("idle", 0, max_records=5) == [payload("idle", 0)]
    assert w.read("idle2", 0, max_records=5) == [payload("idle2", k) for k in range(3)]
    assert w.append("idle", b"next") == 1
    w.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="walfs"):
        w = walfs.Wal(wal_dir, reclaim_interval_s=3600)
    assert "still in force" not in caplog.text  # dropped for good by the first open
    assert w.read("idle", 0, max_records=5) == [payload("idle", 0), b"next"]
    assert w.engine.reclaim() >= 1  # a later round moves them and reclaims
    assert first not in segs(wal_dir)
    w.close()
    w = walfs.Wal(wal_dir)
    assert w.read("idle", 0, max_records=5) == [payload("idle", 0), b"next"]
    assert w.read("idle2", 0, max_records=5) == [payload("idle2", k) for k in range(3)]
    w.close()


@pytest.mark.parametrize("keep", [0, 500, 1000])
def test_a_power_cut_after_the_cleaner_keeps_every_record_once(wal_dir, keep):
    w = idle_and_big(wal_dir, test_mode=True)
    assert w.engine.reclaim() >= 1
    w.append("idle", b"late")  # not synced
    debug.power_cut(w, seed=keep, keep_permille=keep)
    w = walfs.Wal(wal_dir)
    got = w.read("idle", 0, max_records=5)
    assert got in ([payload("idle", 0)], [payload("idle", 0), b"late"])
    assert w.read("idle2", 0, max_records=5) == [payload("idle2", k) for k in range(3)]
    w.close()


@pytest.mark.parametrize("keep", [0, 500, 1000])
def test_a_cleaner_cut_before_its_copies_are_durable_keeps_the_originals(wal_dir, keep):
    """The sync that makes the copies durable fails (the WAL fails, as on any failed
    fsync), then the power goes: whatever part of the copies reached the disk, the originals
    are in force and every record reads back once."""
    w = idle_and_big(wal_dir, test_mode=True)
    first = segs(wal_dir)[0]
    debug.inject_fault(w, "sync", errno.EIO)
    with pytest.raises(walfs.WalError):
        w.engine.reclaim()
    debug.power_cut(w, seed=keep + 1, keep_permille=keep)
    w = walfs.Wal(wal_dir, reclaim_interval_s=3600)
    assert first in segs(wal_dir)
    assert w.read("idle", 0, max_records=5) == [payload("idle", 0)]
    assert w.read("idle2", 0, max_records=5) == [payload("idle2", k) for k in range(3)]
    assert w.engine.reclaim() >= 1
    assert first not in segs(wal_dir)
    assert w.append("idle", b"next") == 1
    w.close()
    w = walfs.Wal(wal_dir, read_only=True)
    assert w.read("idle", 0, max_records=5) == [payload("idle", 0), b"next"]
    w.close()
