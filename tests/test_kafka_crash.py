"""acks=all, then SIGKILL of `walfs serve`, then reopen: nothing acknowledged is lost.

Under --fsync never an acks=all produce is answered once its records are in the log
(the page cache), as Kafka's single broker answers without an fsync: they survive SIGKILL
of the process (not a power cut). Under interval the answer waits for the listener's sync,
under always for the append's own: the same holds, and the records are durable."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka_harness import ServeProcess

import walfs


@pytest.mark.parametrize("fsync", ["never", "interval", "always"])
def test_acked_records_survive_sigkill(tmp_path: Path, fsync: str) -> None:
    data = tmp_path / "data"
    server = ServeProcess(data, "--fsync", fsync)
    try:
        acked: list[bytes] = []

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                acked.append(msg.value())  # type: ignore[attr-defined]

        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 2})
        for i in range(500):
            p.produce("durable", value=b"record %04d" % i, key=b"%d" % i, on_delivery=on_delivery)
        assert p.flush(60) == 0
        assert len(acked) == 500
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=30)
    finally:
        server.stop()

    with walfs.Wal(str(data), read_only=True) as wal:
        recs = wal.read_records("durable", 0, max_records=1000)
    assert [r.value for r in recs] == [b"record %04d" % i for i in range(500)]
    assert recs[42].key == b"42"

    # And a restarted listener serves them.
    server = ServeProcess(data)
    try:
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "after-crash"})
        c.assign([TopicPartition("durable", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 500 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value() or b"")
        c.close()
        assert got == [b"record %04d" % i for i in range(500)]
    finally:
        code, err = server.stop()
    assert code == 0, err


def test_serve_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "data")
    p = Producer({"bootstrap.servers": server.bootstrap})
    p.produce("t", value=b"x")
    assert p.flush(30) == 0
    code, err = server.stop()
    assert code == 0, err
    assert "SIGTERM: stopping" in err
    with walfs.Wal(str(tmp_path / "data"), read_only=True) as wal:
        assert wal.read("t", 0) == [b"x"]
