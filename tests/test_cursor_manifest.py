"""The cursor manifest's journal (walfs/local/cursor_manifest.py; issue 35): a new cursor is
one frame appended to both journal copies, not a rewrite of the list of every cursor file;
the journal is compacted into a new base as it outgrows it. A crash in an append (a torn
frame), between the two appends (one copy behind) or in a compaction (a journal naming an
older base) opens with every acknowledged cursor, heals the copy and says so; damage in one
copy is served around, healed and reported; damage that no copy proves is refused."""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys

import pytest
from conftest import SMALL
from test_metadata_heal_files import flip, fsck

import walfs
from walfs.local import cursor_manifest
from walfs.local.cursor_manifest import CursorManifest
from walfs.local.recovery_log import Heals

JOURNAL = "cursors.manifest.journal"


def made(d: str, n: int) -> None:
    with walfs.Wal(d, fsync="never", **SMALL) as w:
        for i in range(n):
            w.append(f"t{i}", [b"a", b"b"])


def frames(d: str, name: str = JOURNAL) -> list[tuple[int, int]]:
    """(start, end) of each frame in one journal copy."""
    raw = open(os.path.join(d, name), "rb").read()
    out, at = [], 36
    while at < len(raw):
        n = struct.unpack_from("<I", raw, at)[0]
        out.append((at, at + 12 + n + 16))
        at += 12 + n + 16
    return out


def listed(d: str) -> dict[str, set[str]]:
    m = CursorManifest(d, True, Heals(True))
    got = m.read()
    assert got is not None
    return got


def test_first_commits_one_by_one_append_frames_and_compact_rarely(wal_dir, monkeypatch):
    """3,000 streams committed one by one: one frame each, and a handful of compactions (the
    journal outgrows max(64 KiB, the base)), so the bytes written per commit stay bounded
    however many cursors the group holds."""
    n = 3000
    made(wal_dir, n)
    rewrites: list[int] = []
    real = CursorManifest.rewrite

    def counted(self: CursorManifest, listed: dict[str, set[str]]) -> None:
        rewrites.append(sum(len(v) for v in listed.values()))
        real(self, listed)

    monkeypatch.setattr(CursorManifest, "rewrite", counted)
    with walfs.Wal(wal_dir, **SMALL) as w:
        for i in range(n):
            w.commit("g", f"t{i}", 1)
    # The first commit writes the base (a file beside no manifest would be damage); then a
    # compaction each time the journal outgrew max(64 KiB, the base): 64 KiB of frames is
    # ~600 commits here, and the base grows with the list.
    assert 1 < len(rewrites) <= 8, rewrites
    assert sum(rewrites) < 4 * n  # the lists written at compactions, in all: linear
    got = listed(wal_dir)
    assert got == {"g": set(os.listdir(os.path.join(wal_dir, "cursors", "g")))} and len(got["g"]) == n
    a = open(os.path.join(wal_dir, JOURNAL), "rb").read()
    assert a == open(os.path.join(wal_dir, JOURNAL + ".mirror"), "rb").read()
    base = os.path.getsize(os.path.join(wal_dir, "cursors.manifest"))
    assert len(a) <= max(cursor_manifest.COMPACT_AT, base)
    with walfs.Wal(wal_dir, read_only=True, **SMALL) as r:
        assert all(r.committed("g", f"t{i}") == 1 for i in range(0, n, 97))
        assert r.engine.check_cursors() == [] and r.engine.healed_copies() == []


def committed_three(d: str) -> None:
    made(d, 5)
    with walfs.Wal(d, **SMALL) as w:
        for i in range(3):
            w.commit("g", f"t{i}", 1)  # the base, then frames
    assert len(frames(d)) >= 2


