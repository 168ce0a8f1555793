"""The engine conformance suite: one set of tests written against the engine interface
(walfs/engine/contract.py) alone, run over every engine in ENGINES. Today the local C core;
issue 16 adds the Kafka cluster engine to ENGINES (a target and the options that make it
small), and every test here must then pass on it too. Engine-specific tests (power cuts,
damage, segment reclamation) stay in their own files.

Each test names the contract sentence of engine_api.py that it checks."""

import array
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from walfs.engine.contract import LogEngine
from walfs.engine.records import encode_meta
from walfs.engine.rules import (
    append_lines,
    append_nowait,
    append_pieces,
    appender,
    committed_offset,
    durable_end,
    read_records,
    wait_for,
)
from walfs.engine.types import REC_LAYOUT, REC_SIZE, Change, StreamInfo
from walfs.errors import (
    BufferTooSmallError,
    InvalidPartitionError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    WalClosedError,
    WalError,
    WalLockedError,
)
from walfs.open import open_engine
from walfs.wire.batch_codec import read_kafka_batch
from walfs.wire.record_batch import decode_batches, header_field

BOUND_S = 60.0  # every wait in this file is bounded; none is a speed assertion


@dataclass
class EngineKind:
    """How to make a small engine of one kind for a test: `target(tmp)` names a fresh log,
    `options` make it small. Issue 16 adds a Kafka kind (target kafka://...)."""

    target: Callable[[str], str]
    options: dict[str, Any] = field(default_factory=dict)
    exclusive_writer: bool = True  # a second writer on the same log gets WalLockedError


def kafka_target(tmp: str) -> str:
    """A fresh namespace on one real single-node Kafka broker shared by the run
    (tests/real_kafka.py; `make kafka` fetched its jars)."""
    from real_kafka import fresh_target

    return fresh_target()


ENGINES: dict[str, EngineKind] = {
    "local": EngineKind(
        target=lambda tmp: os.path.join(tmp, "wal"),
        options={"segment_size": 1 << 20, "block_size": 64 << 10},
    ),
    # Several writers may share a cluster log (several mounts): no writer lock there.
    "kafka": EngineKind(target=kafka_target, options={"timeout_s": 30.0}, exclusive_writer=False),
}


@dataclass
class Maker:
    """Opens engines of one kind on one log (the same target for every call) and closes
    whatever the test left open."""

    kind: EngineKind
    target: str
    opened: list[LogEngine] = field(default_factory=list)

    def __call__(self, **kw: Any) -> LogEngine:
        opts = {**self.kind.options, **kw}
        e = open_engine(self.target, **opts)
        self.opened.append(e)
        return e


@pytest.fixture(params=sorted(ENGINES))
def make(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Maker]:
    kind = ENGINES[request.param]
    m = Maker(kind, kind.target(str(tmp_path)))
    yield m
    for e in m.opened:
        if not e.closed:
            try:
                e.close()
            except WalError:
                pass


def plain(values: list[bytes]) -> tuple[bytes, array.array, array.array]:
    return b"".join(values), array.array("I", bytes(4 * len(values))), array.array("I", map(len, values))


def read_all(e: LogEngine, topic: str, partition: int = 0, offset: int | None = None) -> list[bytes]:
    """Every value from `offset` (the low watermark) to the high watermark, through read()."""
    out: list[bytes] = []
    at = e.info(topic, partition).low_watermark if offset is None else offset
    while True:
        recs = read_records(e, topic, partition, at, 1000)
        if not recs:
            return out
        for r in recs:
            assert r.offset == at
            out.append(r.value)
            at += 1


def view(
    e: LogEngine, topic: str, partition: int = 0, start: int | None = None, chunk: int = 1 << 16
) -> bytes:
    """The whole byte view from `start` (low_byte) on, read in `chunk`-byte pieces."""
    pos = e.info(topic, partition).low_byte if start is None else start
    parts = []
    buf = bytearray(chunk)
    while True:
        n = e.read_bytes(topic, partition, pos, buf)
        if n == 0:
            return b"".join(parts)
        parts.append(bytes(buf[:n]))
        pos += n


SIZES = [
    0,
    1,
    2,
    3,
    7,
    8,
    9,
    15,
    16,
    17,
    63,
    64,
    65,
    255,
    256,
    257,
    1000,
    4095,
    4096,
    4097,
    65535,
    65536,
    65537,
    200_000,
]


