"""A partition's size limit over the Kafka wire (issue 10): produce past retention.bytes +
one segment waits for retention; when retention cannot make room (reclamation fails) the
produce gets KAFKA_STORAGE_ERROR, nothing of the refused batch is appended, and what was
acknowledged stays at its offsets."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from kafka_harness import listener
from segment_files import segment_bytes

SEG = 1 << 20


def test_produce_past_the_limit_gets_kafka_storage_error_when_retention_cannot_make_room(
    tmp_path: Path,
) -> None:
    wal_kwargs = {
        "segment_size": SEG,
        "block_size": 64 << 10,
        "retention_bytes": 2 * SEG,
        "backpressure_s": 0.5,
    }
    with listener(tmp_path, wal_kwargs=wal_kwargs) as lst:
        lst.wal.engine.core.inject_fault("reclaim", errno.EIO)
        reports: list[Any] = []
        # No retries: the first answer for each batch is its delivery report.
        p = Producer(
            {"bootstrap.servers": lst.bootstrap, "linger.ms": 5, "retries": 0, "batch.size": 256 << 10}
        )
        for i in range(4000):  # 4 MB, more than the limit + one segment holds
            p.produce(
                "bounded",
                b"%06d" % i + b"b" * 994,
                partition=0,
                on_delivery=lambda e, m: reports.append(e or m),
            )
            p.poll(0)
        assert p.flush(60) == 0
        errors = [r for r in reports if isinstance(r, KafkaError)]
        acked = [r for r in reports if not isinstance(r, KafkaError)]
        assert errors and acked
        assert {e.code() for e in errors} == {KafkaError.KAFKA_STORAGE_ERROR}
        assert segment_bytes(tmp_path / "data") <= 3 * SEG
        # The acknowledged records have the offsets 0..n-1, and the WAL holds exactly them.
        offsets = sorted(m.offset() for m in acked)
        assert offsets == list(range(len(acked)))
        assert lst.wal.info("bounded").high_watermark == len(acked)
        low = lst.wal.info("bounded").low_watermark
        kept = {m.offset(): m.value() for m in acked if m.offset() >= low}
        got = lst.wal.read("bounded", low, max_records=10_000)
        assert got == [kept[o] for o in range(low, len(acked))]
        # Reclamation works again: so do produces, at the next offset.
        lst.wal.engine.core.inject_fault("reclaim", 0)
        reports.clear()
        p.produce("bounded", b"again", partition=0, on_delivery=lambda e, m: reports.append(e or m))
        assert p.flush(30) == 0
        assert [r.offset() for r in reports if not isinstance(r, KafkaError)] == [len(acked)]
