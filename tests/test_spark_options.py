"""Option parsing and planning of the walfs Spark source, without a SparkSession."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from kafka_harness import listener

import walfs
from walfs import OffsetOutOfRangeError
from walfs.spark.columnar import read_range, records_to_batch
from walfs.spark.options import (
    EARLIEST,
    LATEST,
    WalfsOptionError,
    parse_offset_spec,
    parse_options,
    parse_sink_options,
)
from walfs.spark.ranges import StreamBounds, from_json, resolve, split, to_json
from walfs.spark.remote_read import read_remote_range
from walfs.spark.schema import ARROW_SCHEMA
from walfs.spark.stream import cap_rows


def test_defaults_follow_kafka() -> None:
    batch = parse_options({"path": "/d"})
    stream = parse_options({"path": "/d"}, streaming=True)
    assert batch.starting.default == EARLIEST and stream.starting.default == LATEST
    assert batch.ending.default == LATEST
    assert batch.org_id == 1 and batch.fail_on_data_loss
    assert batch.max_offsets_per_trigger is None


def test_option_names_are_case_insensitive() -> None:
    opts = parse_options(
        {"PATH": "/d", "startingoffsets": "latest", "ORG_ID": "3", "maxoffsetspertrigger": "7"}
    )
    assert opts.path == "/d" and opts.starting.default == LATEST and opts.org_id == 3
    assert opts.max_offsets_per_trigger == 7


def test_topic_selection_rules() -> None:
    opts = parse_options({"path": "/d", "topic": "orders, cl?cks ,logs-[ab]", "topicPattern": "audit\\.\\d+"})
    existing = ["orders", "orders2", "clicks", "logs-a", "logs-c", "audit.1", "audit.x", "xaudit.1"]
    assert opts.select(existing) == ["audit.1", "clicks", "logs-a", "orders"]
    assert parse_options({"path": "/d"}).select(["b", "a"]) == ["a", "b"]


def test_offset_specs() -> None:
    spec = parse_offset_spec('{"t": {"0": 5, "2": -1}, "u": {"1": -2}}', "startingOffsets", EARLIEST)
    assert spec.explicit == {("t", 0): 5, ("t", 2): LATEST, ("u", 1): EARLIEST}
    assert spec.for_stream(("t", 0), EARLIEST) == 5
    assert spec.for_stream(("t", 9), EARLIEST) == EARLIEST
    assert parse_offset_spec(" Latest ", "x", EARLIEST).for_stream(("t", 0), EARLIEST) == LATEST
    for bad in ('["t"]', '{"t": 3}', '{"t": {"0": true}}', '{"t": {"0": 1.5}}', "soon"):
        with pytest.raises(WalfsOptionError):
            parse_offset_spec(bad, "startingOffsets", EARLIEST)


def test_resolve_and_split() -> None:
    bounds = {("t", 0): StreamBounds(10, 1000, 100.0), ("t", 1): StreamBounds(0, 5, 10.0)}
    starts = resolve(parse_offset_spec('{"t": {"0": -2}}', "s", EARLIEST), bounds, EARLIEST)
    ends = resolve(parse_offset_spec('{"t": {"1": 99}}', "e", LATEST), bounds, LATEST)
    assert starts == {("t", 0): 10, ("t", 1): 0} and ends == {("t", 0): 1000, ("t", 1): 5}
    opts = parse_options({"path": "/d", "maxRecordsPerPartition": "400", "maxBytesPerPartition": "25000"})
    parts = split(opts, starts, ends, bounds)
    # t[0]: 250 records of 100 bytes fit in 25 kB, so ranges of 250 (below the 400 cap).
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [
        ("t", 0, 10, 260),
        ("t", 0, 260, 510),
        ("t", 0, 510, 760),
        ("t", 0, 760, 1000),
        ("t", 1, 0, 5),
    ]
    assert from_json(to_json(ends)) == ends
    assert to_json(ends) == {"t": {"0": 1000, "1": 5}}


def test_cap_rows_shares_in_proportion_and_always_progresses() -> None:
    begin = {("a", 0): 0, ("b", 0): 100, ("c", 0): 7}
    latest = {("a", 0): 300, ("b", 0): 200, ("c", 0): 7}
    assert cap_rows(begin, latest, 1000) == latest
    assert cap_rows(begin, latest, 40) == {("a", 0): 30, ("b", 0): 110, ("c", 0): 7}
    one = cap_rows(begin, latest, 1)
    assert sum(one[s] - begin[s] for s in begin) == 1


def test_read_range_fast_path_matches_the_public_api(tmp_path: Path) -> None:
    with walfs.Wal(tmp_path / "d") as wal:
        wal.append("t", [b"plain %d" % i for i in range(100)])
        wal.append(
            "t",
            [
                (b"k%d" % i if i % 2 else None, b"v%d" % i, [("h", b"x")] if i % 3 else [], 1000 + i)
                for i in range(50)
            ],
        )
        wal.append("t", [b"", b"\n", b"x" * 100_000])
    with walfs.Wal(tmp_path / "d", read_only=True) as wal:
        # Small batches so ranges cut through runs of plain and meta-carrying records.
        fast = pa.Table.from_batches(
            list(read_range(wal.engine, "t", 0, 3, 153, batch_records=17, batch_bytes=4096))
        )
        slow = pa.Table.from_batches([records_to_batch("t", 0, wal.read_records("t", 3, max_records=150))])
    assert fast.schema == ARROW_SCHEMA
    assert fast.num_rows == 150
    assert fast.drop_columns(["timestampType"]).equals(slow.drop_columns(["timestampType"]))
    types = fast.column("timestampType").to_pylist()
    assert types == [1] * 97 + [0] * 50 + [1] * 3
    assert fast.column("value").to_pylist()[-1] == b"x" * 100_000


def test_bootstrap_and_sink_options() -> None:
    opts = parse_options({"bootstrap": "walfs-host:9092", "topic": "t"})
    assert opts.bootstrap == "walfs-host:9092" and opts.path == ""
    assert parse_options({"kafka.bootstrap.servers": "[::1]:9092"}).bootstrap == "[::1]:9092"
    for bad in ({}, {"bootstrap": "no-port"}, {"bootstrap": "h:0"}, {"bootstrap": "h:x"}):
        with pytest.raises(WalfsOptionError):
            parse_options(bad)
    sink = parse_sink_options({"path": "/d", "topic": "out", "checkpointLocation": "/c", "queryId": "q"})
    assert (sink.path, sink.bootstrap, sink.topic, sink.checkpoint, sink.query_id) == (
        "/d",
        None,
        "out",
        "/c",
        "q",
    )
    for bad in ({"path": "/d", "topic": "a/b"}, {"topic": "t"}, {"path": "/d", "org_id": "x"}):
        with pytest.raises(WalfsOptionError):
            parse_sink_options(bad)


def test_timestamp_only_metas_take_the_vectorized_path(tmp_path: Path) -> None:
    with walfs.Wal(tmp_path / "d") as wal:
        for i in range(40):
            # Records of a Kafka producer carry a timestamp and nothing else, here mixed
            # with a key, headers, and plain records.
            wal.append("t", b"v%d" % i, timestamp_ms=1_700_000_000_000 + i)
            if i % 7 == 0:
                wal.append("t", b"keyed", key=b"k", timestamp_ms=5)
                wal.append("t", b"plain")
    with walfs.Wal(tmp_path / "d", read_only=True) as wal:
        n = wal.info("t").high_watermark
        fast = pa.Table.from_batches(list(read_range(wal.engine, "t", 0, 0, n, batch_records=9)))
        slow = pa.Table.from_batches([records_to_batch("t", 0, wal.read_records("t", 0, max_records=n))])
    assert fast.drop_columns(["timestampType"]).equals(slow.drop_columns(["timestampType"]))
    plain = [v == b"plain" for v in fast.column("value").to_pylist()]
    assert fast.column("timestampType").to_pylist() == [1 if p else 0 for p in plain]


def test_remote_ranges_equal_local_ones(tmp_path: Path) -> None:
    """read_remote_range (the bootstrap path: Fetch through a real listener) gives the
    rows read_range gives on the data directory, except what the wire does not carry."""
    with listener(tmp_path) as lst:
        wal = lst.wal
        wal.append("t", [b"a%d" % i for i in range(300)])
        wal.append("t", b"keyed", key=b"k", headers=[("h", b"v"), ("n", None)])
        wal.append("t", b"produced", timestamp_ms=12345)
        wal.append("t", [b"b%d" % i for i in range(50)])
        wal.sync()
        local = pa.Table.from_batches(list(read_range(wal.engine, "t", 0, 3, 340)))
        # Small fetches: ranges start and end inside the daemon's batches.
        remote = pa.Table.from_batches(list(read_remote_range(lst.bootstrap, "t", 0, 3, 340, max_bytes=500)))
    assert remote.schema == ARROW_SCHEMA
    same = ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]
    assert remote.select(same).equals(local.select(same))
    assert remote.column("gid").null_count == remote.num_rows
    # A range past the daemon's end (a restored, older copy): an error, not fewer rows.
    with listener(tmp_path / "other") as lst, pytest.raises(OffsetOutOfRangeError):
        lst.wal.append("t", [b"x"])
        lst.wal.sync()
        list(read_remote_range(lst.bootstrap, "t", 0, 0, 5))


def test_sink_rows_are_checked_in_the_task() -> None:
    from walfs.spark.schema import HEADER_TYPE
    from walfs.spark.sink import normalize

    ok = pa.RecordBatch.from_pydict({"value": ["a", None], "key": ["k", None], "partition": [None, 3]})
    rows = normalize(ok, "t").to_pylist()
    assert rows == [
        {"topic": "t", "partition": 0, "key": b"k", "value": b"a", "headers": []},
        {"topic": "t", "partition": 3, "key": None, "value": b"", "headers": []},
    ]
    bad = [
        {"value": ["a"], "headers": pa.array([[{"key": None, "value": b"v"}]], pa.list_(HEADER_TYPE))},
        {"value": ["a"], "partition": [-1]},
        {"value": [1]},
        {"value": ["a"], "topic": [None]},
    ]
    for cols in bad:
        with pytest.raises(WalfsOptionError):
            normalize(pa.RecordBatch.from_pydict(cols), None if "topic" in cols else "t")
