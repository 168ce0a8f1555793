"""Damage in the C core (issue 9, findings 2-5): damaged files are reported, never
repaired by dropping durable data, and never kill the process. Small geometry
(segment_size=1 MiB, block_size=64 KiB). Tests that could die of a signal on broken code
run the damaged WAL in a child process and assert on its exit status."""

import os
import subprocess
import sys
import textwrap

import pytest
from catalog_files import MIRROR, both, to_legacy
from conftest import SMALL, payload, stream_key
from frontier_files import as_an_older_writers, seeded_crc

import walfs
from walfs.engine.rules import committed_offsets
from walfs.local import debug

SEG_HDR = 4096
BLOCK = SMALL["block_size"]
CAT = "streams.cat"


def seg_name(n: int) -> str:
    return f"seg-{n:016x}.wal"


def flip(path: str, offset: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))


def run_child(wal_dir: str, body: str) -> subprocess.CompletedProcess[str]:
    """Runs `body` with `w` opened on wal_dir in a fresh interpreter; prints what it saw."""
    script = textwrap.dedent(
        """
        import os, sys, walfs
        try:
            w = walfs.Wal(sys.argv[1], segment_size=1 << 20, block_size=64 << 10)
        except walfs.WalError as e:
            print("OPEN", type(e).__name__, e)
            sys.exit(0)
        """
    ) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script, wal_dir], capture_output=True, text=True, timeout=120
    )


# -- finding 2: the catalog ---------------------------------------------------------


def cat_entries(path: str) -> list[tuple[int, int, int]]:
    """(offset, type, length) of each catalog entry."""
    data = open(path, "rb").read()
    out, pos = [], 64
    while pos + 8 <= len(data):
        typ = int.from_bytes(data[pos + 4 : pos + 6], "little")
        ln = int.from_bytes(data[pos + 6 : pos + 8], "little")
        out.append((pos, typ, ln))
        pos += ln
    return out


def test_flipped_bit_in_a_catalog_entry_that_is_not_the_last(open_wal, wal_dir):
    w = open_wal()
    for t in ("a", "b", "c"):
        w.append(t, t.encode() * 10)
    w.close()
    path = os.path.join(wal_dir, CAT)
    first_define = next(off for off, typ, _ in cat_entries(path) if typ == 1)
    both(wal_dir, lambda p: flip(p, first_define + 20))  # one copy: healed (test_metadata_heal_catalog.py)
    before = open(path, "rb").read()
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert CAT in str(exc.value) and f"byte {first_define}" in str(exc.value)
    assert MIRROR in str(exc.value)
    assert open(path, "rb").read() == before  # never truncated nor rewritten
    both(wal_dir, lambda p: flip(p, first_define + 20))
    w = open_wal()
    assert [w.read(t, 0) for t in ("a", "b", "c")] == [[b"a" * 10], [b"b" * 10], [b"c" * 10]]


def test_torn_last_catalog_entry_is_cut(open_wal, wal_dir):
    w = open_wal()
    w.append("a", b"x")
    w.close()
    path = os.path.join(wal_dir, CAT)
    size = os.path.getsize(path)
    with open(path, "ab") as f:  # half of an entry, as a crash mid-append leaves it
        f.write(b"\x12\x34\x56\x78\x01\x00\x40\x00" + b"\x00" * 20)
    w = open_wal()
    assert w.read("a", 0) == [b"x"]
    w.close()
    assert os.path.getsize(path) > size  # the torn bytes went; new OPEN entries came


def test_bad_catalog_entry_followed_by_valid_ones_is_damage_even_near_the_end(open_wal, wal_dir):
    w = open_wal()
    w.append("a", b"x")
    w.append("b", b"y")
    w.close()
    path = os.path.join(wal_dir, CAT)
    entries = cat_entries(path)
    off, _, _ = entries[-2]  # the last entry after it is valid: not a torn tail
    both(wal_dir, lambda p: flip(p, off + 9))
    with pytest.raises(walfs.WalCorruptError, match=f"byte {off}"):
        open_wal()


# -- finding 3: segment headers -----------------------------------------------------


def test_flipped_byte_in_newest_segment_header_is_reported_not_deleted(open_wal, wal_dir):
    w = open_wal(fsync="always")
    for i in range(50):
        w.append("t", b"record %d" % i)
    w.close()
    to_legacy(wal_dir, 2)  # a version 3 catalog rebuilds the header (test_metadata_heal_catalog.py)
    seg = os.path.join(wal_dir, seg_name(1))
    flip(seg, 41)  # created_ms
    with pytest.raises(walfs.WalCorruptError, match=seg_name(1)):
        open_wal()
    assert os.path.exists(seg)
    flip(seg, 41)
    w = open_wal()
    assert w.read("t", 0, max_records=100) == [b"record %d" % i for i in range(50)]


