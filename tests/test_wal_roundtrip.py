"""Round trips through the engine: sizes around every boundary of the format, batches,
many streams, the byte view, keys and headers, time lookups, reopen."""

import os
import time

import pytest
from conftest import SMALL, payload, stream_key

import walfs

BLOCK = SMALL["block_size"]
REC_HDR, SLOT, BLK_DATA = 36, 12, 1024
# Largest record that fits a fresh one-block run, and sizes around it.
ONE_BLOCK_MAX = BLOCK - BLK_DATA - REC_HDR - SLOT

SIZES = [
    0,
    1,
    2,
    REC_HDR - 1,
    REC_HDR,
    REC_HDR + 1,
    REC_HDR + SLOT,
    4095,
    4096,
    4097,
    ONE_BLOCK_MAX - 1,
    ONE_BLOCK_MAX,
    ONE_BLOCK_MAX + 1,
    BLOCK - 1,
    BLOCK,
    BLOCK + 1,
    3 * BLOCK + 17,
    10 * BLOCK,
]


@pytest.mark.parametrize("size", SIZES)
def test_single_record_sizes_survive_reopen(open_wal, size):
    w = open_wal()
    data = os.urandom(size)
    assert w.append("t", b"before") == 0
    assert w.append("t", data) == 1
    assert w.append("t", b"after") == 2
    assert w.read("t", 0) == [b"before", data, b"after"]
    w.close()
    w = open_wal()
    assert w.read("t", 0) == [b"before", data, b"after"]
    assert w.info("t").byte_size == len(b"before\n") + size + 1 + len(b"after\n")
    assert w.engine.verify() == []


def test_all_sizes_in_one_stream_interleaved_with_another(open_wal):
    w = open_wal()
    expected = []
    for i, size in enumerate(SIZES * 2):
        data = payload("big", i, size)
        expected.append(data)
        w.append("big", data)
        w.append("small", payload("small", i, 3))
    w.close()
    w = open_wal()
    assert w.read("big", 0, max_records=10_000, max_bytes=1 << 30) == expected
    assert [w.read("small", i)[0] for i in range(len(expected))] == [
        payload("small", i, 3) for i in range(len(expected))
    ]


def test_hundred_mebibyte_record(open_wal):
    # The default geometry (10 MiB blocks): a run of 11 blocks inside a 1 GiB segment.
    w = open_wal(segment_size=1 << 30, block_size=10 << 20)
    big = os.urandom(1 << 20) * 100
    assert w.append("huge", big) == 0
    assert w.append("huge", b"next") == 1
    w.close()
    w = open_wal(segment_size=1 << 30, block_size=10 << 20)
    got = w.read("huge", 0, max_records=1)
    assert len(got) == 1 and got[0] == big
    assert w.read("huge", 1) == [b"next"]


def test_record_larger_than_a_segment_is_refused(open_wal):
    w = open_wal()
    with pytest.raises(walfs.RecordTooLargeError):
        w.append("t", b"x" * SMALL["segment_size"])
    assert w.append("t", b"ok") == 0  # still usable, nothing half-written
    assert w.read("t", 0) == [b"ok"]


def test_batches_get_contiguous_offsets_and_cross_blocks(open_wal):
    w = open_wal()
    first = w.append("b", [payload("b", i) for i in range(5000)])
    assert first == 0
    assert w.append("b", [b"x", b"y"]) == 5000
    assert w.info("b").high_watermark == 5002
    got = w.read("b", 0, max_records=100_000, max_bytes=1 << 30)
    assert got[:5000] == [payload("b", i) for i in range(5000)]
    assert got[5000:] == [b"x", b"y"]


def test_read_limits(open_wal):
    w = open_wal()
    w.append("t", [b"a" * 100] * 50)
    assert len(w.read("t", 0, max_records=7)) == 7
    assert len(w.read("t", 0, max_bytes=250)) == 2
    assert len(w.read("t", 0, max_bytes=1)) == 1  # at least one record
    assert w.read("t", 50) == []
    assert len(w.read("t", 45)) == 5


