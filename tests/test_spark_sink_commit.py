"""The streaming sink's commit protocol, driven the way Spark drives it (tasks stage their
rows in commit messages, the driver commits or aborts a batch id), on a real WAL and
through a real walfs daemon: replays append nothing twice, aborted batches nothing. (A
batch write's tasks append their own rows: tests/test_spark_sink_retry.py.)

Spark itself replays a micro-batch after a driver failure with the same query and batch
id; these tests produce the two interleavings a SIGKILL can leave deterministically: the
whole commit done but not recorded by Spark, and the records appended but the sink's
cursor not yet moved (the crash between the two)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from kafka_harness import ServeProcess

import walfs
from walfs.engine.rules import committed_offsets
from walfs.spark import sink, sink_rows
from walfs.spark.options import WalfsOptionError, parse_sink_options
from walfs.spark.sink import GROUP_PREFIX, MARKER, StagedRows, WalfsStreamWriter, stage

QUERY = "0b7c5a34-query"


def rows_batch(rows: list[tuple[str, int, str]]) -> pa.RecordBatch:
    """These (topic, partition, value) rows as Spark hands them to a task."""
    return pa.RecordBatch.from_pydict(
        {
            "topic": [t for t, _, _ in rows],
            "partition": pa.array([p for _, p, _ in rows], pa.int32()),
            "value": [v for _, _, v in rows],
        }
    )


def task_message(rows: list[tuple[str, int, str]]) -> object:
    """What one streaming write's Spark task hands the driver for these rows."""
    return stage(iter([rows_batch(rows)]), None)


@contextmanager
def writer(tmp_path: Path, remote: bool) -> Iterator[tuple[WalfsStreamWriter, Path]]:
    data = tmp_path / "data"
    if not remote:
        yield WalfsStreamWriter(parse_sink_options({"path": str(data), "queryId": QUERY})), data
        return
    serve = ServeProcess(data)
    try:
        yield WalfsStreamWriter(parse_sink_options({"bootstrap": serve.bootstrap, "queryId": QUERY})), data
    finally:
        rc, err = serve.stop()
        assert rc == 0, err


def contents(data: Path) -> dict[tuple[str, int], list[str]]:
    with walfs.Wal(data, read_only=True) as wal:
        return {
            (t, p): [r.value.decode() for r in wal.read_records(t, 0, p, 100_000)] for t, p in wal.streams()
        }


BATCH_3 = [
    [("out", 0, "a"), ("out", 1, "b"), ("other", 0, "c")],
    [("out", 0, "d"), ("out", 1, "e")],
]
BATCH_4 = [[("out", 0, "f")]]


@pytest.mark.parametrize("remote", [False, True], ids=["local", "daemon"])
def test_replayed_batch_appends_nothing_twice(tmp_path: Path, remote: bool) -> None:
    with writer(tmp_path, remote) as (w, data):
        w.commit([task_message(rows) for rows in BATCH_3], 3)
        # Spark did not record batch 3 as done (its driver died): it runs it again.
        w.commit([task_message(rows) for rows in BATCH_3], 3)
        w.commit([task_message(rows) for rows in BATCH_4], 4)
        w.commit([task_message(rows) for rows in BATCH_4], 4)
    assert contents(data) == {("out", 0): ["a", "d", "f"], ("out", 1): ["b", "e"], ("other", 0): ["c"]}


@pytest.mark.parametrize("remote", [False, True], ids=["local", "daemon"])
def test_crash_between_append_and_cursor_is_found_by_its_marker(tmp_path: Path, remote: bool) -> None:
    data = tmp_path / "data"
    with walfs.Wal(data) as wal:
        wal.append("out", [b"from another writer"])
        wal.create("out", 1)  # a daemon serves partitions that exist (Kafka's rule)
    with writer(tmp_path, remote) as (w, _):
        w.commit([task_message(rows) for rows in BATCH_3], 3)
    # The driver died after appending batch 3 but before moving the sink's cursors: put
    # the cursors back where they were before the batch (the WAL's one commit rule).
    group = GROUP_PREFIX + QUERY
    with walfs.Wal(data) as wal:
        for t, p in wal.streams():
            before = 1 if (t, p) == ("out", 0) else 0
            assert wal.committed(group, t, p) is not None
            wal.commit(group, t, before, p)
        wal.append("out", [b"appended meanwhile"])
        marks = [r.headers for t, p in wal.streams() for r in wal.read_records(t, 0, p) if r.headers]
    # One marker per stream, on the first record of the batch's rows there.
    assert sorted(h[0][1].decode() for h in marks) == [f"{QUERY}:3:0:1", f"{QUERY}:3:0:2", f"{QUERY}:3:0:2"]
    assert all(h[0][0] == MARKER for h in marks)
    with writer(tmp_path, remote) as (w, _):
        w.commit([task_message(rows) for rows in BATCH_3], 3)  # the replay
        w.commit([task_message(rows) for rows in BATCH_4], 4)
    assert contents(data) == {
        ("out", 0): ["from another writer", "a", "d", "appended meanwhile", "f"],
        ("out", 1): ["b", "e"],
        ("other", 0): ["c"],
    }


def test_aborted_batch_leaves_nothing_and_a_query_needs_an_identity(tmp_path: Path) -> None:
    data = tmp_path / "data"
    walfs.Wal(data).close()
    w = WalfsStreamWriter(parse_sink_options({"path": str(data), "queryId": QUERY}))
    # Tasks staged their rows, one failed (None): Spark aborts the batch.
    w.abort([task_message(BATCH_3[0]), None], 5)
    assert contents(data) == {}
    # Without queryId, the query's id comes from its checkpoint (Spark writes it there).
    ckpt = tmp_path / "ckpt"
    no_id = WalfsStreamWriter(parse_sink_options({"path": str(data), "checkpointLocation": str(ckpt)}))
    with pytest.raises(WalfsOptionError, match="queryId"):
        no_id.commit([task_message(BATCH_4[0])], 0)
    ckpt.mkdir()
    (ckpt / "metadata").write_text(json.dumps({"id": "from-the-checkpoint"}))
    no_id.commit([task_message(BATCH_4[0])], 0)
    with walfs.Wal(data, read_only=True) as wal:
        assert committed_offsets(wal.engine, GROUP_PREFIX + "from-the-checkpoint") == {("out", 0): 0}


