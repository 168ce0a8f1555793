"""Commit metadata (Kafka's OffsetCommit string) in the cursor store (issue 12): kept
durably with the offset and returned by Wal.committed; the older forms (the 32-byte file of a
commit without metadata, WALFSCU2 with it) are still read; a file is checked (magic,
length, checksum, UTF-8) and damage is reported, never guessed (issue 36: with both slots
damaged; one is healed, tests/test_metadata_heal_files.py)."""

from __future__ import annotations

import array
import os
import struct
import subprocess
import sys

import blake3
import pytest

import walfs
from walfs.engine.records import encode_meta, producer_of, with_producer
from walfs.engine.types import MAX_METADATA_BYTES
from walfs.errors import WalCorruptError


def _cursor_file(wal_dir: str, group: str) -> str:
    (name,) = os.listdir(os.path.join(wal_dir, "cursors", group))
    return os.path.join(wal_dir, "cursors", group, name)


def test_metadata_kept_across_reopen_and_old_form_without_it(open_wal, wal_dir):
    w = open_wal()
    w.append("t", [b"a", b"b", b"c"])
    assert w.engine.committed("g", "t") is None
    w.commit("g", "t", 2, metadata="consumer-7 gen 3 ✓")
    assert w.engine.committed("g", "t") == (2, "consumer-7 gen 3 ✓")
    assert w.committed("g", "t") == 2
    w.close()
    w = open_wal()
    assert w.engine.committed("g", "t") == (2, "consumer-7 gen 3 ✓")
    with open(_cursor_file(wal_dir, "g"), "rb") as f:
        assert f.read(8) == b"WALFSCU3"
    # A commit without metadata: the same form, with an empty metadata string.
    w.commit("g", "t", 3)
    assert w.engine.committed("g", "t") == (3, "")
    assert os.path.getsize(_cursor_file(wal_dir, "g")) == 4096 + 36
    # advance_only: a commit that does not advance changes neither offset nor metadata.
    w.commit("g", "t", 3, metadata="x")
    assert not w.commit("g", "t", 1, advance_only=True, metadata="y")
    assert w.engine.committed("g", "t") == (3, "x")


def test_metadata_size_limit(open_wal):
    w = open_wal()
    w.append("t", b"a")
    w.commit("g", "t", 1, metadata="m" * MAX_METADATA_BYTES)
    with pytest.raises(ValueError, match="metadata"):
        w.commit("g", "t", 0, metadata="m" * (MAX_METADATA_BYTES + 1))
    assert w.engine.committed("g", "t") == (1, "m" * MAX_METADATA_BYTES)


def _old_form(path: str, offset: int, metadata: bytes) -> None:
    """Writes a cursor file as releases before issue 36 did (WALFSCU2: one copy)."""
    head = b"WALFSCU2" + struct.pack("<QI", offset, len(metadata)) + metadata
    with open(path, "wb") as f:
        f.write(head + blake3.blake3(head).digest(length=16))


@pytest.mark.parametrize("form", ["old", "both slots"])
@pytest.mark.parametrize("damage", ["flip", "cut", "grow", "length", "utf8"])
def test_damaged_metadata_cursor_is_reported(open_wal, wal_dir, damage: str, form: str):
    w = open_wal()
    w.append("t", b"a")
    w.commit("g", "t", 1, metadata="meta")
    path = _cursor_file(wal_dir, "g")
    if form == "old":
        _old_form(path, 1, b"meta")
    data = bytearray(open(path, "rb").read())
    ident = b"g\0" + os.path.basename(path).encode() + b"\0"  # a slot's checksum names its file
    for at in (0,) if form == "old" else (0, 4096):  # the slots: one damaged slot is healed
        if damage == "flip":
            data[at + 21] ^= 1
        elif damage == "cut":
            del data[at + 39 :]
        elif damage == "grow":
            data[at + 36 : at + 36] = b"\0" * (MAX_METADATA_BYTES + 100)
        elif damage == "length":
            struct.pack_into("<I", data, at + 16, 3)
        else:  # checksum right, metadata not UTF-8
            data[at + 20 : at + 24] = b"\xff\xfe\xfd\xfc"
            key = b"" if form == "old" else ident
            data[at + 24 : at + 40] = blake3.blake3(key + bytes(data[at : at + 24])).digest(length=16)
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(WalCorruptError, match="cursor file"):
        w.engine.committed("g", "t")


def test_salvage_keeps_null_values_producer_sections_and_commit_metadata(open_wal, wal_dir, tmp_path):

    w = open_wal()
    w.append("t", [(b"k", None, None, 5), (None, b"", None, 6)])
    meta = with_producer(encode_meta(b"k", None, 7), (99, 1, 10, 1))
    w.engine.append("t", 0, meta + b"v", array.array("I", [len(meta)]), array.array("I", [1]))
    w.commit("g", "t", 2, metadata="kept")
    w.close()
    new = str(tmp_path / "new")
    r = subprocess.run(
        [sys.executable, "-m", "walfs", "fsck", "--repair", wal_dir, "--into", new, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    with walfs.Wal(new) as w2:
        recs = w2.read_records("t", 0)
        assert [(r.key, r.value) for r in recs] == [(b"k", None), (None, b""), (b"k", b"v")]
        assert w2.engine.committed("g", "t") == (2, "kept")
        buf, descs = bytearray(1 << 16), bytearray(40 * 3)
        assert w2.engine.read("t", 0, 0, buf, descs, 3) == 3
        _gid, _off, _ts, meta_len, _vlen, pos = struct.unpack_from("<QQqIIQ", descs, 80)
        assert producer_of(bytes(buf[pos : pos + meta_len])) == (99, 1, 10, 1)


def test_kafka_offset_fetch_reports_a_damaged_cursor_and_keeps_serving(tmp_path):
    from kafka_answers import _commit, _fetch
    from kafka_harness import check_alive, listener
    from kafka_wire import Wire

    with listener(tmp_path) as lst:
        lst.wal.append("t", b"a")
        with Wire(lst.bootstrap) as w:
            assert _commit(w, "g", "t", 0, 1, "m") == 0
            assert _fetch(w, "g", None) == (0, [("t", 0, 1, "m", 0)])
            cursors = tmp_path / "data" / "cursors"
            (path,) = [os.path.join(dp, f) for dp, _, fs in os.walk(cursors) for f in fs]
            with open(path, "r+b") as f:  # both slots: one damaged slot is healed
                for at in (10, 4096 + 10):
                    f.seek(at)
                    f.write(b"\xff")
            storage_error = 56  # KAFKA_STORAGE_ERROR: the damage is reported, not guessed around
            assert _fetch(w, "g", None) == (storage_error, [])
            assert _fetch(w, "g", [("t", [0])]) == (0, [("t", 0, -1, "", storage_error)])
        check_alive(lst.port)
