"""Issue 36, the catalog and segment headers: one damaged copy never takes the WAL down.

streams.cat and streams.cat.mirror (catalog version 3) are written in the same durable
step, each entry bound to its place; a segment header is rebuilt from the catalog's
geometry, uuid and the creation time its SEGMENT entry carries. Each row of the issue's
table that concerns them (and the same with a zeroed 4 KiB page): a writer's open reads
every record of every topic back byte for byte, the cursor and the topic setting are where
they were, the damage is reported and healed, and a second open and `walfs fsck` are
clean. Both copies damaged: a refusal naming both. Real files, real opens, small geometry
(segment_size 1 MiB, block_size 64 KiB)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable

import pytest
from catalog_files import CAT, MIRROR, cat_entries, flip, to_legacy, version, zero
from conftest import payload

import walfs

TOPICS = ("a", "b", "c")
GROUP = "g"
COMMITTED = 17
RETENTION_MS = 123_456_789


def seg_name(n: int) -> str:
    return f"seg-{n:016x}.wal"


def build(open_wal) -> dict[str, list[bytes]]:
    """Three topics over several segment files, a committed cursor, a per-topic setting,
    written over several opens (each adds catalog entries: more than 1 KiB of them)."""
    expected: dict[str, list[bytes]] = {t: [] for t in TOPICS}
    for k in range(6):
        w = open_wal()
        for t in TOPICS:
            batch = [payload(t, len(expected[t]) + i, 3000) for i in range(25)]
            w.append(t, batch)
            expected[t] += batch
        if k == 0:
            w.commit(GROUP, "a", COMMITTED)
            w.retention("b", retention_ms=RETENTION_MS)
        w.close()
    assert len([n for n in os.listdir(w.engine.path) if n.startswith("seg-")]) >= 3
    assert os.path.getsize(os.path.join(w.engine.path, CAT)) > 1024
    return expected


def fsck(wal_dir: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walfs", "fsck", wal_dir], capture_output=True, text=True, timeout=120
    )


def check_whole(w: walfs.Wal, expected: dict[str, list[bytes]]) -> None:
    for t in TOPICS:
        assert w.read(t, 0, max_records=10_000, max_bytes=1 << 30) == expected[t], t
    assert w.committed(GROUP, "a") == COMMITTED
    assert w.retention("b").ms == RETENTION_MS


def heals(open_wal, wal_dir: str, expected: dict[str, list[bytes]], healed: int = 1) -> None:
    """A writer's open serves everything, reports and heals; then all is clean."""
    w = open_wal()
    report = w.engine.report()
    assert report["healed"] == healed and report["metadata_damaged"] == healed, report
    check_whole(w, expected)
    w.append("a", b"after the heal")  # appends go on, to both copies
    w.close()
    expected["a"].append(b"after the heal")
    w = open_wal()
    report = w.engine.report()
    assert report["healed"] == 0 and report["metadata_damaged"] == 0, report
    check_whole(w, expected)
    w.close()
    r = fsck(wal_dir)
    assert r.returncode == 0 and "clean" in r.stdout, (r.stdout, r.stderr)
    for name in (CAT, MIRROR):
        assert version(wal_dir, name) == 3


def entry_not_last(path: str) -> int:
    """The offset of a DEFINE entry (never the last: marks and OPEN entries follow)."""
    entries = cat_entries(path)
    off = next(off for off, typ, _ in entries if typ == 1)
    assert off != entries[-1][0]
    return off


# -- the rows of the table ------------------------------------------------------------

Damage = Callable[[str], None]

CATALOG_DAMAGE: dict[str, Damage] = {
    "flipped bit in an entry that is not the last": lambda p: flip(p, entry_not_last(p) + 20),
    "zeroed 512-byte sector": lambda p: zero(p, 512, 512),
    "flipped bit in the header": lambda p: flip(p, 20),
    "zeroed 4 KiB page": lambda p: zero(p, 0, 4096),
    "missing file": os.unlink,
}


