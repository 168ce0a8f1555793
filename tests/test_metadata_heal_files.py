"""Issue 36, the Python layer's metadata files: topics.conf and cursors.manifest are kept
twice (`<file>.mirror`), a cursor file holds its cursor in two slots (byte 0 and the next
4 KiB boundary). One flipped bit, a zeroed 4 KiB page or a deleted copy: a writer's open
serves the good copy, rewrites the damaged one and says so (healed_copies, the report's
healed_files, a log line); every record reads back, the cursors (with and without commit
metadata) and the settings are kept; a second open and `walfs fsck` are clean. A read-only
open serves the good copy and changes nothing. Both copies bad: a refusal naming both. A
crash between the two copies' writes opens with the newer state (and with the older one
when the newer is damaged too)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import SMALL, payload, stream_key

import walfs
from walfs.local.cursors import CursorStore
from walfs.local.settings_file import TopicSettings
from walfs.service.metrics import Metrics

TOPICS = {"a": 200, "b": 200, "c": 10}  # records per topic: a and b span several segment files
CURSORS = {("plain", "a"): (150, ""), ("meta", "b"): (77, "consumer-3 gen 9")}
SETTING = {"retention_ms": 10**12, "max_message_bytes": 5000}


def _size(topic: str) -> int:
    return 3000 if topic != "c" else 100


def build(wal_dir: str) -> None:
    """A WAL of three topics over several segments, a cursor without and one with commit
    metadata, a per-topic setting; closed."""
    with walfs.Wal(wal_dir, **SMALL) as w:
        for k in range(5):
            for topic, n in TOPICS.items():
                per = n // 5
                w.append(topic, [payload(topic, per * k + i, _size(topic)) for i in range(per)])
        for (group, topic), (offset, metadata) in CURSORS.items():
            w.engine.commit(group, topic, 0, offset, metadata=metadata)
        w.retention("c", **SETTING)  # type: ignore[arg-type]
    assert len([n for n in os.listdir(wal_dir) if n.startswith("seg-")]) >= 2


def check(w: walfs.Wal) -> None:
    """Every record of every topic, the cursors and the setting, as build() wrote them."""
    for topic, n in TOPICS.items():
        got, off = [], 0
        while off < n:
            recs = w.read(topic, off, max_records=100)
            got += recs
            off += len(recs)
        assert got == [payload(topic, i, _size(topic)) for i in range(n)], topic
    for (group, topic), entry in CURSORS.items():
        assert w.engine.committed(group, topic) == entry
    assert {k: w.engine.settings("c")[k] for k in SETTING} == SETTING


def cursor_path(wal_dir: str, group: str) -> str:
    topic = {g: t for g, t in CURSORS}[group]
    return os.path.join(wal_dir, "cursors", group, stream_key(topic))


def tree(wal_dir: str) -> dict[str, bytes]:
    out = {}
    for root, _dirs, names in os.walk(wal_dir):
        for n in names:
            if n != "LOCK" and not n.startswith("seg-"):
                p = os.path.join(root, n)
                out[os.path.relpath(p, wal_dir)] = open(p, "rb").read()
    return out


def fsck(wal_dir: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walfs", "fsck", wal_dir], capture_output=True, text=True, timeout=300
    )


def flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ 0x10]))


def zero_page(path: str, page: int) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(page * 4096)
        f.write(bytes(max(0, min(4096, size - page * 4096))))


def damage(wal_dir: str, copy: str, fault: str) -> str:
    """Damages one copy; returns the file that holds it."""
    if copy.startswith("cursor "):
        _c, group, slot = copy.split()
        path = cursor_path(wal_dir, group)
        base = 0 if slot == "A" else 4096
        if fault == "flip":
            flip(path, base + 12)  # the offset's bytes
        elif fault == "zero4k":
            zero_page(path, base // 4096)
        else:  # a deleted copy: slot B cut off
            assert slot == "B"
            os.truncate(path, 4096)
        return path
    path = os.path.join(wal_dir, copy)
    if fault == "flip":
        flip(path, os.path.getsize(path) // 2)
    elif fault == "zero4k":
        zero_page(path, 0)  # these files are smaller than a page: all of it
    else:
        os.unlink(path)
    return path


MIRRORED = [
    "topics.conf",
    "topics.conf.mirror",
    "cursors.manifest",
    "cursors.manifest.mirror",
    "cursors.manifest.journal",
    "cursors.manifest.journal.mirror",
]
CASES = [(c, f) for c in MIRRORED for f in ("flip", "zero4k", "delete")] + [
    (f"cursor {g} {slot}", f)
    for g in ("plain", "meta")
    for slot in ("A", "B")
    for f in ("flip", "zero4k", "delete")
    if not (slot == "A" and f == "delete")  # a deletion of slot A is the file's: both copies
]


@pytest.mark.parametrize(("copy", "fault"), CASES)
def test_one_damaged_copy_is_served_healed_and_reported(wal_dir, copy, fault):
    build(wal_dir)
    path = damage(wal_dir, copy, fault)
    before = tree(wal_dir)

    # A read-only open serves the good copy, changes nothing, and tells.
    with walfs.Wal(wal_dir, read_only=True, **SMALL) as r:
        check(r)
        assert r.engine.report()["healed_files"] == 0
        r.engine.check_cursors()
        (line,) = r.engine.healed_copies()
        assert path in line and "read-only" in line, line
    assert tree(wal_dir) == before
    bad = fsck(wal_dir)
    assert bad.returncode == 1 and path in bad.stdout and "1 damaged copy (" in bad.stdout, bad

    # A writer's open heals it, and reports it.
    with walfs.Wal(wal_dir, **SMALL) as w:
        (line,) = w.engine.healed_copies()
        assert path in line and "rewritten" in line, line
        assert w.engine.report()["healed_files"] == 1
        assert b"walfs_healed_copies_total 1.0" in Metrics(w.engine).text()
        check(w)
    for name in ("topics.conf", "cursors.manifest"):
        p = os.path.join(wal_dir, name)
        assert open(p, "rb").read() == open(p + ".mirror", "rb").read()
    for group in ("plain", "meta"):
        data = open(cursor_path(wal_dir, group), "rb").read()
        assert len(data) == 4096 + 36 + len(CURSORS[(group, {g: t for g, t in CURSORS}[group])][1])
        assert data[:36] == data[4096 : 4096 + 36]

    # Healed: the next open finds nothing, fsck is clean.
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert w.engine.healed_copies() == [] and w.engine.report()["healed_files"] == 0
        check(w)
    ok = fsck(wal_dir)
    assert ok.returncode == 0 and ok.stdout.strip().endswith("clean"), ok


@pytest.mark.parametrize(
    ("name", "fault"),
    # Both copies of topics.conf deleted read as no settings, as a deleted file did before:
    # nothing else in the directory says that there were any (docs/durability.md).
    [("topics.conf", "flip"), ("topics.conf", "zero4k")]
    + [("cursors.manifest", f) for f in ("flip", "zero4k", "delete")],
)
def test_both_copies_damaged_is_a_refusal_naming_both(wal_dir, name, fault):
    build(wal_dir)
    for copy in (name, name + ".mirror"):
        damage(wal_dir, copy, fault)
    before = {k: v for k, v in tree(wal_dir).items() if k.startswith(name)}
    with pytest.raises(walfs.WalCorruptError) as exc:
        walfs.Wal(wal_dir, **SMALL)
    for copy in (name, name + ".mirror"):
        assert os.path.join(wal_dir, copy) in str(exc.value), exc.value
    after = {k: v for k, v in tree(wal_dir).items() if k.startswith(name)}
    assert after == before  # nothing guessed, nothing rewritten


@pytest.mark.parametrize("fault", ["flip", "zero4k"])
def test_both_slots_of_a_cursor_damaged_raise_naming_the_file(wal_dir, fault):
    build(wal_dir)
    path = damage(wal_dir, "cursor meta A", fault)
    damage(wal_dir, "cursor meta B", fault)
    with walfs.Wal(wal_dir, **SMALL) as w:  # the WAL opens; that one cursor raises on use
        with pytest.raises(walfs.WalCorruptError, match="both slots") as exc:
            w.engine.committed("meta", "b")
        assert path in str(exc.value)
        assert w.engine.committed("plain", "a") == CURSORS[("plain", "a")]
        assert w.engine.check_cursors() == [str(exc.value)]
    out = fsck(wal_dir)
    assert out.returncode == 1 and path in out.stdout and "1 damaged cursor file" in out.stdout, out


# -- a crash between the two copies' writes ------------------------------------------------
CHILD = """
import os, signal, sys
import walfs
from walfs.common import durable_file