def value_of(size: int, k: int) -> bytes:
    """No b"\\n" inside, so that the byte view splits back into the values."""
    return bytes((k * 7 + i) % 251 % 10 + 48 for i in range(size))


# -- appends and reads -------------------------------------------------------------------
def test_append_and_read_every_size_from_zero_bytes(make: Maker) -> None:
    """append / Appender.append return dense offsets; read() returns each record whole."""
    e = make(fsync="never")
    a = appender(e, "sizes")
    expect = []
    for k, size in enumerate(SIZES):
        v = value_of(size, k)
        if k % 2:
            assert a.append(v) == len(expect)
        else:
            assert e.append("sizes", 0, *plain([v])) == len(expect)
        expect.append(v)
    # One batch of every size too.
    first = e.append("sizes", 0, *plain([value_of(s, s) for s in SIZES]))
    assert first == len(SIZES)
    expect += [value_of(s, s) for s in SIZES]
    assert read_all(e, "sizes") == expect
    i = e.info("sizes")
    assert (i.low_watermark, i.high_watermark) == (0, len(expect))
    assert i.byte_size == sum(len(v) + 1 for v in expect)
    # Reopened, the same (close made it durable).
    e.close()
    e2 = make(fsync="never", read_only=True)
    assert read_all(e2, "sizes") == expect


def test_the_appender_takes_empty_values_and_any_buffer(make: Maker) -> None:
    """Appender.append: a 0-byte value, and bytearray / memoryview values, are records."""
    e = make(fsync="never")
    a = appender(e, "buf", 2)
    assert a.append(b"") == 0
    assert a.append(bytearray(b"from a bytearray")) == 1
    assert a.append(memoryview(b"..a memoryview..")[2:-2]) == 2
    assert read_all(e, "buf", 2) == [b"", b"from a bytearray", b"a memoryview"]
    assert view(e, "buf", 2) == b"\nfrom a bytearray\na memoryview\n"


def test_read_fills_caller_buffers_with_descriptors(make: Maker) -> None:
    """read(): bodies back to back in buf, one REC_LAYOUT descriptor each in recs."""
    e = make(fsync="never")
    meta = encode_meta(b"k1", [("h", b"v")], 1234)
    data = meta + b"value-1" + b"v2"
    e.append("t", 3, data, array.array("I", [len(meta), 0]), array.array("I", [7, 2]))
    assert REC_SIZE == sum(int(t[2:]) for _, t in REC_LAYOUT)
    buf = bytearray(1 << 12)
    recs = bytearray(REC_SIZE * 8)
    n = e.read("t", 3, 0, buf, recs)
    assert n == 2
    words = memoryview(recs).cast("Q")
    # descriptor k: gid, offset, timestamp, meta_len | value_len << 32, buf_pos
    assert [words[1], words[6]] == [0, 1]
    assert words[3] & 0xFFFFFFFF == len(meta) and words[3] >> 32 == 7
    assert words[8] & 0xFFFFFFFF == 0 and words[8] >> 32 == 2
    pos0, pos1 = words[4], words[9]
    assert bytes(buf[pos0 : pos0 + len(meta) + 7]) == meta + b"value-1"
    assert bytes(buf[pos1 : pos1 + 2]) == b"v2"
    r = read_records(e, "t", 3, 0)
    assert (r[0].key, list(r[0].headers), r[0].timestamp_ms, r[0].value) == (
        b"k1",
        [("h", b"v")],
        1234,
        b"value-1",
    )
    # max_records, and the length of recs, bound a read.
    assert e.read("t", 3, 0, buf, recs, max_records=1) == 1
    assert e.read("t", 3, 0, buf, bytearray(REC_SIZE)) == 1
    # At the high watermark: 0 records.
    assert e.read("t", 3, 2, buf, recs) == 0


def test_a_record_larger_than_the_buffer_says_how_much_it_needs(make: Maker) -> None:
    e = make(fsync="never")
    e.append("big", 0, *plain([b"x" * 10_000]))
    with pytest.raises(BufferTooSmallError) as err:
        e.read("big", 0, 0, bytearray(100), bytearray(REC_SIZE))
    assert err.value.needed >= 10_000
    assert e.read("big", 0, 0, bytearray(err.value.needed), bytearray(REC_SIZE)) == 1


