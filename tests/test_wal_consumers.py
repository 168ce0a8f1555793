"""Consumer cursors: read now, commit later; at-least-once and strictly-once; restarts."""

import pytest
from conftest import stream_key

import walfs
from walfs.engine.rules import committed_offsets


def test_at_least_once_redelivers_after_restart(open_wal):
    w = open_wal()
    w.append("t", [b"%d" % i for i in range(10)])
    c = w.consumer("g", "t")
    assert [r.value for r in c.read_next(max_records=4)] == [b"0", b"1", b"2", b"3"]
    c.commit()
    assert [r.offset for r in c.read_next(max_records=3)] == [4, 5, 6]  # not committed
    w.close()
    w = open_wal()
    c = w.consumer("g", "t")
    assert c.committed == 4 and c.position == 4
    assert [r.value for r in c.read_next()] == [b"%d" % i for i in range(4, 10)]
    assert c.read_next() == []


def test_strictly_once_persists_every_read(open_wal):
    w = open_wal()
    w.append("t", [b"a", b"b", b"c"])
    c = w.consumer("s", "t", mode="strictly_once")
    assert [r.value for r in c.read_next(max_records=2)] == [b"a", b"b"]
    w.close()
    w = open_wal()
    assert w.committed("s", "t") == 2
    assert [r.value for r in w.consumer("s", "t", mode="strictly_once").read_next()] == [b"c"]


def test_groups_are_independent_and_listed(open_wal):
    w = open_wal()
    w.append("t", [b"x"] * 5, partition=2)
    w.commit("one", "t", 2, partition=2)
    w.commit("two", "t", 5, partition=2)
    assert w.committed("one", "t", 2) == 2
    assert w.committed("two", "t", 2) == 5
    assert w.committed("three", "t", 2) is None
    assert w.groups() == ["one", "two"]
    assert committed_offsets(w.engine, "one") == {("t", 2): 2}
    assert committed_offsets(w.engine, "nobody") == {}


def test_persist_every_and_seek(open_wal):
    w = open_wal()
    w.append("t", [b"%d" % i for i in range(6)])
    c = w.consumer("g", "t", persist_every=2)
    c.read_next(max_records=1)
    assert w.committed("g", "t") is None
    c.read_next(max_records=1)
    assert w.committed("g", "t") == 2
    c.seek(5)
    assert [r.value for r in c.read_next()] == [b"5"]


def test_cursor_below_trim_moves_to_low_watermark(open_wal):
    w = open_wal()
    w.append("t", [b"%d" % i for i in range(10)])
    w.commit("g", "t", 1)
    w.trim("t", 6)
    assert [r.value for r in w.consumer("g", "t").read_next(max_records=1)] == [b"6"]


def test_bad_group_names_and_modes(open_wal):
    w = open_wal()
    with pytest.raises(walfs.InvalidTopicError):
        w.consumer("a/b", "t")
    with pytest.raises(ValueError):
        w.consumer("g", "t", mode="exactly_twice")


def test_damaged_cursor_file_is_an_error(open_wal, wal_dir):
    import os

    w = open_wal()
    w.append("t", b"x")
    w.commit("g", "t", 1)
    path = os.path.join(wal_dir, "cursors", "g", stream_key("t"))
    with open(path, "r+b") as f:  # both slots (one damaged slot is healed: test_metadata_heal_files)
        f.write(b"X")
        f.seek(4096)
        f.write(b"X")
    with pytest.raises(walfs.WalCorruptError, match="cursor file"):
        w.committed("g", "t")
