"""Kafka and the engine see the same streams: what a producer writes is read back
through walfs.Wal (records and the file view), and org ids keep tenants apart."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from kafka_harness import Listener, listener

import walfs


def test_produced_records_read_through_the_engine(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        p = Producer({"bootstrap.servers": lst.bootstrap, "acks": "all"})
        p.produce(
            "clicks",
            value=b"page=/home",
            key=b"user-1",
            headers=[("ua", b"curl"), ("trace", None)],
            timestamp=1_700_000_000_123,
        )
        p.produce("clicks", value=b"page=/about")
        assert p.flush(30) == 0
        wal = lst.wal
        recs = wal.read_records("clicks", 0)
        assert [r.value for r in recs] == [b"page=/home", b"page=/about"]
        assert recs[0].key == b"user-1" and recs[1].key is None
        assert [(k if isinstance(k, str) else k.decode(), v) for k, v in recs[0].headers] == [
            ("ua", b"curl"),
            ("trace", None),
        ]
        assert recs[0].timestamp_ms == 1_700_000_000_123
        # The file view the mount shows: values, one line each.
        assert wal.read_bytes("clicks", 0, 1000) == b"page=/home\npage=/about\n"


def test_org_ids_are_separate_tenants(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with walfs.Wal(str(data), org_id=7, segment_size=16 << 20, block_size=1 << 20) as wal7:
        wal7.append("shared-name", b"org 7 only")
    with (
        walfs.Wal(str(data), org_id=8, segment_size=16 << 20, block_size=1 << 20) as wal8,
        Listener(wal8) as lst,
    ):
        p = Producer({"bootstrap.servers": lst.bootstrap, "acks": "all"})
        p.produce("shared-name", value=b"org 8 only")
        assert p.flush(30) == 0
        assert wal8.read("shared-name", 0) == [b"org 8 only"]
    with walfs.Wal(str(data), org_id=7, read_only=True) as wal7:
        assert wal7.read("shared-name", 0) == [b"org 7 only"]