def test_a_stream_larger_than_a_chunk_is_appended_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of one stream beyond CHUNK_BYTES go in several appends, each marked with its
    chunk number and size; a replay of the batch appends none of them again."""
    monkeypatch.setattr(sink_rows, "CHUNK_BYTES", 1000)
    data = tmp_path / "data"
    rows = [("out", 0, f"{i}" + "x" * 400) for i in range(5)]
    w = WalfsStreamWriter(parse_sink_options({"path": str(data), "queryId": QUERY}))
    w.commit([task_message(rows)], 0)
    with walfs.Wal(data) as wal:
        markers = [r.headers[0][1] for r in wal.read_records("out", 0, 0, 10) if r.headers]
        assert markers == [f"{QUERY}:0:0:2".encode(), f"{QUERY}:0:1:2".encode(), f"{QUERY}:0:2:1".encode()]
        assert wal.committed(GROUP_PREFIX + QUERY, "out") == 0
    w.commit([task_message(rows)], 0)
    assert [v[0] for v in contents(data)[("out", 0)]] == ["0", "1", "2", "3", "4"]


@pytest.mark.parametrize("remote", [False, True], ids=["local", "daemon"])
def test_a_batch_larger_than_the_daemons_message_limit_is_written_whole(tmp_path: Path, remote: bool) -> None:
    """3 MiB of rows for one stream: through a daemon, whose Produce batches Kafka's default
    message.max.bytes (1 MiB) bounds, they go in chunks that fit (one chunk was refused
    with MESSAGE_TOO_LARGE); every row lands once, in order, and a replay adds none."""
    rows = [("big", 0, f"{i:06d}" + "y" * 1000) for i in range(3000)]
    with writer(tmp_path, remote) as (w, data):
        w.commit([task_message(rows)], 0)
        w.commit([task_message(rows)], 0)
    assert [v[:6] for v in contents(data)[("big", 0)]] == [f"{i:06d}" for i in range(3000)]


def test_a_daemon_with_a_lowered_message_limit_takes_a_large_batch_whole(tmp_path: Path) -> None:
    """The sink asks the daemon for its limits (DescribeConfigs): the daemon's
    message.max.bytes, lowered here to 64 KiB, and one topic's max.message.bytes, lower
    still (20 000). 1.5 MiB of rows per stream go in batches under each limit (a fixed
    chunk size was refused with MESSAGE_TOO_LARGE); every row lands once, in order, from a
    batch write and from a streaming batch and its replay."""
    data = tmp_path / "data"
    with walfs.Wal(data) as wal:
        wal.create("narrow", 0)
        wal.retention("narrow", max_message_bytes=20_000)
    serve = ServeProcess(data, "--kafka-config", "message.max.bytes=65536")
    try:
        opts = {"bootstrap": serve.bootstrap, "queryId": QUERY}
        for topic in ("wide", "narrow"):
            rows = [(topic, 0, f"{i:06d}" + "z" * 1000) for i in range(1500)]
            # A batch write's task appends its rows itself (write_task: what write does
            # in Spark partition 0's first attempt).
            sink.WalfsBatchWriter(parse_sink_options(opts)).write_task(0, 0, iter([rows_batch(rows)]))
            stream = WalfsStreamWriter(parse_sink_options(opts))
            stream.commit([task_message(rows)], 7)
            stream.commit([task_message(rows)], 7)  # the replay appends nothing
    finally:
        rc, err = serve.stop()
        assert rc == 0, err
    expected = [f"{i:06d}" for i in range(1500)] * 2
    got = contents(data)
    assert [v[:6] for v in got[("wide", 0)]] == expected
    assert [v[:6] for v in got[("narrow", 0)]] == expected
    with walfs.Wal(data, read_only=True) as wal:
        # The stream's chunks: each under its topic's limit, so more of them for "narrow".
        markers = {
            t: [r.headers[0][1].decode() for r in wal.read_records(t, 1500, 0, 1500) if r.headers]
            for t in ("wide", "narrow")
        }
    assert len(markers["narrow"]) > len(markers["wide"]) >= 1500 * 1040 // 65536
    assert all(m.startswith(f"{QUERY}:7:") for ms in markers.values() for m in ms)


def test_staged_rows_are_compressed_only_when_they_compress(tmp_path: Path) -> None:
    """A task's commit message carries its rows lz4-compressed when a sample shrinks
    (here 20x), as they are when it would not (random bytes); the driver reads both."""
    rng = random.Random(5)
    plain = [("out", 0, f"{i:06d}" + "a" * 500) for i in range(200)]
    noise = [("out", 1, rng.randbytes(250).hex()) for _ in range(200)]
    small, large = task_message(plain), task_message(noise)
    assert isinstance(small, StagedRows) and isinstance(large, StagedRows)
    assert len(small.ipc) < 200 * 506 / 20
    assert len(large.ipc) > 200 * 500
    w = WalfsStreamWriter(parse_sink_options({"path": str(tmp_path / "data"), "queryId": QUERY}))
    w.commit([small, large], 0)
    assert contents(tmp_path / "data") == {
        ("out", 0): [v for _, _, v in plain],
        ("out", 1): [v for _, _, v in noise],
    }