def test_read_kafka_batch_is_what_read_returns_as_one_kafka_batch(make: Maker) -> None:
    """read_kafka_batch(): the records read() returns as one Kafka v2 batch; at least one
    record even larger than max_bytes; b"" at the high watermark; OffsetOutOfRangeError
    past it."""
    e = make(fsync="never")
    meta = encode_meta(b"k1", [("h", b"v"), ("n", None)], 1234)
    e.append("kb", 1, meta + b"value-1" + b"v2", array.array("I", [len(meta), 0]), array.array("I", [7, 2]))
    e.append("kb", 1, *plain([value_of(s, s) for s in (0, 100, 70_000)]))
    assert read_kafka_batch(e, "kb", 0, 0, 10, 1 << 20) == b""  # a partition never written

    def decoded(batch: Any) -> tuple[int, list[tuple[Any, ...]]]:
        raw = bytes(batch)
        (b,) = decode_batches(raw)  # lengths and the CRC-32C checked
        return header_field(raw, "base_offset"), [(r.key, r.value, r.headers) for r in b.records]

    first, got = decoded(read_kafka_batch(e, "kb", 1, 0, 100, 1 << 20))
    want = [(r.key, r.value, list(r.headers)) for r in read_records(e, "kb", 1, 0, 100)]
    assert first == 0 and got == want and len(got) == 5
    assert got[0] == (b"k1", b"value-1", [("h", b"v"), ("n", None)])
    assert decoded(read_kafka_batch(e, "kb", 1, 1, 2, 1 << 20)) == (1, want[1:3])
    assert decoded(read_kafka_batch(e, "kb", 1, 2, 100, 1)) == (2, want[2:3])
    assert decoded(read_kafka_batch(e, "kb", 1, 4, 100, 10)) == (4, want[4:5])  # 70 000 bytes
    assert read_kafka_batch(e, "kb", 1, 5, 100, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRangeError):
        read_kafka_batch(e, "kb", 1, 6, 100, 1 << 20)