w = walfs.Wal(sys.argv[1], segment_size=1 << 20, block_size=64 << 10)
real = durable_file.os.replace

def replace(src, dst):
    if dst.endswith(".mirror"):  # the first copy is in place, the second is not: killed
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)

def open_(path, flags, *args):
    if path.endswith(".journal.mirror"):  # a frame is in the first copy, not the second: killed
        os.kill(os.getpid(), signal.SIGKILL)
    return real_open(path, flags, *args)

durable_file.os.replace = replace
real_open = os.open
os.open = open_
what = sys.argv[2]
if what == "setting":
    w.retention("c", retention_ms=5)
elif what == "new cursor":
    w.commit("new", "c", 4)
elif what == "compaction":  # the next change compacts (as after a failed append): killed between its bases
    w.engine.cursors._m._clean = False
    w.commit("new", "c", 4)
else:
    w.engine.forget("meta", "b")
"""


def crash_between(wal_dir: str, what: str) -> None:
    cmd = [sys.executable, "-c", CHILD, wal_dir, what]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr


@pytest.mark.parametrize("newer_damaged", [False, True])
def test_crash_between_the_two_copies_of_topics_conf(wal_dir, newer_damaged):
    build(wal_dir)
    crash_between(wal_dir, "setting")
    if newer_damaged:  # the older copy (before the unacknowledged change) is used
        flip(os.path.join(wal_dir, "topics.conf"), 30)
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert w.engine.settings("c")["retention_ms"] == (10**12 if newer_damaged else 5)
        (line,) = w.engine.healed_copies()
        assert ("topics.conf:" if newer_damaged else "topics.conf.mirror: older") in line, line
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert w.engine.healed_copies() == []


@pytest.mark.parametrize("what", ["new cursor", "forget", "compaction"])
@pytest.mark.parametrize("newer_damaged", [False, True])
def test_crash_between_the_two_copies_of_the_manifest(wal_dir, what, newer_damaged):
    """A change is a journal frame appended to both copies, or a compaction's new base
    written to both (walfs/local/cursor_manifest.py); a crash between the two copies leaves
    one newer, and the newer one damaged leaves the older, which is read as it is."""
    build(wal_dir)
    crash_between(wal_dir, what)
    if newer_damaged:  # the older copy: the file-side step lies outside the window (cursors.py)
        newer = "cursors.manifest" if what == "compaction" else "cursors.manifest.journal"
        flip(os.path.join(wal_dir, newer), 30)
    with walfs.Wal(wal_dir, **SMALL) as w:
        if what in ("new cursor", "compaction"):  # written first, listed after: there either way
            assert w.committed("new", "c") == 4
        else:  # unlisted first, deleted after: not deleted yet, so still readable
            assert w.engine.committed("meta", "b") == CURSORS[("meta", "b")]
        assert len(w.engine.healed_copies()) == 1
        check(w)
    assert fsck(wal_dir).returncode == 0


# -- the upgrade of older forms at a writer's open ---------------------------------------
def test_older_forms_are_read_and_rewritten_with_their_copies_at_a_writers_open(wal_dir):
    import json
    import struct

    import blake3

    build(wal_dir)
    listed = CursorStore(wal_dir, read_only=True).read_manifest()
    assert listed is not None
    for name in ("topics.conf.mirror", "cursors.manifest.mirror", "cursors.manifest.journal"):
        os.unlink(os.path.join(wal_dir, name))
    os.unlink(os.path.join(wal_dir, "cursors.manifest.journal.mirror"))
    # topics.conf version 2 and manifest version 1, as older releases wrote them.
    topics = TopicSettings(wal_dir, read_only=True)._topics
    body = json.dumps({"topics": topics}).encode()
    head = struct.pack("<8sII", b"WALFSTOP", 2, len(body)) + body
    open(os.path.join(wal_dir, "topics.conf"), "wb").write(head + blake3.blake3(head).digest(length=16))
    body = json.dumps({g: sorted(v) for g, v in listed.items()}).encode()
    head = struct.pack("<8sII", b"WALFSCMF", 1, len(body)) + body
    open(os.path.join(wal_dir, "cursors.manifest"), "wb").write(head + blake3.blake3(head).digest(length=16))
    # Cursor files in both older forms (WALFSCUR without metadata, WALFSCU2 with).
    for (group, _topic), (offset, metadata) in CURSORS.items():
        raw = metadata.encode()
        head = (
            (b"WALFSCU2" + struct.pack("<QI", offset, len(raw)) + raw)
            if raw
            else (b"WALFSCUR" + struct.pack("<Q", offset))
        )
        open(cursor_path(wal_dir, group), "wb").write(head + blake3.blake3(head).digest(length=16))
    before = tree(wal_dir)
    with walfs.Wal(wal_dir, read_only=True, **SMALL) as r:  # read as they are, nothing changed
        check(r)
        assert r.engine.healed_copies() == []
    assert tree(wal_dir) == before
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert w.engine.healed_copies() == []  # an upgrade is not damage
    for name, version in (("topics.conf", 3), ("cursors.manifest", 3), ("cursors.manifest.journal", 1)):
        p = os.path.join(wal_dir, name)
        assert struct.unpack_from("<I", open(p, "rb").read(), 8)[0] == version
        assert open(p, "rb").read() == open(p + ".mirror", "rb").read()
    for group in ("plain", "meta"):
        assert open(cursor_path(wal_dir, group), "rb").read(8) == b"WALFSCU3"
    with walfs.Wal(wal_dir, **SMALL) as w:
        check(w)
    assert fsck(wal_dir).returncode == 0


def test_a_version_2_manifest_gets_its_journal_at_a_writers_open(wal_dir):
    """The manifest of stop 40's release (version 2: a base and its mirror, no journal) is
    read as it is and upgraded (version 3 and an empty journal naming it), not reported."""
    import json
    import struct

    import blake3

    build(wal_dir)
    listed = CursorStore(wal_dir, read_only=True).read_manifest()
    assert listed
    for name in ("cursors.manifest.journal", "cursors.manifest.journal.mirror"):
        os.unlink(os.path.join(wal_dir, name))
    body = json.dumps({g: sorted(v) for g, v in listed.items()}).encode()
    head = struct.pack("<8sIQI", b"WALFSCMF", 2, 7, len(body)) + body
    for name in ("cursors.manifest", "cursors.manifest.mirror"):
        open(os.path.join(wal_dir, name), "wb").write(head + blake3.blake3(head).digest(length=16))
    with walfs.Wal(wal_dir, read_only=True, **SMALL) as r:
        check(r)
        assert r.engine.healed_copies() == []
    assert not os.path.exists(os.path.join(wal_dir, "cursors.manifest.journal"))
    with walfs.Wal(wal_dir, **SMALL) as w:
        assert w.engine.healed_copies() == []
        check(w)
        w.commit("later", "c", 2)  # a frame of the new journal
    raw = open(os.path.join(wal_dir, "cursors.manifest"), "rb").read()
    assert struct.unpack_from("<IQ", raw, 8) == (3, 8)
    journal = open(os.path.join(wal_dir, "cursors.manifest.journal"), "rb").read()
    assert journal == open(os.path.join(wal_dir, "cursors.manifest.journal.mirror"), "rb").read()
    assert struct.unpack_from("<8sIQ", journal) == (b"WALFSCMJ", 1, 8) and len(journal) > 36
    with walfs.Wal(wal_dir, **SMALL) as w:
        check(w)
        assert w.committed("later", "c") == 2 and w.engine.healed_copies() == []
    assert fsck(wal_dir).returncode == 0