@pytest.mark.parametrize("copy", [CAT, MIRROR])
@pytest.mark.parametrize("what", list(CATALOG_DAMAGE))
def test_one_damaged_catalog_copy_is_healed(open_wal, wal_dir, copy, what, caplog):
    expected = build(open_wal)
    good = open(os.path.join(wal_dir, MIRROR if copy == CAT else CAT), "rb").read()
    CATALOG_DAMAGE[what](os.path.join(wal_dir, copy))
    with caplog.at_level("WARNING", logger="walfs.core"):
        heals(open_wal, wal_dir, expected)
    logged = [r.getMessage() for r in caplog.records if r.name == "walfs.core"]
    assert any(copy in m and "served from" in m for m in logged), logged
    assert any(copy in m and "healed" in m for m in logged), logged
    assert good  # the good copy was there to serve from


@pytest.mark.parametrize(
    "what,damage",
    [
        ("flipped bit", lambda p: flip(p, 41)),  # created_ms, under the header's crc
        ("zeroed first sector", lambda p: zero(p, 0, 512)),
        ("zeroed first 4 KiB page", lambda p: zero(p, 0, 4096)),
    ],
)
@pytest.mark.parametrize("seg", [1, "newest"])
def test_damaged_segment_header_is_rebuilt_from_the_catalog(open_wal, wal_dir, what, damage, seg):
    expected = build(open_wal)
    names = sorted(n for n in os.listdir(wal_dir) if n.startswith("seg-"))
    assert len(names) >= 3
    name = seg_name(1) if seg == 1 else names[-1]
    path = os.path.join(wal_dir, name)
    before = open(path, "rb").read(4096)
    damage(path)
    heals(open_wal, wal_dir, expected)
    assert open(path, "rb").read(4096) == before  # rebuilt exactly


def test_both_catalog_copies_damaged_is_refused_naming_both(open_wal, wal_dir):
    build(open_wal)
    paths = [os.path.join(wal_dir, n) for n in (CAT, MIRROR)]
    off = entry_not_last(paths[0])
    for p in paths:
        flip(p, off + 20)
    before = [open(p, "rb").read() for p in paths]
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    msg = str(exc.value)
    assert CAT in msg and MIRROR in msg and f"byte {off}" in msg, msg
    assert [open(p, "rb").read() for p in paths] == before  # nothing rewritten


def test_both_catalog_headers_damaged_is_refused_naming_both(open_wal, wal_dir):
    build(open_wal)
    flip(os.path.join(wal_dir, CAT), 20)
    zero(os.path.join(wal_dir, MIRROR), 0, 4096)
    with pytest.raises(walfs.WalCorruptError) as exc:
        open_wal()
    msg = str(exc.value)
    assert CAT in msg and MIRROR in msg and "header" in msg, msg


def test_damage_at_different_places_in_each_copy_is_healed(open_wal, wal_dir):
    expected = build(open_wal)
    flip(os.path.join(wal_dir, CAT), entry_not_last(os.path.join(wal_dir, CAT)) + 20)
    zero(os.path.join(wal_dir, MIRROR), 1024, 512)
    heals(open_wal, wal_dir, expected, healed=2)


def test_segment_header_and_catalog_copy_damaged_together(open_wal, wal_dir):
    expected = build(open_wal)
    zero(os.path.join(wal_dir, MIRROR), 0, 4096)
    zero(os.path.join(wal_dir, seg_name(2)), 0, 4096)
    heals(open_wal, wal_dir, expected, healed=2)


# -- misdirected and cut-short writes ---------------------------------------------------


def same_length_pair(path: str) -> tuple[int, int, int]:
    """Two entries of the same length at different offsets (FLOOR marks)."""
    by_len: dict[int, list[int]] = {}
    for off, typ, ln in cat_entries(path):
        if typ == 3:
            by_len.setdefault(ln, []).append(off)
    offs = next(v for v in by_len.values() if len(v) >= 2)
    return offs[0], offs[-1], 40


def test_an_entry_written_at_another_offset_fails_its_check(open_wal, wal_dir):
    expected = build(open_wal)
    path = os.path.join(wal_dir, CAT)
    src, dst, ln = same_length_pair(path)
    data = open(path, "rb").read()
    with open(path, "r+b") as f:  # a valid entry, landed at the wrong offset
        f.seek(dst)
        f.write(data[src : src + ln])
    heals(open_wal, wal_dir, expected)