def test_byte_view_matches_the_records_and_locate_maps_both_ways(make: Maker) -> None:
    """The byte view is each value followed by b"\\n"; locate(offset=) / locate(byte=) map
    between record offsets and view positions, at every boundary."""
    e = make(fsync="never")
    values = [value_of(s, s) for s in (5, 0, 1, 300, 70_000, 2, 0, 9)]
    e.append("v", 0, *plain(values))
    whole = b"".join(v + b"\n" for v in values)
    assert view(e, "v") == whole
    for chunk in (1, 3, 4096):
        assert view(e, "v", chunk=chunk) == whole
    starts = [0]
    for v in values:
        starts.append(starts[-1] + len(v) + 1)
    for k, pos in enumerate(starts):
        assert e.locate("v", offset=k) == pos
        if k < len(values):
            # Every byte of record k (its newline too) belongs to record k.
            for b in {pos, pos + len(values[k]) // 2, pos + len(values[k])}:
                assert e.locate("v", byte=b) == k
    assert e.locate("v", byte=len(whole)) == len(values)
    assert e.locate("v", byte=len(whole) + 100) == len(values)
    buf = bytearray(10)
    assert e.read_bytes("v", 0, len(whole), buf) == 0
    # A view read from the middle of a record.
    assert e.read_bytes("v", 0, 3, buf) == 10 and bytes(buf) == whole[3:13]
    # The lines face appends the same bytes as records.
    append_lines(e, "lines", 0, whole)
    assert read_all(e, "lines") == values and view(e, "lines") == whole


def test_append_lines_counts_lines_and_a_final_newline_ends_the_last(make: Maker) -> None:
    e = make(fsync="never")
    assert append_lines(e, "l", 0, b"a\nbb\n") == (0, 2)
    assert append_lines(e, "l", 0, b"c") == (2, 1)
    assert append_lines(e, "l", 0, b"\n\n") == (3, 2)
    assert read_all(e, "l") == [b"a", b"bb", b"c", b"", b""]


def test_locate_by_time(make: Maker) -> None:
    e = make(fsync="never")
    e.append("ts", 0, *plain([b"a", b"b"]))
    ts = read_records(e, "ts", 0, 0)[0].timestamp_ms
    assert e.locate("ts", timestamp_ms=ts - 60_000) == 0
    assert e.locate("ts", timestamp_ms=ts + 60_000) == 2
    assert e.locate("nothing", timestamp_ms=0) == 0


# -- streams ----------------------------------------------------------------------------
def test_streams_create_info_and_delete(make: Maker) -> None:
    e = make(fsync="never")
    assert e.streams() == [] and e.info("a") == StreamInfo(
        e.org_id, "a", e.info("a").topic_hash, 0, 0, 0, 0, 0, 0
    )
    e.create("b", 2)
    e.create("b", 2)  # a no-op
    e.append("a", 0, *plain([b"1"]))
    e.append("b", 0, *plain([b"2", b"3"]))
    assert e.streams() == [("a", 0), ("b", 0), ("b", 2)]
    assert e.streams("b") == [("b", 0), ("b", 2)] and e.streams("zz") == []
    assert e.info("b", 2).high_watermark == 0
    i = e.info("b")
    assert (i.topic, i.partition, i.high_watermark, i.byte_size, i.org_id) == ("b", 0, 2, 4, e.org_id)
    assert len(bytes.fromhex(i.topic_hash)) == 16 and i.topic_hash != e.info("a").topic_hash
    e.commit("g", "b", 0, 1)
    assert e.delete("b") == [0, 2]
    assert e.delete("b") == []
    assert e.streams() == [("a", 0)] and committed_offset(e, "g", "b") is None
    # The name is used again from offset 0.
    assert e.append("b", 0, *plain([b"new"])) == 0
    assert read_all(e, "b") == [b"new"]
    e.close()
    e2 = make(fsync="never")
    assert e2.streams() == [("a", 0), ("b", 0)] and read_all(e2, "b") == [b"new"]


def test_an_appender_survives_its_stream_being_deleted(make: Maker) -> None:
    """Appender contract: after a delete, its next append creates the new stream."""
    e = make(fsync="never")
    a = appender(e, "d", 1)
    assert [a.append(b"x"), a.append(b"y")] == [0, 1]
    e.delete("d")
    assert a.append(b"z") == 0
    assert read_all(e, "d", 1) == [b"z"]


# -- watch --------------------------------------------------------------------------------
def test_watch_reports_creates_appends_trims_and_deletes(make: Maker) -> None:
    e = make(fsync="never")
    seen: list[Change] = []
    stop = e.watch(seen.append)
    e.create("w", 0)
    e.append("w", 0, *plain([b"a", b"b"]))
    appender(e, "w", 0).append(b"c")
    append_lines(e, "w", 0, b"d\n")
    e.trim("w", 0, 2)
    e.delete("w")
    stop()
    e.append("w", 0, *plain([b"after"]))
    assert [(c.kind, c.topic, c.partition) for c in seen] == [
        ("create", "w", 0),
        ("append", "w", 0),
        ("append", "w", 0),
        ("append", "w", 0),
        ("trim", "w", 0),
        ("delete", "w", 0),
    ]


class CountingEngine:
    """Forwards to an engine and counts info() calls: shows that a waiter does not poll."""

    def __init__(self, engine: LogEngine) -> None:
        self._e = engine
        self.info_calls = 0

    def info(self, topic: str, partition: int = 0) -> StreamInfo:
        self.info_calls += 1
        return self._e.info(topic, partition)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._e, name)


def test_wait_for_is_woken_by_an_append_without_polling(make: Maker) -> None:
    e = make(fsync="never")
    counting = CountingEngine(e)
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(wait_for(counting, "q", 0, 0, timeout=BOUND_S)))  # type: ignore[arg-type]
    t.start()
    # The waiter is parked on watch(): while nothing happens on its stream it reads the
    # marks once, not every few milliseconds. (An idle period, not a speed bound.)
    idle = threading.Event()
    idle.wait(0.5)
    e.append("other", 0, *plain([b"not this stream"]))
    idle.wait(0.2)
    assert counting.info_calls <= 3
    assert t.is_alive()
    appender(e, "q").append(b"wake up")
    t.join(BOUND_S)
    assert result == [True]
    # Timeouts and close end a wait with False.
    assert wait_for(e, "q", 0, 5, timeout=0.05) is False
    late: list[bool] = []
    t2 = threading.Thread(target=lambda: late.append(wait_for(e, "q", 0, 5, timeout=BOUND_S)))
    t2.start()
    idle.wait(0.2)
    e.close()
    t2.join(BOUND_S)
    assert late == [False]


