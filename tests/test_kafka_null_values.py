"""Null values (Kafka tombstones) are kept apart from empty ones end to end (issue 12):
librdkafka produces both, its consumer reads None and b"" back, the Python API shows
None and b"", the Spark columns hold null and b"", and the mount's file shows both as an
empty line. Stored as meta version 2 with flag 4 (walfs/engine/records.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from conftest_mount import Mount
from kafka_harness import consume, listener, rdkafka_consumer

from walfs.engine.records import decode_meta, encode_meta, value_is_null

pytest_plugins = ["conftest_mount"]


def _consume(bootstrap: str, topic: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
    c = rdkafka_consumer(bootstrap, "nulls")
    try:
        c.subscribe([topic])
        return [(m.key(), m.value()) for m in consume(c, n, timeout=60)]
    finally:
        c.close()


ROWS: list[tuple[bytes | None, bytes | None]] = [
    (b"a", b"1"),
    (b"a", None),  # tombstone with a key (compacted topics)
    (b"b", b""),  # empty, not null
    (None, None),  # tombstone without a key
    (None, b""),
]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_tombstones_round_trip_through_librdkafka(tmp_path: Path, codec: str) -> None:
    with listener(tmp_path) as lst:
        p = Producer({"bootstrap.servers": lst.bootstrap, "compression.type": codec, "linger.ms": 20})
        for key, value in ROWS:
            p.produce("compact", value=value, key=key)
        assert p.flush(30) == 0
        assert _consume(lst.bootstrap, "compact", len(ROWS)) == ROWS
        recs = lst.wal.read_records("compact", 0)
        assert [(r.key, r.value) for r in recs] == ROWS
        # The plain value view (the file's lines) has no null: both are empty.
        assert lst.wal.read("compact", 0) == [b"1", b"", b"", b"", b""]


def test_python_api_appends_and_reads_null_values(open_wal) -> None:
    w = open_wal()
    w.append("t", [(None, None, None, None), (b"k", None, [("h", None)], 5), (None, b"", None, None)])
    got = w.read_records("t", 0)
    assert [(r.key, r.value, list(r.headers), r.timestamp_ms) for r in got][:2] == [
        (None, None, [], got[0].timestamp_ms),
        (b"k", None, [("h", None)], 5),
    ]
    assert got[2].value == b""
    # Data without null values is written as before (meta version 1 or no meta at all).
    assert encode_meta(b"k", None, 5)[0] == 1 and encode_meta(None, None, None) == b""
    meta = encode_meta(None, None, None, null_value=True)
    assert meta[0] == 2 and value_is_null(meta) and decode_meta(meta) == (None, (), None)
    with pytest.raises(ValueError, match="meta version"):
        decode_meta(b"\x01\x04\x00\x00\x00\x00")  # flag 4 is not defined in version 1
    with pytest.raises(ValueError, match="meta version"):
        decode_meta(b"\x03\x00\x00\x00\x00\x00")


def test_spark_columns_hold_null_values(open_wal) -> None:
    from walfs.spark.columnar import read_range

    w = open_wal()
    w.append("t", [(b"a", b"1", None, 7), (b"a", None, None, 8), (None, b"", None, None)])
    (batch,) = list(read_range(w.engine, "t", 0, 0, 3))
    assert batch.column("value").to_pylist() == [b"1", None, b""]
    assert batch.column("key").to_pylist() == [b"a", b"a", None]


def test_mount_shows_a_tombstone_as_an_empty_line(make_mount: Callable[[], Mount]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    m = make_mount()
    m.start("--kafka-listen", f"127.0.0.1:{port}")
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
    for key, value in ROWS:
        p.produce("compact", value=value, key=key)
    assert p.flush(30) == 0
    assert m.out("cat compact") == "1\n\n\n\n\n"
    assert _consume(f"127.0.0.1:{port}", "compact", len(ROWS)) == ROWS
    m.stop()