def test_many_streams_and_partitions(open_wal):
    w = open_wal()
    for i in range(300):
        w.append(f"topic-{i}", payload(f"topic-{i}", 0), partition=i % 3)
    assert len(w.topics()) == 300
    w.close()
    w = open_wal()
    assert len(w.topics()) == 300
    for i in range(300):
        assert [p for _, p in w.streams(f"topic-{i}")] == [i % 3]
        assert w.read(f"topic-{i}", 0, partition=i % 3) == [payload(f"topic-{i}", 0)]
        assert w.info(f"topic-{i}", partition=(i + 1) % 3).high_watermark == 0


def test_orgs_are_separate(open_wal, wal_dir):
    w = open_wal(org_id=1)
    w.append("shared", b"org one")
    w.close()
    w2 = open_wal(org_id=2)
    assert w2.topics() == []
    w2.append("shared", b"org two")
    assert w2.read("shared", 0) == [b"org two"]
    hash_two = w2.info("shared").topic_hash
    assert stream_key("shared", org_id=2) == f"2-{hash_two}-0"
    w2.close()
    w = open_wal(org_id=1)
    assert w.read("shared", 0) == [b"org one"]
    assert w.info("shared").topic_hash != hash_two  # org-salted


def test_byte_view_reads_at_every_position(open_wal):
    w = open_wal()
    values = [payload("v", i, i % 37) for i in range(400)]
    w.append("v", values)
    view = b"".join(v + b"\n" for v in values)
    assert w.info("v").byte_size == len(view)
    assert w.read_bytes("v", 0, len(view) + 100) == view
    for pos in range(0, len(view), 97):
        for size in (1, 5, 4096):
            assert w.read_bytes("v", pos, size) == view[pos : pos + size]
    assert w.read_bytes("v", len(view), 10) == b""


def test_keys_headers_and_producer_timestamps(open_wal):
    w = open_wal()
    w.append("k", b"plain")
    w.append("k", b"v1", key=b"key", headers=[("h1", b"x"), ("h2", None)], timestamp_ms=1234)
    w.append("k", [(None, b"v2", [("a", b"")], None), (b"", b"v3", None, 99)])
    w.close()
    w = open_wal()
    recs = w.read_records("k", 0)
    assert [r.value for r in recs] == [b"plain", b"v1", b"v2", b"v3"]
    assert [r.offset for r in recs] == [0, 1, 2, 3]
    assert recs[0].key is None and recs[0].headers == ()
    assert (
        recs[1].key == b"key"
        and recs[1].headers == (("h1", b"x"), ("h2", None))
        and recs[1].timestamp_ms == 1234
    )
    assert recs[2].key is None and recs[2].headers == (("a", b""),)
    assert recs[3].key == b"" and recs[3].timestamp_ms == 99
    assert w.read("k", 0) == [b"plain", b"v1", b"v2", b"v3"]  # values only
    assert w.read_bytes("k", 0, 100) == b"plain\nv1\nv2\nv3\n"


def test_offset_for_timestamp(open_wal):
    w = open_wal()
    t0 = int(time.time() * 1000)
    w.append("t", [b"a", b"b"])
    time.sleep(0.02)
    t1 = int(time.time() * 1000)
    w.append("t", [b"c"] * 3000)
    recs = w.read_records("t", 0, max_records=5)
    assert all(r.timestamp_ms >= t0 for r in recs)
    assert w.locate("t", timestamp_ms=0) == 0
    assert w.locate("t", timestamp_ms=t1) == 2
    assert w.locate("t", timestamp_ms=t1 + 10**9) == 3002
    assert w.locate("missing", timestamp_ms=t1) == 0


def test_stream_info_and_watermarks(open_wal):
    w = open_wal()
    assert w.info("none").high_watermark == 0 and w.info("none").low_watermark == 0
    w.append("t", [b"12345", b"6"])
    info = w.info("t")
    assert (info.low_watermark, info.high_watermark, info.byte_size, info.partition) == (0, 2, 8, 0)
    assert len(info.topic_hash) == 32
    assert stream_key("t") == f"1-{info.topic_hash}-0"


def test_empty_partition_created_explicitly(open_wal):
    w = open_wal()
    w.create("empty", 3)
    assert [p for _, p in w.streams("empty")] == [3]
    w.close()
    w = open_wal()
    assert [p for _, p in w.streams("empty")] == [3]
    assert w.read("empty", 0, partition=3) == []


def test_wait_for_wakes_on_append(open_wal):
    import threading

    w = open_wal()
    assert w.wait_for("t", 0, timeout=0.05) is False
    threading.Timer(0.1, lambda: w.append("t", b"x")).start()
    assert w.wait_for("t", 0, timeout=10) is True