# -- trims --------------------------------------------------------------------------------
def test_trim_raises_the_low_watermark_durably(make: Maker) -> None:
    e = make(fsync="never")
    values = [value_of(10 + k, k) for k in range(50)]
    e.append("tr", 0, *plain(values))
    e.trim("tr", 0, 20)
    e.trim("tr", 0, 5)  # lower: a no-op
    i = e.info("tr")
    assert (i.low_watermark, i.high_watermark) == (20, 50)
    assert i.low_byte == sum(len(v) + 1 for v in values[:20]) == e.locate("tr", offset=20)
    assert read_all(e, "tr") == values[20:]
    assert view(e, "tr") == b"".join(v + b"\n" for v in values[20:])
    with pytest.raises(OffsetOutOfRangeError):
        e.read("tr", 0, 19, bytearray(1024), bytearray(REC_SIZE))
    with pytest.raises(OffsetOutOfRangeError):
        e.read_bytes("tr", 0, i.low_byte - 1, bytearray(8))
    with pytest.raises(OffsetOutOfRangeError):
        e.trim("tr", 0, 51)
    e.trim("tr", 0, 50)  # to the end: empty, appends go on from 50
    assert e.append("tr", 0, *plain([b"next"])) == 50
    e.close()
    e2 = make(fsync="never")
    assert (e2.info("tr").low_watermark, read_all(e2, "tr")) == (50, [b"next"])
    e2.trim("never-made", 0, 0)  # an empty stream trims to 0
    with pytest.raises(OffsetOutOfRangeError):
        e2.trim("never-made", 0, 1)


# -- cursors --------------------------------------------------------------------------------
def test_cursor_commits_and_their_limits(make: Maker) -> None:
    e = make(fsync="never")
    e.append("c", 0, *plain([b"a", b"b", b"c"]))
    assert committed_offset(e, "g", "c") is None and e.groups() == []
    assert e.commit("g", "c", 0, 2) is True
    # A commit makes the records it passes durable first.
    assert e.info("c").durable_watermark >= 2
    assert e.commit("g", "c", 0, 1, advance_only=True) is False
    assert committed_offset(e, "g", "c") == 2
    assert e.commit("g", "c", 0, 1) is True  # a seek moves it back
    assert e.commit("g", "c", 0, 3, advance_only=True) is True  # up to the high watermark
    with pytest.raises(OffsetOutOfRangeError):
        e.commit("g", "c", 0, 4)
    with pytest.raises(OffsetOutOfRangeError):
        e.commit("g", "c", 0, -1)
    with pytest.raises(OffsetOutOfRangeError):
        e.commit("g", "empty", 0, 1)
    e.commit("g", "empty", 0, 0)
    with pytest.raises(InvalidTopicError):
        e.commit("bad/group", "c", 0, 0)
    e.create_group("idle")
    e.create_group("idle")
    assert e.groups() == ["g", "idle"] and committed_offset(e, "idle", "c") is None
    e.close()
    e2 = make(fsync="never")
    assert committed_offset(e2, "g", "c") == 3 and e2.groups() == ["g", "idle"]


# -- org views (Kafka tenants) -------------------------------------------------------------
def test_org_views_see_only_their_own_streams_groups_and_changes(make: Maker) -> None:
    e = make(fsync="never")
    assert e.for_org(e.org_id) is e
    with pytest.raises(ValueError):
        e.for_org(-1)
    other = e.for_org(7)
    assert other.org_id == 7 and e.org_id != 7
    seen: list[tuple[str, str, int]] = []
    stop = other.watch(lambda c: seen.append((c.kind, c.topic, c.partition)))
    # One name, two orgs: two streams that never mix.
    e.append("t", 0, *plain([b"mine-0", b"mine-1"]))
    other.append("t", 0, *plain([b"theirs-0"]))
    other.append("only-theirs", 0, *plain([b"x"]))
    assert read_all(e, "t") == [b"mine-0", b"mine-1"]
    assert read_all(other, "t") == [b"theirs-0"]
    assert e.streams() == [("t", 0)]
    assert other.streams() == [("only-theirs", 0), ("t", 0)]
    assert other.info("t").high_watermark == 1 and e.info("t").high_watermark == 2
    # The view's watcher saw its own appends and stream creation, none of the owner's.
    assert ("append", "t", 0) in seen and ("append", "only-theirs", 0) in seen
    assert seen.count(("append", "t", 0)) == 1
    stop()
    # Groups: same name in both orgs, separate cursors; each org lists only its own.
    e.commit("g", "t", 0, 2)
    other.commit("g", "t", 0, 1)
    other.create_group("tenant-only")
    assert committed_offset(e, "g", "t") == 2 and committed_offset(other, "g", "t") == 1
    assert e.groups() == ["g"] and other.groups() == ["g", "tenant-only"]
    assert other.forget("g") is True
    assert committed_offset(e, "g", "t") == 2 and e.groups() == ["g"]
    assert committed_offset(other, "g", "t") is None and other.groups() == ["tenant-only"]
    assert other.forget("g") is False
    # Trims and deletes stay in their org.
    other.trim("t", 0, 1)
    assert e.info("t").low_watermark == 0
    assert other.delete("only-theirs") == [0]
    assert e.streams() == [("t", 0)]
    # The view shares the owner's lifetime: closing it is a no-op, closing the owner ends both.
    other.close()
    assert not e.closed and not other.closed
    e.append("t", 0, *plain([b"mine-2"]))
    e.close()
    assert other.closed
    e2 = make(fsync="never")
    o2 = e2.for_org(7)
    assert read_all(o2, "t") == [] and o2.info("t").low_watermark == 1
    assert o2.groups() == ["tenant-only"] and e2.groups() == ["g"]
    assert read_all(e2, "t") == [b"mine-0", b"mine-1", b"mine-2"]