def test_a_torn_append_is_cut_off_and_reported_its_file_listed_again(wal_dir):
    """A crash in the append to the first copy: a torn frame at its end, the second copy
    without it. The cursor file was written before, so it is there and listed again."""
    committed_three(wal_dir)
    (start, end) = frames(wal_dir)[-1]
    for name, cut in ((JOURNAL, (start + end) // 2), (JOURNAL + ".mirror", start)):
        os.truncate(os.path.join(wal_dir, name), cut)
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert [w.committed("g", f"t{i}") for i in range(3)] == [1, 1, 1]
        (line,) = w.engine.healed_copies()
        assert "torn append" in line and JOURNAL in line, line
    assert listed(wal_dir) == {"g": set(os.listdir(os.path.join(wal_dir, "cursors", "g")))}
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert w.engine.healed_copies() == []
    assert fsck(wal_dir).returncode == 0


@pytest.mark.parametrize("mirror", ["zeroed head", "deleted"])
def test_a_journal_cut_in_its_middle_beside_a_damaged_copy_is_refused(wal_dir, mirror):
    """A crash tears only the first copy's last append, and leaves the second whole with
    the frames before it. A first copy cut inside an earlier frame, its second copy damaged
    too, looks like a torn append but may have lost frames: refused, not served short (the
    damage fuzzer's seed 12220: a cursor file gone unnoticed)."""
    committed_three(wal_dir)
    (start, end) = frames(wal_dir)[0]
    os.truncate(os.path.join(wal_dir, JOURNAL), (start + end) // 2)
    path = os.path.join(wal_dir, JOURNAL + ".mirror")
    if mirror == "deleted":
        os.unlink(path)
    else:
        with open(path, "r+b") as f:
            f.write(bytes(36))
    with pytest.raises(walfs.WalCorruptError, match="does not prove the frames before it"):
        walfs.Wal(wal_dir, **SMALL)
    res = fsck(wal_dir)
    assert res.returncode == 1 and "journal" in res.stdout + res.stderr, res


def test_a_copy_damaged_in_its_middle_is_served_around_and_rewritten(wal_dir):
    committed_three(wal_dir)
    start, end = frames(wal_dir)[0]
    flip(os.path.join(wal_dir, JOURNAL), start + 14)  # inside the first frame's JSON
    before = listed(wal_dir)  # a reader takes the other copy
    with walfs.Wal(wal_dir, **SMALL) as w:
        (line,) = w.engine.healed_copies()
        assert JOURNAL + ":" in line and "damaged" in line, line
        assert [w.committed("g", f"t{i}") for i in range(3)] == [1, 1, 1]
    a = open(os.path.join(wal_dir, JOURNAL), "rb").read()
    assert a == open(os.path.join(wal_dir, JOURNAL + ".mirror"), "rb").read()
    assert listed(wal_dir) == before
    assert fsck(wal_dir).returncode == 0


def test_two_copies_that_both_verify_but_differ_are_refused(wal_dir):
    committed_three(wal_dir)
    start, end = frames(wal_dir)[-1]
    path = os.path.join(wal_dir, JOURNAL + ".mirror")
    raw = open(path, "rb").read()
    base_seq = struct.unpack_from("<Q", raw, 12)[0]
    seq = struct.unpack_from("<Q", raw, start + 4)[0]
    other = cursor_manifest._frame(base_seq, seq, {"add": {"g": {"1-not-a-file-0"}}})
    open(path, "wb").write(raw[:start] + other)
    with pytest.raises(walfs.WalCorruptError, match="both verify but differ"):
        walfs.Wal(wal_dir, **SMALL)
    assert fsck(wal_dir).returncode != 0


def test_a_base_beside_no_journal_is_damage(wal_dir):
    committed_three(wal_dir)
    for name in (JOURNAL, JOURNAL + ".mirror"):
        os.unlink(os.path.join(wal_dir, name))
    with pytest.raises(walfs.WalCorruptError, match="journal damaged") as exc:
        walfs.Wal(wal_dir, **SMALL)
    assert JOURNAL in str(exc.value) and JOURNAL + ".mirror" in str(exc.value)


def test_a_journal_naming_an_older_base_is_what_a_compaction_left(wal_dir):
    """A crash after a compaction's new base, before its empty journal: the old journal's
    frames are in the base; it is read as empty and reset, silently (no damage)."""
    committed_three(wal_dir)
    old = {n: open(os.path.join(wal_dir, n), "rb").read() for n in (JOURNAL, JOURNAL + ".mirror")}
    with walfs.Wal(wal_dir, **SMALL) as w:
        w.engine.cursors._m._clean = False  # the next change compacts
        w.commit("g", "t3", 2)
    for n, raw in old.items():
        open(os.path.join(wal_dir, n), "wb").write(raw)
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert w.engine.healed_copies() == []
        assert [w.committed("g", f"t{i}") for i in range(4)] == [1, 1, 1, 2]
    raw = open(os.path.join(wal_dir, JOURNAL), "rb").read()
    assert len(raw) == 36 and raw != old[JOURNAL]
    assert fsck(wal_dir).returncode == 0


# -- SIGKILL at every kind of point of one-by-one commits, compactions among them ---------
CHILD = """
import os, signal, sys
import walfs
from walfs.local import cursor_manifest

cursor_manifest.COMPACT_AT = 700  # a compaction every few commits
w = walfs.Wal(sys.argv[1], segment_size=1 << 20, block_size=64 << 10)
calls, kill_at = [0], int(sys.argv[3])

def dying(real, name):
    def call(*args):
        calls[0] += 1
        if calls[0] == kill_at:
            if name == "write" and len(args[1]) > 1:  # half of it written: a torn write
                real(args[0], bytes(args[1])[: len(args[1]) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args)
    return call

for name in ("write", "fsync", "fdatasync", "replace", "unlink", "remove"):
    setattr(os, name, dying(getattr(os, name), name))
for i in range(int(sys.argv[2]), 400):
    w.commit(f"g{i % 3}", f"t{i}", 1 + i % 2)
    if i % 5 == 0 and i >= 5:  # a frame that removes: stream i - 5's cursor is forgotten
        w.forget(f"g{(i - 5) % 3}", f"t{i - 5}")
    print(i, flush=True)
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_in_one_by_one_commits_keeps_every_acknowledged_cursor(wal_dir, seed):
    """Each round's child is killed at its K-th write, fsync, fdatasync, rename or unlink
    (a write: after half of its bytes), K random: inside cursor files' writes, journal
    appends and compactions alike. Every acknowledged cursor reads back; a forgotten one
    stays forgotten; the heals reported are what crashes leave."""
    rng = random.Random(seed)
    made(wal_dir, 400)
    acked, kinds = -1, set()
    for _round in range(12):
        k = rng.randrange(1, 120)
        p = subprocess.run(
            [sys.executable, "-c", CHILD, wal_dir, str(acked + 1), str(k)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode in (0, -signal.SIGKILL), p.stderr
        for line in p.stdout.split():
            acked = max(acked, int(line))
        with walfs.Wal(wal_dir, **SMALL) as w:
            for line in w.engine.healed_copies():  # only what a crash leaves
                kinds.add(line.split(": ", 1)[1].split(";")[0])
                assert "(a crash" in line or "older (sequence" in line, line
            for i in range(acked + 1):
                got = w.committed(f"g{i % 3}", f"t{i}")
                if i % 5 == 0 and i + 5 == acked + 1:  # its forget was in flight: either
                    assert got in (None, 1 + i % 2), (i, acked)
                else:
                    deleted = i % 5 == 0 and i + 5 <= acked
                    assert got == (None if deleted else 1 + i % 2), (i, acked)
            assert w.engine.check_cursors() == []
    assert kinds  # the kills hit the manifest's crash windows (torn, behind, older base)
    assert fsck(wal_dir).returncode == 0
