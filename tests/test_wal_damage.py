"""Damage in the C core (issue 9, findings 2-5): damaged files are reported, never
repaired by dropping durable data, and never kill the process. Small geometry
(segment_size=1 MiB, block_size=64 KiB). Tests that could die of a signal on broken code
run the damaged WAL in a child process and assert on its exit status."""

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import SMALL

import walfs
from walfs import debug

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
    flip(path, first_define + 20)
    before = open(path, "rb").read()
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    assert CAT in str(exc.value) and f"byte {first_define}" in str(exc.value)
    assert open(path, "rb").read() == before  # never truncated nor rewritten
    flip(path, first_define + 20)
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
    flip(path, off + 9)
    with pytest.raises(walfs.WalCorruptError, match=f"byte {off}"):
        open_wal()


# -- finding 3: segment headers -----------------------------------------------------


def test_flipped_byte_in_newest_segment_header_is_reported_not_deleted(open_wal, wal_dir):
    w = open_wal(fsync="always")
    for i in range(50):
        w.append("t", b"record %d" % i)
    w.close()
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
    w.append_batch("t", [bytes([i % 251]) * 200 for i in range(1500)])
    w.close()


def test_rotten_slot_of_a_sealed_run_is_an_error_not_a_signal(open_wal, wal_dir):
    fill_sealed_runs(open_wal)
    seg = os.path.join(wal_dir, seg_name(1))
    with open(seg, "r+b") as f:  # the whole slot area of the first (sealed) run
        f.seek(SEG_HDR + BLOCK - 4096)
        f.write(b"\xff" * 4096)
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
                w.append_batch("t", [bytes([i % 251]) * 200 for i in range(1500)])
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


def record_pos(wal_dir: str, index: int, block: int = 0) -> int:
    """File position of record `index` of the run at `block` of segment 1 (from its slot)."""
    run = SEG_HDR + block * BLOCK
    with open(os.path.join(wal_dir, seg_name(1)), "rb") as f:
        f.seek(run + BLOCK - 12 * (index + 1))
        return run + int.from_bytes(f.read(4), "little")


def test_flipped_bit_in_the_active_run_after_sync_is_reported_not_cut(open_wal, wal_dir):
    w = open_wal()
    for i in range(100):
        w.append("t", b"record %03d" % i)
    w.sync()
    w.close()
    seg = os.path.join(wal_dir, seg_name(1))
    flip(seg, record_pos(wal_dir, 50) + 36 + 3)  # a byte of record 50's value
    size_before = open(seg, "rb").read()
    with pytest.raises(walfs.WalCorruptError, match="offset 50") as exc:
        open_wal()
    assert seg_name(1) in str(exc.value)
    assert open(seg, "rb").read() == size_before  # nothing cut or zeroed
    # Read-only opens say the same.
    with pytest.raises(walfs.WalCorruptError, match="offset 50"):
        open_wal(read_only=True)


def test_torn_tail_after_a_power_cut_is_still_cut(open_wal, wal_dir):
    w = open_wal(test_mode=True, fsync="never")
    for i in range(100):
        w.append("t", b"record %03d" % i)
    w.sync()
    w.sync()  # the frontier written after the first sync is durable too
    w.append_batch("t", [b"late %d" % i for i in range(300)])
    debug.power_cut(w, seed=3, keep_permille=500)
    w = open_wal()
    got = w.read("t", 0, max_records=1000)
    assert got[:100] == [b"record %03d" % i for i in range(100)]
    assert all(g == b"late %d" % i for i, g in enumerate(got[100:]))


def test_frontier_survives_many_sync_rounds_and_reopens(open_wal, wal_dir):
    # Each session starts a new run (runs 0 and 1 get sealed at the next open); the last
    # run, unsealed, holds records 80..119 and its frontier.
    for round_ in range(3):
        w = open_wal(fsync="always")
        for i in range(40):
            w.append("t", b"r%d-%d" % (round_, i))
        w.close()
    w = open_wal()
    assert w.high_watermark("t") == 120
    w.close()
    flip(os.path.join(wal_dir, seg_name(1)), record_pos(wal_dir, 10, block=2) + 36)
    with pytest.raises(walfs.WalCorruptError, match="offset 90"):
        open_wal()


def test_core_messages_reach_python_logging(open_wal, wal_dir, caplog):
    w = open_wal()
    w.append("a", b"x")
    w.append("b", b"y")
    w.close()
    path = os.path.join(wal_dir, CAT)
    off = cat_entries(path)[1][0]
    flip(path, off + 9)
    with caplog.at_level("WARNING", logger="walfs.core"), pytest.raises(walfs.WalCorruptError):
        open_wal()
    hits = [r for r in caplog.records if r.name == "walfs.core" and CAT in r.getMessage()]
    assert hits and hits[0].levelname == "ERROR" and f"byte {off}" in hits[0].getMessage()


def test_zero_header_over_real_runs_is_damage_not_a_crashed_creation(open_wal, wal_dir):
    w = open_wal(fsync="always")
    for i in range(50):
        w.append("t", b"record %d" % i)
    w.close()
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
                w.append_batch("t", [b"v" * 200] * 1500)
                w.sync()
                os.truncate(os.path.join(d, "seg-0000000000000001.wal"), 4096)
                problems = w.verify()
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
                w.append_batch("t", [b"v" * 200] * 1500)
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