def test_racing_advance_only_commits_never_move_a_cursor_back(make: Maker) -> None:
    e = make(fsync="never")
    e.append("r", 0, *plain([b"x"] * 400))
    errors: list[BaseException] = []

    def committer(offsets: range) -> None:
        try:
            for o in offsets:
                e.commit("g", "r", 0, o, advance_only=True)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=committer, args=(range(k, 401, 4),)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert not errors and committed_offset(e, "g", "r") == 400


# -- durability under the fsync policies ------------------------------------------------------
@pytest.mark.parametrize("policy", ["never", "interval", "always"])
def test_durable_watermark_under_each_fsync_policy(make: Maker, policy: str) -> None:
    e = make(fsync=policy, fsync_interval_ms=20)
    a = appender(e, "d")
    for k in range(20):
        a.append(b"r%d" % k)
        if policy == "always":  # durable when append returns
            assert e.info("d").durable_watermark == k + 1
    e.append("d", 0, *plain([b"batch"] * 5))
    if policy == "always":
        assert e.info("d").durable_watermark == 25
    e.sync()
    assert e.info("d").durable_watermark == 25 == e.info("d").high_watermark
    e.append("d", 0, *plain([b"more"]))
    # A consumer's end: syncs when published records lie past the durable mark.
    assert durable_end(e, "d", 0, 25) == 26 == e.info("d").durable_watermark


@pytest.mark.parametrize("policy", ["never", "interval", "always"])
def test_append_unsynced_is_published_at_once_and_durable_after_sync(make: Maker, policy: str) -> None:
    # The Kafka listener's acks=all: appended without the policy's own wait, then one
    # sync covers it (and every append before it).
    e = make(fsync=policy, fsync_interval_ms=3_600_000)
    assert e.append("u", 0, *plain([b"a", b"b"]), wait=False) == 0
    assert e.append("u", 0, *plain([b"c"]), wait=False) == 2
    assert e.info("u").high_watermark == 3
    assert read_all(e, "u") == [b"a", b"b", b"c"]
    e.sync()
    assert e.info("u").durable_watermark == 3
    with pytest.raises(ValueError):  # the lengths do not add up to the data
        e.append("u", 0, b"xy", array.array("I", [0]), array.array("I", [1]), wait=False)


def test_append_nowait_appends_or_refuses_with_nothing_appended(make: Maker) -> None:
    # The Kafka listener's in-place produce: an offset when the engine appended without
    # waiting (published, durable after a sync), None when it would have waited, with
    # nothing appended then. It never creates a stream. The cluster engine always refuses.
    e = make(fsync="never")
    assert append_nowait(e, "n", 0, *plain([b"a"])) is None
    assert e.streams() == []
    e.append("n", 0, *plain([b"a", b"b"]))
    got = append_nowait(e, "n", 0, *plain([b"c"]))
    if got is None:
        assert read_all(e, "n") == [b"a", b"b"]
        assert e.info("n").high_watermark == 2
    else:
        assert got == 2
        assert read_all(e, "n") == [b"a", b"b", b"c"]
        e.sync()
        assert e.info("n").durable_watermark == 3
    with pytest.raises(ValueError):  # the lengths do not add up to the data
        append_nowait(e, "n", 0, b"xy", array.array("I", [0]), array.array("I", [1]))