@pytest.mark.parametrize("mode", ["never", "interval", "always"])
def test_fsync_modes_round_trip(open_wal, mode):
    w = open_wal(fsync=mode, fsync_interval_ms=5)
    for i in range(200):
        w.append("m", payload("m", i))
    w.sync()
    w.close()
    w = open_wal(fsync=mode)
    assert w.read("m", 0, max_records=500) == [payload("m", i) for i in range(200)]


def test_fdatasync_fallback_without_io_uring(open_wal):
    w = open_wal(fsync="always", io_uring=False)
    w.append("f", [b"a", b"b"])
    w.close()
    assert open_wal().read("f", 0) == [b"a", b"b"]


def test_an_old_index_snapshot_is_removed_and_offsets_come_from_the_core(open_wal, wal_dir):
    # Releases before issue 9 kept a second offset index (index.snap, roaring bitmaps of
    # gids). It is derived data: a writer's open deletes it, a damaged one included.
    w = open_wal()
    w.append("s", [payload("s", i) for i in range(3000)])
    w.close()
    path = os.path.join(wal_dir, "index.snap")
    with open(path, "wb") as f:
        f.write(b"WALFSIDX" + bytes(range(200)))  # whatever an old release left
    w = open_wal(read_only=True)
    assert os.path.exists(path)  # a read-only open changes nothing
    assert w.info("s").high_watermark == 3000
    w.close()
    w = open_wal()
    assert not os.path.exists(path)
    w.append("s", [b"tail"] * 10)
    assert w.info("s").high_watermark == 3010
    assert w.read("s", 2999, max_records=2) == [payload("s", 2999), b"tail"]


def test_two_wals_in_one_process(tmp_path):
    a = walfs.Wal(tmp_path / "a", **SMALL)
    b = walfs.Wal(tmp_path / "b", **SMALL)
    a.append("t", b"in a")
    b.append("t", b"in b")
    assert a.read("t", 0) == [b"in a"] and b.read("t", 0) == [b"in b"]
    a.close()
    b.close()


def test_append_lines_and_byte_positions(open_wal):
    w = open_wal()
    assert w.append_lines("l", b"a\nbb\n\nccc") == (0, 4)
    assert w.append_lines("l", b"dd\n") == (4, 1)
    assert w.read("l", 0) == [b"a", b"bb", b"", b"ccc", b"dd"]
    view = b"a\nbb\n\nccc\ndd\n"
    assert w.read_bytes("l", 0, 100) == view
    starts = [0, 2, 5, 6, 10, 13]
    assert [w.locate("l", offset=i) for i in range(6)] == starts
    for pos in range(len(view) + 3):
        expected = sum(1 for s in starts[1:] if s <= pos)
        assert w.locate("l", byte=pos) == expected, pos
    assert w.streams() == [("l", 0)]
    with pytest.raises(ValueError):
        w.append_lines("l", b"")
    big = b"".join(b"line %d\n" % i for i in range(20_000))  # crosses many blocks
    first, n = w.append_lines("l", big)
    assert (first, n) == (5, 20_000)
    assert w.read("l", 5 + 19_999) == [b"line 19999"]


def test_read_into_caller_buffers(open_wal):
    import array

    from walfs.local.core import REC_SIZE

    w = open_wal()
    w.append("z", [b"one", b"two", b"three"])
    w.append("z", b"keyed", key=b"k")
    buf = bytearray(1 << 16)
    recs = bytearray(REC_SIZE * 10)
    n = w.engine.read("z", 0, 1, buf, recs)
    assert n == 3
    words = array.array("Q", recs[: n * REC_SIZE])
    bodies = []
    for k in range(n):
        offset, lens, pos = words[5 * k + 1], words[5 * k + 3], words[5 * k + 4]
        meta, vlen = lens & 0xFFFFFFFF, lens >> 32
        bodies.append((offset, bytes(buf[pos + meta : pos + meta + vlen]), meta > 0))
    assert bodies == [(1, b"two", False), (2, b"three", False), (3, b"keyed", True)]
    with pytest.raises(walfs.BufferTooSmallError) as e:
        w.engine.read("z", 0, 0, bytearray(1), recs)
    assert e.value.needed == 3
    assert w.engine.read("empty", 0, 0, buf, recs) == 0