def test_an_entry_written_into_the_other_copy_fails_its_check(open_wal, wal_dir):
    expected = build(open_wal)
    src, dst, ln = same_length_pair(os.path.join(wal_dir, CAT))
    data = open(os.path.join(wal_dir, CAT), "rb").read()
    with open(os.path.join(wal_dir, MIRROR), "r+b") as f:  # streams.cat's entry, in the mirror
        f.seek(dst)
        f.write(data[dst : dst + ln])
    heals(open_wal, wal_dir, expected)


def test_a_header_written_into_the_other_copy_fails_its_check(open_wal, wal_dir):
    expected = build(open_wal)
    head = open(os.path.join(wal_dir, CAT), "rb").read(64)
    with open(os.path.join(wal_dir, MIRROR), "r+b") as f:
        f.write(head)
    heals(open_wal, wal_dir, expected)


@pytest.mark.parametrize("short", [CAT, MIRROR])
@pytest.mark.parametrize("cut", ["whole entry", "torn entry"])
def test_a_crash_between_the_two_copies_writes_loses_nothing(open_wal, wal_dir, short, cut):
    """An append reached one copy (written and synced) and the crash came before the other
    had it, whole or in part: the entry, never acknowledged, is kept; the short copy is
    healed."""
    expected = build(open_wal)
    w = open_wal()
    w.create("d")  # the DEFINE of "d": the last entries before the close's marks
    w.append("d", b"d0")
    w.sync()
    w.close()
    expected["d"] = [b"d0"]
    path = os.path.join(wal_dir, short)
    last_off, _typ, last_len = cat_entries(path)[-1]
    os.truncate(path, last_off if cut == "whole entry" else last_off + last_len // 2)
    w = open_wal()
    report = w.engine.report()
    assert report["healed"] == 1, report  # the short copy gets the entry
    assert w.read("d", 0) == [b"d0"]
    w.close()
    w = open_wal()
    assert w.engine.report()["healed"] == 0 and w.read("d", 0) == [b"d0"]
    for t in TOPICS:
        assert w.read(t, 0, max_records=10_000, max_bytes=1 << 30) == expected[t]
    w.close()
    assert open(os.path.join(wal_dir, CAT), "rb").read() != b""
    assert fsck(wal_dir).returncode == 0


def test_a_compaction_cut_short_between_its_renames_takes_the_newer_copy(open_wal, wal_dir):
    expected = build(open_wal)
    old = open(os.path.join(wal_dir, MIRROR), "rb").read()
    zero(os.path.join(wal_dir, CAT), 512, 512)
    w = open_wal()  # heals: both copies rewritten, one generation up
    assert w.engine.report()["healed"] == 1
    w.close()
    with open(os.path.join(wal_dir, MIRROR), "wb") as f:  # the mirror's rename never happened
        f.write(old)
    w = open_wal()
    assert w.engine.report()["healed"] == 1
    check_whole(w, expected)
    w.close()
    w = open_wal()
    assert w.engine.report()["healed"] == 0
    w.close()


# -- read-only opens and the upgrade --------------------------------------------------------


def file_bytes(d: str) -> dict[str, bytes]:
    return {e.name: open(e.path, "rb").read() for e in os.scandir(d) if e.is_file() and e.name != "LOCK"}


def test_a_read_only_open_serves_from_the_good_copy_and_writes_nothing(open_wal, wal_dir):
    expected = build(open_wal)
    flip(os.path.join(wal_dir, MIRROR), entry_not_last(os.path.join(wal_dir, MIRROR)) + 20)
    zero(os.path.join(wal_dir, seg_name(1)), 0, 512)
    files = file_bytes(wal_dir)
    w = open_wal(read_only=True)
    report = w.engine.report()
    assert report["healed"] == 0 and report["metadata_damaged"] == 2, report
    for t in TOPICS:
        assert w.read(t, 0, max_records=10_000, max_bytes=1 << 30) == expected[t]
    w.close()
    r = fsck(wal_dir)
    assert r.returncode == 1 and "2 damaged metadata copies" in r.stdout, (r.stdout, r.stderr)
    assert file_bytes(wal_dir) == files
    heals(open_wal, wal_dir, expected, healed=2)


def test_a_read_only_open_with_streams_cat_missing_reads_the_mirror(open_wal, wal_dir):
    expected = build(open_wal)
    os.unlink(os.path.join(wal_dir, CAT))
    w = open_wal(read_only=True)
    assert w.engine.report()["metadata_damaged"] == 1
    for t in TOPICS:
        assert w.read(t, 0, max_records=10_000, max_bytes=1 << 30) == expected[t]
    w.close()
    assert not os.path.exists(os.path.join(wal_dir, CAT))
    heals(open_wal, wal_dir, expected)


def test_a_version_2_directory_is_upgraded_at_the_open(open_wal, wal_dir):
    expected = build(open_wal)
    to_legacy(wal_dir, 2)
    assert not os.path.exists(os.path.join(wal_dir, MIRROR)) and version(wal_dir) == 2
    w = open_wal(read_only=True)  # a read-only open changes nothing
    assert w.engine.report()["catalog_version"] == 2
    check_whole(w, expected)
    w.close()
    assert version(wal_dir) == 2
    w = open_wal()
    assert w.engine.report()["catalog_version"] == 2  # as found
    assert version(wal_dir, CAT) == 3 and version(wal_dir, MIRROR) == 3  # at the open, not the close
    check_whole(w, expected)
    w.close()
    # the upgrade recorded each segment's creation time: its header can now be rebuilt
    zero(os.path.join(wal_dir, seg_name(1)), 0, 4096)
    heals(open_wal, wal_dir, expected)


def test_a_version_2_segment_header_is_not_rebuilt_without_a_creation_time(open_wal, wal_dir):
    build(open_wal)
    to_legacy(wal_dir, 2)
    zero(os.path.join(wal_dir, seg_name(1)), 0, 512)
    with pytest.raises(walfs.WalCorruptError, match=seg_name(1)):
        open_wal()


def test_a_segment_file_of_the_wrong_size_is_not_rebuilt(open_wal, wal_dir):
    build(open_wal)
    path = os.path.join(wal_dir, seg_name(1))
    zero(path, 0, 512)
    with open(path, "ab") as f:
        f.write(b"x")
    with pytest.raises(walfs.WalCorruptError, match=seg_name(1)):
        open_wal()


def test_a_fully_zeroed_listed_segment_is_still_damage(open_wal, wal_dir):
    """The header is rebuilt, but the records it held are gone: recovery says so."""
    build(open_wal)
    names = sorted(n for n in os.listdir(wal_dir) if n.startswith("seg-"))
    path = os.path.join(wal_dir, names[-2])
    zero(path, 0, os.path.getsize(path))
    with pytest.raises(walfs.WalCorruptError, match="damaged"):
        open_wal()
    assert os.path.exists(path)


def test_copied_directory_heals_like_the_original(open_wal, wal_dir, tmp_path):
    """A backup copy (cp -a) of a directory with a damaged copy heals the same way."""
    expected = build(open_wal)
    zero(os.path.join(wal_dir, CAT), 512, 512)
    dst = str(tmp_path / "copy")
    shutil.copytree(wal_dir, dst)
    w = walfs.Wal(dst, segment_size=1 << 20, block_size=64 << 10)
    assert w.engine.report()["healed"] == 1
    check_whole(w, expected)
    w.close()


def test_a_crash_between_the_copies_writes_through_the_fault_hook(open_wal, wal_dir):
    """The core's own crash point (debug "catalog_split"): the DEFINE of a new topic is
    written and synced in streams.cat only, the process dies (power cut). Nothing
    acknowledged is lost; the entry, in one copy, is kept; the mirror is healed."""
    import errno

    from walfs.local import debug

    expected = build(open_wal)
    w = open_wal(test_mode=True, fsync="always")
    w.append("a", b"acknowledged")
    expected["a"].append(b"acknowledged")
    debug.inject_fault(w, "catalog_split", errno.EIO, after=0, count=1)
    with pytest.raises(walfs.WalError):
        w.create("split")
    debug.power_cut(w, seed=7)
    heals(open_wal, wal_dir, expected)
    w = open_wal()
    assert "split" in w.topics()
    w.close()