def test_append_pieces_is_append_of_the_pieces_joined(make: Maker) -> None:
    """append_pieces: the bodies lie in the pieces' concatenation, a body may span pieces
    (cut inside its meta section, inside its value, across an empty piece, over three
    pieces), and the batch is the same as append of the pieces joined. Lengths that do
    not add up to the pieces: ValueError, nothing appended."""
    e = make(fsync="never")
    metas = [encode_meta(b"k%d" % i, [("h", b"v" * i)], 1000 + i) if i % 3 == 0 else b"" for i in range(9)]
    values = [value_of(size, i) for i, size in enumerate([5, 0, 4097, 1, 300, 0, 2000, 7, 64])]
    data = b"".join(m + v for m, v in zip(metas, values, strict=True))
    meta_lens, value_lens = array.array("I", map(len, metas)), array.array("I", map(len, values))
    cuts = [0, 3, 3, 40, 41, 2500, 4200, 4200, 4201, 6000, len(data)]  # some inside a body
    pieces: list[Any] = [data[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    pieces[1] = bytearray(pieces[1])
    pieces[4] = memoryview(b"." + pieces[4] + b".")[1:-1]
    assert e.append("p", 0, b"x", array.array("I", [0]), array.array("I", [1])) == 0
    assert append_pieces(e, "p", 0, pieces, meta_lens, value_lens) == 1
    assert append_pieces(e, "p", 0, [data], meta_lens, value_lens) == 1 + len(values)
    got = read_records(e, "p", 0, 1, 100)
    assert [r.value for r in got] == values + values
    for r, m, i in zip(got, metas + metas, [*range(9), *range(9)], strict=True):
        if m:
            assert (r.key, list(r.headers), r.timestamp_ms) == (b"k%d" % i, [("h", b"v" * i)], 1000 + i)
        else:
            assert (r.key, list(r.headers)) == (None, [])
    with pytest.raises(ValueError):  # one byte short of the bodies
        append_pieces(e, "p", 0, [data[:-1]], meta_lens, value_lens)
    with pytest.raises(ValueError):  # one byte over
        append_pieces(e, "p", 0, [data, b"!"], meta_lens, value_lens)
    assert e.info("p").high_watermark == 1 + 2 * len(values)
    e.close()
    e2 = make(fsync="never", read_only=True)  # durable, whole, after close
    assert read_all(e2, "p") == [b"x"] + values + values


_KILLED_WRITER = """
import sys
from walfs.open import open_engine
target, policy = sys.argv[1], sys.argv[2]
opts = eval(sys.argv[3])
e = open_engine(target, fsync=policy, **opts)
from walfs.engine.rules import appender
a = appender(e, "acked")
k = 0
while True:
    a.append(b"record %d" % k)
    if policy != "always":
        e.sync()
    print(k, flush=True)  # acknowledged: durable before this line is written
    k += 1
"""


@pytest.mark.parametrize("policy", ["always", "never"])
def test_every_acknowledged_append_survives_a_killed_writer_process(make: Maker, policy: str) -> None:
    """Durable when append (always) or sync (never) returns: SIGKILL the writer process,
    reopen, and every record it acknowledged is there, once and in order."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, make.target, policy, repr(make.kind.options)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked = -1
    for line in proc.stdout:
        acked = int(line)
        if acked >= 200:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(BOUND_S)
    assert acked >= 200
    e = make(fsync="never")
    got = read_all(e, "acked")
    assert len(got) >= acked + 1
    assert got == [b"record %d" % k for k in range(len(got))]


# -- bad input ------------------------------------------------------------------------------
def test_bad_input_gets_clear_errors(make: Maker) -> None:
    e = make(fsync="never")
    e.append("ok", 0, *plain([b"a"]))
    for bad in ["", ".", "..", "a/b", "x\0y", "é" * 200, ".consumers", "partition=1"]:
        with pytest.raises(InvalidTopicError):
            e.append(bad, 0, *plain([b"a"]))
        with pytest.raises(InvalidTopicError):
            e.info(bad)
    for part in [-1, 2**31, True, "0", 1.0]:
        with pytest.raises(InvalidPartitionError):
            e.append("ok", part, *plain([b"a"]))  # type: ignore[arg-type]
        with pytest.raises(InvalidPartitionError):
            e.info("ok", part)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        e.append("ok", 0, b"", array.array("I"), array.array("I"))
    with pytest.raises(ValueError):
        e.append("ok", 0, b"abc", array.array("I", [0]), array.array("I", [2]))
    with pytest.raises(ValueError):
        e.append("ok", 0, b"abc", array.array("I", [0, 0]), array.array("I", [3]))
    with pytest.raises(ValueError):
        append_lines(e, "ok", 0, b"")
    for off in (-1, 2, 10**12):
        with pytest.raises(OffsetOutOfRangeError):
            e.read("ok", 0, off, bytearray(64), bytearray(REC_SIZE))
        with pytest.raises(OffsetOutOfRangeError):
            e.locate("ok", offset=off)
    with pytest.raises(OffsetOutOfRangeError):
        e.read("empty", 0, 1, bytearray(64), bytearray(REC_SIZE))
    with pytest.raises(OffsetOutOfRangeError):
        e.read_bytes("ok", 0, -1, bytearray(4))
    with pytest.raises(OffsetOutOfRangeError):
        e.locate("ok", byte=-1)
    with pytest.raises(ValueError):
        e.locate("ok")
    with pytest.raises(ValueError):
        e.locate("ok", offset=0, byte=0)
    # Nothing of the above appended anything.
    assert e.info("ok").high_watermark == 1 and e.streams() == [("ok", 0)]


def test_read_only_engines_refuse_writes_and_a_second_writer_is_locked_out(make: Maker) -> None:
    e = make(fsync="never")
    e.append("t", 0, *plain([b"a"]))
    e.sync()
    if make.kind.exclusive_writer:
        with pytest.raises(WalLockedError):
            make(fsync="never")
    ro = make(read_only=True)
    assert read_all(ro, "t") == [b"a"]
    with pytest.raises(ReadOnlyError):
        ro.append("t", 0, *plain([b"b"]))
    with pytest.raises(ReadOnlyError):
        ro.trim("t", 0, 1)
    with pytest.raises(ReadOnlyError):
        ro.commit("g", "t", 0, 1)
    with pytest.raises(ReadOnlyError):
        ro.create_group("g2")
    assert ro.groups() == [] and committed_offset(e, "g", "t") is None
    e.close()
    e.close()  # idempotent
    assert e.closed
    with pytest.raises(WalClosedError):
        e.append("t", 0, *plain([b"b"]))
    with pytest.raises(WalClosedError):
        e.info("t")
    with pytest.raises(WalClosedError):
        appender(e, "t").append(b"x")


# -- threads and processes --------------------------------------------------------------------
def test_threads_append_to_shared_and_own_streams(make: Maker) -> None:
    """Every call is safe from any thread: offsets are dense and unique, records whole."""
    e = make(fsync="interval", fsync_interval_ms=10)
    n_threads, per = 6, 300
    offsets: dict[int, list[int]] = {k: [] for k in range(n_threads)}
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            a = appender(e, "shared")
            for i in range(per):
                v = b"t%d-%d" % (k, i)
                if i % 3 == 0:
                    offsets[k].append(e.append("shared", 0, *plain([v])))
                else:
                    offsets[k].append(a.append(v))
                append_lines(e, f"own-{k}", 0, v + b"\n")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert not errors
    every = sorted(o for v in offsets.values() for o in v)
    assert every == list(range(n_threads * per))
    got = read_all(e, "shared")
    for k in range(n_threads):
        assert [got[o] for o in offsets[k]] == [b"t%d-%d" % (k, i) for i in range(per)]
        assert read_all(e, f"own-{k}") == [b"t%d-%d" % (k, i) for i in range(per)]


def _reader_process(target: str, options: dict[str, Any], expect: int, out: Any) -> None:
    e = open_engine(target, read_only=True, **options)
    try:
        got = read_all(e, "p")
        out.put((len(got), got == [b"p%d" % k for k in range(len(got))], len(got) >= expect))
    finally:
        e.close()


def test_reader_processes_see_what_was_published_before_they_opened(make: Maker) -> None:
    e = make(fsync="never")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    expect = 0
    procs = []
    for _round in range(3):
        e.append("p", 0, *plain([b"p%d" % k for k in range(expect, expect + 500)]))
        expect += 500
        e.sync()
        p = ctx.Process(target=_reader_process, args=(make.target, make.kind.options, expect, out))
        p.start()
        procs.append(p)
        appender(e, "p").append(b"p%d" % expect)  # appends go on while they read
        expect += 1
    results = [out.get(timeout=BOUND_S) for _ in procs]
    for p in procs:
        p.join(BOUND_S)
        assert p.exitcode == 0
    assert all(in_order and enough for _n, in_order, enough in results)
