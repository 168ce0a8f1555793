"""Idempotent producers across a restart of `walfs serve` (issue 12): resent batches are
answered with the offset they were written at and not appended again, also after the
daemon restarted (the producer state is rebuilt from the producer sections in the log);
gaps and overlaps get OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH.
The expected answers are the ones Kafka 4.1.1 gives to the same requests (without the
restart): tests/test_kafka_vs_real_broker.py compares the two live."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from kafka_answers import idempotence_answers
from kafka_harness import SMALL_WAL_ARGS, ServeProcess

import walfs

OUT_OF_ORDER, STALE_EPOCH = 45, 47

KAFKA_ANSWERS = {
    "create": 0,
    "init": (0, 0),
    "seq 0-2": (0, 0),
    "seq 0-2 again": (0, 0),
    "seq 3-4": (0, 3),
    "seq 10 (gap)": (OUT_OF_ORDER, -1),
    "seq 4 (overlap)": (OUT_OF_ORDER, -1),
    "after restart: seq 3-4 again": (0, 3),
    "after restart: seq 0-2 again": (0, 0),
    "after restart: seq 5": (0, 5),
    "after restart: seq 7 (gap)": (OUT_OF_ORDER, -1),
    "epoch 1 seq 3": (OUT_OF_ORDER, -1),
    "epoch 1 seq 0": (0, 6),
    "epoch 0 again": (STALE_EPOCH, -1),
    "unknown producer, seq 17": (0, 7),
    "end": 8,
}


def test_sequences_checked_and_duplicates_refused_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    procs = [ServeProcess(data, *SMALL_WAL_ARGS)]

    def restart() -> str:
        code, err = procs[-1].stop()
        assert code == 0, err
        procs.append(ServeProcess(data, *SMALL_WAL_ARGS))
        return procs[-1].bootstrap

    try:
        got = idempotence_answers(procs[0].bootstrap, restart)
    finally:
        procs[-1].stop()
    assert got == KAFKA_ANSWERS
    with walfs.Wal(str(data)) as wal:
        values = wal.read("idem", 0)
    assert values == [b"s0", b"s1", b"s2", b"s3", b"s4", b"s5", b"s0", b"s17"]


def test_librdkafka_idempotent_producer_round_trip(tmp_path: Path) -> None:
    proc = ServeProcess(tmp_path / "data", *SMALL_WAL_ARGS)
    try:
        p = Producer({"bootstrap.servers": proc.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(300):
            p.produce("idem", value=b"v%d" % i, key=b"k")
        assert p.flush(30) == 0
        # The producer restarts against a restarted daemon and goes on (new id).
        code, err = proc.stop()
        assert code == 0, err
        proc = ServeProcess(tmp_path / "data", *SMALL_WAL_ARGS)
        p = Producer({"bootstrap.servers": proc.bootstrap, "enable.idempotence": True})
        p.produce("idem", value=b"last", key=b"k")
        assert p.flush(30) == 0
    finally:
        proc.stop()
    with walfs.Wal(str(tmp_path / "data")) as wal:
        assert wal.read("idem", 0, max_records=1000) == [b"v%d" % i for i in range(300)] + [b"last"]
