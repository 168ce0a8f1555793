"""Deleting a topic for real (issue 10): the stream leaves the catalog's live set, its
space comes back, its cursors and settings go, and the name starts again from offset 0,
before and after a restart and through catalog compaction."""

from __future__ import annotations

import os

import pytest
from conftest import payload

import walfs
from walfs.local import debug


def segs(d: str) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.startswith("seg-"))


def fill(w: walfs.Wal, topic: str, n: int, partition: int = 0) -> None:
    for k in range(0, n, 100):
        w.append(topic, [payload(topic, k + j, 500) for j in range(min(100, n - k))], partition)


def test_delete_frees_space_and_the_name_starts_again(open_wal, wal_dir):
    w = open_wal(reclaim_interval_s=3600)
    fill(w, "gone", 3000)
    fill(w, "gone", 10, partition=1)
    w.append("kept", b"k")
    w.commit("g", "gone", 100)
    w.retention("gone", retention_ms=5)
    before = len(segs(wal_dir))
    assert w.delete("gone") == [0, 1]
    assert "gone" not in w.topics() and w.topics() == ["kept"]
    assert w.committed("g", "gone") is None
    assert w.retention("gone").unlimited
    w.engine.reclaim()
    assert len(segs(wal_dir)) < before
    assert w.append("gone", b"again") == 0  # a new stream, from offset 0
    assert w.read("gone", 0) == [b"again"]
    w.close()
    w = open_wal(reclaim_interval_s=3600)
    assert w.topics() == ["gone", "kept"]
    assert [p for _, p in w.streams("gone")] == [0]
    assert w.read("gone", 0) == [b"again"]
    assert w.read("kept", 0) == [b"k"]
    with pytest.raises(walfs.WalError):
        debug.local_engine(w).core.stream_delete(10**6)


def test_deleted_streams_survive_catalog_compaction(open_wal):
    w = open_wal(reclaim_interval_s=3600)
    for i in range(30):
        w.append(f"t{i}", b"x")
        w.delete(f"t{i}")
    w.append("t0", b"new")
    for k in range(1, 1200):  # enough trims to compact the catalog
        w.append("busy", b"r")
        w.trim("busy", k)
    w.close()
    w = open_wal()
    assert w.topics() == ["busy", "t0"]
    assert w.read("t0", 0) == [b"new"]


def test_an_append_racing_a_delete_lands_in_one_stream_or_the_other(open_wal):
    import threading

    w = open_wal(reclaim_interval_s=3600)
    w.append("r", b"first")
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            for i in range(300):
                w.append("r", b"x%d" % i)
        except BaseException as e:  # noqa: B036 - checked below
            errors.append(e)

    t = threading.Thread(target=appender)
    t.start()
    w.delete("r")
    t.join()
    # Appends after the delete went to a new stream; one that raced it may be refused.
    assert all(isinstance(e, walfs.WalError) for e in errors)
    w.close()
    w = open_wal()
    assert [p for _, p in w.streams("r")] in ([], [0])