def test_segment_header_unreadable_short_file_is_reported(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.close()
    seg = os.path.join(wal_dir, seg_name(1))
    os.truncate(seg, 100)  # not all zero: it held a header
    with pytest.raises(walfs.WalCorruptError, match=seg_name(1)):
        open_wal()
    assert os.path.getsize(seg) == 100


# -- finding 4: bounds and signals --------------------------------------------------


def fill_sealed_runs(open_wal) -> None:
    w = open_wal()
    w.append("t", [bytes([i % 251]) * 200 for i in range(1500)])
    w.close()


def test_rotten_slot_of_a_sealed_run_is_an_error_not_a_signal(open_wal, wal_dir):
    fill_sealed_runs(open_wal)
    seg = os.path.join(wal_dir, seg_name(1))
    rot = min(4096, run_size_at(seg, SEG_HDR) - 1024)  # its headers stay (a small run is 4 KiB)
    with open(seg, "r+b") as f:  # the whole slot area of the first (sealed) run
        f.seek(SEG_HDR + run_size_at(seg, SEG_HDR) - rot)
        f.write(b"\xff" * rot)
    r = run_child(
        wal_dir,
        """
        try:
            n = 0
            while n < 1500:
                got = w.read("t", n, max_records=100)
                n += len(got)
            print("READ", n)
        except walfs.WalError as e:
            print("READ", type(e).__name__, e)
        """,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(("OPEN WalCorruptError", "READ CorruptRecordError")), r.stdout


def test_truncated_segment_is_an_error_at_open_not_sigbus(open_wal, wal_dir):
    fill_sealed_runs(open_wal)
    seg = os.path.join(wal_dir, seg_name(1))
    os.truncate(seg, SEG_HDR + BLOCK + 1000)
    r = run_child(wal_dir, 'print("READ", len(w.read("t", 0, max_records=2000)))')
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OPEN WalCorruptError") and seg_name(1) in r.stdout, r.stdout


def test_truncation_under_an_open_mapping_gives_eio_not_sigbus(wal_dir):
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import errno, os, sys, walfs
                d = sys.argv[1]
                w = walfs.Wal(d, segment_size=1 << 20, block_size=64 << 10)
                w.append("t", [bytes([i % 251]) * 200 for i in range(1500)])
                w.sync()
                os.truncate(os.path.join(d, "seg-0000000000000001.wal"), 4096)
                for attempt in range(2):
                    try:
                        w.read("t", 700, max_records=10)
                        print("NO ERROR")
                    except walfs.WalIOError as e:
                        print("EIO" if e.errno == errno.EIO else "OTHER", e)
                    except walfs.CorruptRecordError as e:
                        print("CORRUPT", e)
                print("ALIVE")
                """
            ),
            wal_dir,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("EIO") and lines[1].startswith("EIO") and lines[-1] == "ALIVE", r.stdout


# -- finding 5: damage in the active run vs a torn tail -----------------------------


def run_size_at(path: str, run: int, block_size: int = BLOCK) -> int:
    """The size of the run whose open header is at file byte `run`: a small run's (header
    version 2) is in its header, a block run's is n_blocks blocks (format.c)."""
    with open(path, "rb") as f:
        f.seek(run)
        h = f.read(128)
    if int.from_bytes(h[8:10], "little") == 2:
        return int.from_bytes(h[96:104], "little")
    return int.from_bytes(h[12:16], "little") * block_size


def record_pos(wal_dir: str, index: int, block: int = 0, block_size: int = BLOCK) -> int:
    """File position of record `index` of the run at (the first slot of) `block` of segment
    1 (from its slot)."""
    run = SEG_HDR + block * block_size
    path = os.path.join(wal_dir, seg_name(1))
    with open(path, "rb") as f:
        f.seek(run + run_size_at(path, run, block_size) - 12 * (index + 1))
        return run + int.from_bytes(f.read(4), "little")


@pytest.mark.parametrize("frontier", ["clean", "an older writer's"])
def test_flipped_bit_in_the_active_run_after_sync_is_reported_not_cut(open_wal, wal_dir, caplog, frontier):
    """Under a clean frontier (this writer's) the open trusts the run's records as it trusts a
    sealed run's: the damaged one is refused by the read that meets it (and named by fsck:
    test_wal_quarantine.py). Under an older writer's frontier the open verifies every record
    and quarantines it. Either way nothing is cut."""
    # 8 KiB blocks have no small-run classes (allocator.c): the stream's one run is a block
    # run, active, holding all 100 records (test_small_streams.py covers small runs).
    w = open_wal(block_size=8192)
    for i in range(100):
        w.append("t", b"record %03d" % i)
    w.sync()
    w.close()
    seg = os.path.join(wal_dir, seg_name(1))
    pos = record_pos(wal_dir, 50, block_size=8192)
    flip(seg, pos + 36 + 3)  # a byte of record 50's value
    if frontier != "clean":
        as_an_older_writers(seg, SEG_HDR)
    before = open(seg, "rb").read()
    with caplog.at_level("ERROR", logger="walfs.core"):
        w = open_wal(read_only=True)
    assert open(seg, "rb").read() == before  # nothing cut or zeroed
    lines = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    report = w.engine.report()
    if frontier == "clean":
        assert lines == [] and report["quarantined"] == 0 and report["verified_records"] == 0
    else:
        [line] = lines
        assert seg_name(1) in line and "offset 50" in line and f"file byte {pos}" in line
        assert report["quarantined"] == 1 and report["verified_records"] == 99
    assert w.info("t").high_watermark == 100
    with pytest.raises(walfs.CorruptRecordError, match="offset 50"):
        w.read("t", 50)
    assert w.read("t", 51, max_records=100) == [b"record %03d" % i for i in range(51, 100)]
    w.close()


def test_torn_tail_after_a_power_cut_is_still_cut(open_wal, wal_dir):
    w = open_wal(test_mode=True, fsync="never")
    for i in range(100):
        w.append("t", b"record %03d" % i)
    w.sync()
    w.sync()  # the frontier written after the first sync is durable too
    w.append("t", [b"late %d" % i for i in range(300)])
    debug.power_cut(w, seed=3, keep_permille=500)
    w = open_wal()
    got = w.read("t", 0, max_records=1000)
    assert got[:100] == [b"record %03d" % i for i in range(100)]
    assert all(g == b"late %d" % i for i, g in enumerate(got[100:]))


def test_frontier_survives_many_sync_rounds_and_reopens(open_wal, wal_dir):
    # Each session starts a new run (runs 0 and 1 get sealed at the next open); the last
    # run, unsealed, holds records 80..119 and its frontier. 8 KiB blocks have no small-run
    # classes: session k's run is block k.
    for round_ in range(3):
        w = open_wal(fsync="always", block_size=8192)
        for i in range(40):
            w.append("t", b"r%d-%d" % (round_, i))
        w.close()
    w = open_wal(block_size=8192)
    assert w.info("t").high_watermark == 120
    w.close()
    flip(os.path.join(wal_dir, seg_name(1)), record_pos(wal_dir, 10, block=2, block_size=8192) + 36)
    w = open_wal(block_size=8192)
    # The frontier, rewritten at every close, is clean: the open reads no record of the run
    # (nothing to verify), and the read that meets the damaged one refuses it.
    assert w.engine.report()["verified_records"] == 0 and w.engine.report()["quarantined"] == 0
    with pytest.raises(walfs.CorruptRecordError, match="offset 90"):
        w.read("t", 90)
    assert w.read("t", 91, max_records=100) == [b"r2-%d" % i for i in range(11, 40)]


def test_core_messages_reach_python_logging(open_wal, wal_dir, caplog):
    w = open_wal()
    w.append("a", b"x")
    w.append("b", b"y")
    w.close()
    path = os.path.join(wal_dir, CAT)
    off = cat_entries(path)[1][0]
    both(wal_dir, lambda p: flip(p, off + 9))
    with caplog.at_level("WARNING", logger="walfs.core"), pytest.raises(walfs.WalCorruptError):
        open_wal()
    hits = [r for r in caplog.records if r.name == "walfs.core" and CAT in r.getMessage()]
    assert hits and hits[0].levelname == "ERROR" and f"byte {off}" in hits[0].getMessage()


def test_zero_header_over_real_runs_is_damage_not_a_crashed_creation(open_wal, wal_dir):
    w = open_wal(fsync="always")
    for i in range(50):
        w.append("t", b"record %d" % i)
    w.close()
    to_legacy(wal_dir, 2)  # a version 3 catalog rebuilds the header (test_metadata_heal_catalog.py)
    seg = os.path.join(wal_dir, seg_name(1))
    with open(seg, "r+b") as f:
        saved = f.read(SEG_HDR)
        f.seek(0)
        f.write(bytes(SEG_HDR))  # the header is gone, but a run header proves data
    with pytest.raises(walfs.WalCorruptError, match=seg_name(1)):
        open_wal()
    assert os.path.getsize(seg) == SMALL["segment_size"]
    with open(seg, "r+b") as f:
        f.write(saved)
    assert open_wal().read("t", 0, max_records=100) == [b"record %d" % i for i in range(50)]


def test_empty_newest_segment_file_from_a_crashed_creation_is_removed(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.close()
    open(os.path.join(wal_dir, seg_name(2)), "wb").close()  # created, nothing written yet
    w = open_wal()
    assert w.read("t", 0) == [b"x"]
    assert not os.path.exists(os.path.join(wal_dir, seg_name(2)))


def test_unreadable_data_under_fsck_is_reported_not_fatal(wal_dir):
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import os, sys, walfs
                d = sys.argv[1]
                w = walfs.Wal(d, segment_size=1 << 20, block_size=64 << 10)
                w.append("t", [b"v" * 200] * 1500)
                w.sync()
                os.truncate(os.path.join(d, "seg-0000000000000001.wal"), 4096)
                problems = w.engine.verify()
                print("VERIFY", problems[0][3] if problems else "nothing found")
                """
            ),
            wal_dir,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout.startswith("VERIFY I/O error"), r.stdout


def test_sigbus_guard_survives_a_handler_installed_later(tmp_path):
    # faulthandler (or any library) taking SIGBUS after a first open: the next open puts
    # the guard back in front, chained to it, so reads still get EIO.
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import errno, faulthandler, os, sys, walfs
                a, b = sys.argv[1], sys.argv[2]
                walfs.Wal(a, segment_size=1 << 20, block_size=64 << 10).close()
                faulthandler.enable()
                w = walfs.Wal(b, segment_size=1 << 20, block_size=64 << 10)
                w.append("t", [b"v" * 200] * 1500)
                w.sync()
                os.truncate(os.path.join(b, "seg-0000000000000001.wal"), 4096)
                try:
                    w.read("t", 700, max_records=10)
                    print("NO ERROR")
                except walfs.WalIOError as e:
                    print("EIO" if e.errno == errno.EIO else "OTHER")
                """
            ),
            str(tmp_path / "a"),
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout.strip() == "EIO", r.stdout


# -- issue 9, the fuzzer's former KNOWN_GAPS: what the catalog and the cursor manifest prove


def tree_bytes(d: str) -> dict[str, bytes]:
    out = {}
    for root, _dirs, names in os.walk(d):
        for n in names:
            if n != "LOCK":
                p = os.path.join(root, n)
                out[os.path.relpath(p, d)] = open(p, "rb").read()
    return out


def run_headers(wal_dir: str) -> list[tuple[str, int, int, int]]:
    """(segment file, file byte, stream, first offset) of every valid-looking run header."""
    out = []
    for name in sorted(os.listdir(wal_dir)):
        if not name.startswith("seg-"):
            continue
        data = open(os.path.join(wal_dir, name), "rb").read()
        for pos in range(SEG_HDR, len(data), BLOCK):
            kind = int.from_bytes(data[pos + 10 : pos + 12], "little")
            if data[pos : pos + 8] == b"WALFSBLK" and kind == 1:
                stream = int.from_bytes(data[pos + 36 : pos + 40], "little")
                out.append((name, pos, stream, int.from_bytes(data[pos + 40 : pos + 48], "little")))
    return out


def three_streams(open_wal) -> None:
    w = open_wal()
    for k in range(5):  # two segment files
        w.append("a", [payload("a", 40 * k + i, 3000) for i in range(40)])
        w.append("b", [payload("b", 40 * k + i, 3000) for i in range(40)])
    w.append("c", [payload("c", i, 100) for i in range(10)])
    w.close()


def test_catalog_cut_at_an_entry_boundary_is_reported(open_wal, wal_dir):
    three_streams(open_wal)
    path = os.path.join(wal_dir, CAT)
    define_c = [off for off, typ, _ in cat_entries(path) if typ == 1][-1]  # the DEFINE of "c"
    whole = {p: open(os.path.join(wal_dir, p), "rb").read() for p in (CAT, MIRROR)}
    both(wal_dir, lambda p: os.truncate(p, define_c))  # whole, shorter copies: every entry before verifies
    before = tree_bytes(wal_dir)
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert "which streams.cat does not define" in str(exc.value), exc.value
    assert tree_bytes(wal_dir) == before  # nothing cut, truncated or rewritten
    fsck = subprocess.run(
        [sys.executable, "-m", "walfs", "fsck", wal_dir], capture_output=True, text=True, timeout=120
    )
    assert fsck.returncode == 2 and "does not define" in fsck.stderr, fsck
    for p, data in whole.items():
        with open(os.path.join(wal_dir, p), "wb") as f:
            f.write(data)
    w = open_wal()
    assert w.read("c", 0, max_records=100) == [payload("c", i, 100) for i in range(10)]


def test_catalog_cut_before_a_segment_entry_is_reported(open_wal, wal_dir):
    three_streams(open_wal)
    path = os.path.join(wal_dir, CAT)
    seg_entries = [off for off, typ, _ in cat_entries(path) if typ == 6]
    assert len(seg_entries) >= 2
    both(wal_dir, lambda p: os.truncate(p, seg_entries[-1]))
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert "is not listed in streams.cat" in str(exc.value), exc.value


def test_deleted_segment_file_is_reported_not_a_shorter_stream(open_wal, wal_dir):
    three_streams(open_wal)
    newest = sorted(n for n in os.listdir(wal_dir) if n.startswith("seg-"))[-1]
    saved = open(os.path.join(wal_dir, newest), "rb").read()
    os.unlink(os.path.join(wal_dir, newest))
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert f"{newest} is missing" in str(exc.value), exc.value
    with open(os.path.join(wal_dir, newest), "wb") as f:
        f.write(saved)
    w = open_wal()
    assert w.info("a").high_watermark == 200 and w.read("a", 199) == [payload("a", 199, 3000)]


def test_zeroed_header_of_a_streams_last_run_is_reported(open_wal, wal_dir):
    three_streams(open_wal)
    name, pos, _stream, first = max((h for h in run_headers(wal_dir) if h[2] == 0), key=lambda h: h[3])
    assert first > 0  # not the stream's only run
    path = os.path.join(wal_dir, name)
    saved = open(path, "rb").read()
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(bytes(4096))  # the open, frontier and seal headers of the run
    before = tree_bytes(wal_dir)
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert "FLOOR" in str(exc.value) and f"from offset {first}" in str(exc.value), exc.value
    assert tree_bytes(wal_dir) == before
    with open(path, "wb") as f:
        f.write(saved)
    assert open_wal().info("a").high_watermark == 200


def test_reclaimed_segment_left_by_a_crash_before_its_unlink_is_deleted(open_wal, wal_dir):
    w = open_wal(reclaim_interval_s=3600)  # this test's reclaim(), not the background pass
    w.append("t", [payload("t", i, 3000) for i in range(600)])
    w.sync()
    first = os.path.join(wal_dir, seg_name(1))
    saved = open(first, "rb").read()
    w.trim("t", 500)
    assert w.engine.reclaim() >= 1 and not os.path.exists(first)
    w.close()
    # The crash: SEGMENT_GONE is in the catalog, the unlink never happened.
    with open(first, "wb") as f:
        f.write(saved)
    r = walfs.Wal(wal_dir, read_only=True, **SMALL)  # ignores it, changes nothing
    assert r.info("t").low_watermark == 500 and os.path.exists(first)
    r.close()
    w = open_wal()
    assert not os.path.exists(first)
    assert (w.info("t").low_watermark, w.info("t").high_watermark) == (500, 600)
    assert w.read("t", 500, max_records=1) == [payload("t", 500, 3000)]


def segment_header(wal_dir: str, seg_id: int) -> bytes:
    """A valid header of segment seg_id, as a creation that synced it would leave."""
    cat = open(os.path.join(wal_dir, CAT), "rb").read(64)
    uuid = int.from_bytes(cat[16:24], "little")
    seg_size, block = SMALL["segment_size"], SMALL["block_size"]
    h = bytearray(64)
    h[0:8] = b"WALFSSEG"
    h[8:12] = (1).to_bytes(4, "little")
    h[12:16] = block.to_bytes(4, "little")
    h[16:24] = seg_size.to_bytes(8, "little")
    h[24:32] = seg_id.to_bytes(8, "little")
    h[32:40] = uuid.to_bytes(8, "little")
    h[40:48] = (1).to_bytes(8, "little")
    h[48:52] = ((seg_size - SEG_HDR) // block).to_bytes(4, "little")
    h[60:64] = seeded_crc((uuid ^ (uuid >> 32)) & 0xFFFFFFFF, bytes(h[:60])).to_bytes(4, "little")
    return bytes(h)


def test_unlisted_newest_segment_without_runs_is_a_crashed_creation(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.close()
    # Created and synced, then the crash before its SEGMENT entry reached the catalog.
    path = os.path.join(wal_dir, seg_name(2))
    with open(path, "wb") as f:
        f.write(segment_header(wal_dir, 2))
        f.truncate(SMALL["segment_size"])
    w = open_wal()
    assert not os.path.exists(path) and w.read("t", 0) == [b"x"]
    w.append("t", [b"y" * 3000] * 600)  # new segments, listed, id 3 on
    w.close()
    assert open_wal().info("t").high_watermark == 601


def test_unlisted_segment_holding_runs_is_reported(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.close()
    # An older, unlisted file with a run in it: only a lost catalog entry explains it.
    w = open_wal()
    w.append("u", [b"y" * 3000] * 400)  # fills seg 1 and creates seg 2
    w.close()
    to_legacy(wal_dir, 2)  # one copy, entries not bound to their place: one can be cut out
    path = os.path.join(wal_dir, CAT)
    entries = cat_entries(path)
    seg2 = [off for off, typ, _ in entries if typ == 6][1]
    data = open(path, "rb").read()
    ln = next(n for off, _t, n in entries if off == seg2)
    with open(path, "wb") as f:  # the SEGMENT entry of seg 2 cut out, the rest kept whole
        f.write(data[:seg2] + data[seg2 + ln :])
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert f"{seg_name(2)} is not listed" in str(exc.value), exc.value


def test_power_cuts_with_new_segments_trims_and_reclaims_never_look_like_damage(wal_dir):
    for seed in range(6):
        w = walfs.Wal(wal_dir, fsync="never", test_mode=True, **SMALL)
        hwm = w.info("t").high_watermark
        w.append("t", [payload("t", hwm + i, 2500) for i in range(300)])  # new segments
        w.sync()
        w.trim("t", hwm + 250)
        w.engine.reclaim()  # FLOOR marks, SEGMENT_GONE, unlinks
        w.append("t", [payload("t", hwm + 300 + i, 2500) for i in range(200)])
        w.sync()
        w.append("t", [payload("t", hwm + 500 + i, 2500) for i in range(150)])  # not synced
        debug.power_cut(w, seed, keep_permille=seed * 150)
        w = walfs.Wal(wal_dir, **SMALL)
        try:
            assert w.info("t").low_watermark == hwm + 250
            assert hwm + 500 <= w.info("t").high_watermark <= hwm + 650
            assert w.read("t", hwm + 499, max_records=1) == [payload("t", hwm + 499, 2500)]
            assert w.engine.verify() == []
        finally:
            w.close()


def test_version_1_directory_opens_gets_a_manifest_and_is_upgraded_at_the_open(open_wal, wal_dir):
    w = open_wal()
    w.append("t", [b"r%d" % i for i in range(10)])
    w.commit("g", "t", 7)
    w.close()
    to_legacy(wal_dir, 1)
    w = open_wal()
    assert w.engine.report()["catalog_version"] == 1
    assert os.path.exists(os.path.join(wal_dir, "cursors.manifest"))  # built at the open
    # then the catalog, at the same open (catalog version 3 since issue 36; 2 before)
    assert open(os.path.join(wal_dir, CAT), "rb").read(12)[8:12] == (3).to_bytes(4, "little")
    assert w.committed("g", "t") == 7 and w.read("t", 9) == [b"r9"]
    w.close()
    assert open(os.path.join(wal_dir, CAT), "rb").read(12)[8:12] == (3).to_bytes(4, "little")
    assert 6 in {typ for _o, typ, _l in cat_entries(os.path.join(wal_dir, CAT))}
    w = open_wal()
    assert w.engine.report()["catalog_version"] == 3 and w.committed("g", "t") == 7
    w.close()


def test_deleted_cursor_file_is_reported_not_read_as_no_cursor(open_wal, wal_dir):
    w = open_wal()
    w.append("t", [b"r%d" % i for i in range(10)])
    w.commit("g", "t", 7)
    key = stream_key("t", 0)
    w.close()
    os.unlink(os.path.join(wal_dir, "cursors", "g", key))
    w = open_wal()
    with pytest.raises(walfs.WalCorruptError) as exc:
        w.committed("g", "t")
    assert "is missing" in str(exc.value) and "cursors.manifest" in str(exc.value)
    with pytest.raises(walfs.WalCorruptError):
        committed_offsets(w.engine, "g")
    w.close()
    from walfs.local.salvage import salvage

    rep = salvage(wal_dir, os.path.join(os.path.dirname(wal_dir), "new"))
    assert any(x.where == f"cursors/g/{key}" and "missing" in x.why for x in rep.lost), rep.lost


def test_deleted_cursor_manifest_beside_cursor_files_is_reported(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.commit("g", "t", 1)
    w.close()
    os.unlink(os.path.join(wal_dir, "cursors.manifest"))
    os.unlink(os.path.join(wal_dir, "cursors.manifest.mirror"))  # both: one is healed (issue 36)
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert "cursors.manifest is missing" in str(exc.value)
    assert "cursors.manifest.mirror" in str(exc.value)


CURSOR_CHILD = """
import sys, walfs
w = walfs.Wal(sys.argv[1], segment_size=1 << 20, block_size=64 << 10)
i = int(sys.argv[2])
while True:
    t = f"t{i % 7}"
    w.append(t, b"x")
    g = f"g{i % 5}-{i // 35}"  # new groups and new (group, stream) pairs all along
    off = w.info(t).high_watermark
    w.commit(g, t, off)
    print(g, t, off, flush=True)
    i += 1
"""


def test_sigkill_while_cursors_are_created_never_looks_like_a_missing_cursor(wal_dir):
    import random
    import time

    rng = random.Random(5)
    done: dict[tuple[str, str], int] = {}
    start = 0
    for _round in range(5):
        p = subprocess.Popen(
            [sys.executable, "-c", CURSOR_CHILD, wal_dir, str(start)], stdout=subprocess.PIPE, text=True
        )
        time.sleep(rng.uniform(0.3, 1.2))
        p.kill()
        out, _ = p.communicate(timeout=60)
        for line in out.splitlines():
            fields = line.split()
            if len(fields) != 3:  # the kill cut the last line short: its commit may have landed
                continue
            g, t, off = fields
            done[(g, t)] = int(off)
            start += 1
        w = walfs.Wal(wal_dir, **SMALL)
        try:
            for (g, t), off in done.items():
                got = w.committed(g, t)
                assert got is not None and got >= off, (g, t)
        finally:
            w.close()
    assert len(done) > 5


def test_sync_rounds_mark_durable_ends_so_a_lost_run_header_after_a_crash_is_reported(open_wal, wal_dir):
    import time

    w = open_wal(fsync="never", test_mode=True)
    w.append("a", [payload("a", i, 3000) for i in range(100)])  # several runs
    w.sync()
    time.sleep(1.1)  # marks are written at most once a second, by a sync round
    w.append("a", payload("a", 100, 3000))
    w.sync()
    debug.power_cut(w, 1, keep_permille=1000)  # a crash that keeps every page: no close
    name, pos, _stream, first = max((h for h in run_headers(wal_dir) if h[2] == 0), key=lambda h: h[3])
    assert first > 0
    with open(os.path.join(wal_dir, name), "r+b") as f:
        f.seek(pos)
        f.write(bytes(4096))
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert "FLOOR" in str(exc.value), exc.value


def test_read_only_open_beside_a_writer_creating_segments_and_streams(open_wal, wal_dir, monkeypatch):
    # The reader reads the catalog, waits, then scans: files and streams created in
    # between are not in what it read first, and must not be taken for damage.
    import threading

    w = open_wal(test_mode=True)
    w.append("t", [payload("t", i, 3000) for i in range(300)])
    w.sync()
    monkeypatch.setenv("WALFS_TEST_SCAN_DELAY_MS", "400")
    opened: list[walfs.Wal] = []
    failure: list[BaseException] = []

    def open_reader() -> None:
        try:
            opened.append(walfs.Wal(wal_dir, read_only=True, test_mode=True, **SMALL))
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=open_reader)
    t.start()
    import time

    time.sleep(0.1)
    for k in range(4):
        w.append(f"new{k}", [payload("n", i, 3000) for i in range(150)])  # new segments
    w.sync()
    w.trim("t", 290)
    w.engine.reclaim()
    t.join()
    assert not failure, failure
    opened[0].close()
    w.close()


def test_zeroed_newest_segment_the_catalog_lists_is_reported_and_kept(open_wal, wal_dir):
    three_streams(open_wal)
    to_legacy(wal_dir, 2)  # v3 rebuilds the header, records still missing: test_metadata_heal_catalog.py
    newest = sorted(n for n in os.listdir(wal_dir) if n.startswith("seg-"))[-1]
    path = os.path.join(wal_dir, newest)
    with open(path, "r+b") as f:  # looks like a creation cut short, but the catalog lists it
        f.write(bytes(os.path.getsize(path)))
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert newest in str(exc.value) and "streams.cat lists the file" in str(exc.value), exc.value
    assert os.path.exists(path)


def test_org_markers_are_not_cursors_and_a_deleted_one_is_not_damage(open_wal, wal_dir):
    """An org marker (cursors/<group>/.org-N, made by create_group) is not a cursor: the
    manifest does not list it, so removing it changes the group's orgs, never reports a
    missing cursor; a deleted cursor beside a marker still is reported."""
    w = open_wal()
    w.append("t", [b"r%d" % i for i in range(5)])
    w.engine.create_group("g")
    w.commit("g", "t", 3)
    tenant = w.for_org(2)
    tenant.engine.create_group("g")
    key = stream_key("t", 0)
    w.close()
    names = sorted(os.listdir(os.path.join(wal_dir, "cursors", "g")))
    assert names == [".org-1", ".org-2", key]
    from walfs.local.cursors import CursorStore

    listed = CursorStore(wal_dir, read_only=True).read_manifest()
    assert listed == {"g": {key}}
    os.unlink(os.path.join(wal_dir, "cursors", "g", ".org-2"))
    w = open_wal()
    assert w.committed("g", "t") == 3
    assert w.groups() == ["g"] and w.for_org(2).groups() == []
    w.close()
    os.unlink(os.path.join(wal_dir, "cursors", "g", key))
    w = open_wal()
    with pytest.raises(walfs.WalCorruptError, match="is missing"):
        w.committed("g", "t")
    w.close()


# -- issue 33: a read that reaches a damaged record fails, whole -----------------------


@pytest.mark.parametrize("where", ["header", "payload"])
def test_a_read_reaching_a_damaged_record_fails_whole_and_names_it(open_wal, wal_dir, caplog, where):
    from segment_files import find_in_segments, flip_byte

    bad = 300  # in the first run, sealed: open does not re-check it
    vals = [b"v%04d-" % i + b"z" * 100 for i in range(1500)]
    w = open_wal()
    w.append("t", vals)
    w.close()
    path, pos = find_in_segments(wal_dir, vals[bad])
    flip_byte(path, pos - 12 if where == "header" else pos + 50)
    w = open_wal()
    view = b"".join(v + b"\n" for v in vals)
    bad_at = view.index(vals[bad])
    bad_end = bad_at + len(vals[bad]) + 1

    # The byte view: a read ending before the record or starting after it is whole; one
    # whose range holds any byte of it raises (never a short count, which means the end).
    for start in (0, 1, bad_at - 300, bad_at - 107, bad_at - 1, bad_at, bad_at + 5, bad_end - 1, bad_end):
        for size in (1, 106, 107, 1000, 1 << 16):
            if start + size <= bad_at or start >= bad_end:
                assert w.read_bytes("t", start, size) == view[start : start + size], (start, size)
                continue
            with pytest.raises(walfs.CorruptRecordError) as exc:
                w.read_bytes("t", start, size)
            e = exc.value
            assert (e.topic, e.partition, e.offset) == ("t", 0, bad), (start, size)
            assert f"offset {bad} of 't' partition 0" in str(e) and f"walfs fsck {wal_dir}" in str(e)

    # Records: a batch ends before it (as a Kafka fetch does), the next read raises; a
    # reader looping to the end gets every record before it, then the error.
    got: list[bytes] = []
    with pytest.raises(walfs.CorruptRecordError, match=f"offset {bad} of 't'"):
        while len(got) < len(vals):
            batch = w.read("t", len(got), max_records=64)
            assert batch, len(got)  # never an empty answer before the end
            got += batch
    assert got == vals[:bad]
    with pytest.raises(walfs.CorruptRecordError) as exc:
        w.read_records("t", bad)
    assert exc.value.offset == bad
    assert [r.value for r in w.read_records("t", bad - 2)] == vals[bad - 2 : bad]
    assert w.read("t", bad + 1, max_records=3) == vals[bad + 1 : bad + 4]

    # However many reads met it: logged once (with what to do), counted once.
    logged = [r for r in caplog.records if "damaged record:" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelname == "ERROR"
    assert f"topic 't' partition 0 offset {bad}" in logged[0].getMessage()
    assert f"walfs fsck {wal_dir}" in logged[0].getMessage()
    assert w.engine.stats.corrupt.total == 1


def test_damaged_records_remembered_are_bounded():
    from walfs.common.metrics import CORRUPT_REMEMBERED, CorruptRecords

    c = CorruptRecords()
    assert c.first(1, 5) and not c.first(1, 5)
    for i in range(2 * CORRUPT_REMEMBERED):
        assert c.first(2, i)
    assert len(c) == CORRUPT_REMEMBERED and c.total == 1 + 2 * CORRUPT_REMEMBERED
    assert c.first(1, 5)  # the oldest were forgotten: it counts again
    assert not c.first(2, 2 * CORRUPT_REMEMBERED - 1)  # the newest are remembered
