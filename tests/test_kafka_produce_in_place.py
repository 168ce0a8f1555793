"""A produce is appended in place, on the listener's event loop, when the engine takes the
batch without waiting (LogEngine.append_nowait), and in a worker thread otherwise
(walfs/kafka/produce.py): the first produce to a new topic (it creates it), a batch that
needs a new segment, acks=0 under fsync="always" (its append waits for the fsync), an
idempotent producer the listener does not know (its check searches the log), the
partitions of a request past its first 2 MiB in place. The engine's
append calls are recorded with the thread they ran on; the records are read back."""

from __future__ import annotations

import array
import datetime
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_harness import SMALL_WAL, Listener, encode_request, produce_request, raw_connect, recv_frame
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from test_kafka_pipeline import produce, produce_answer

import walfs
from walfs.kafka.messages import build
from walfs.wire.record_batch import WireRecord, encode_records_for_test


class RecordedWal(walfs.Wal):
    """A WAL whose engine notes each append call: (name, ran on the listener's thread,
    what it returned)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.policy = kwargs["fsync"]
        self.calls: list[tuple[str, bool, Any]] = []
        self.loop_thread: threading.Thread | None = None
        for name in ("append", "append_nowait"):
            real = getattr(self.engine, name)

            def recorded(*a: Any, _name: str = name, _real: Any = real, **kw: Any) -> Any:
                got = _real(*a, **kw)
                label = "append(wait=False)" if kw.get("wait") is False else _name
                self.calls.append((label, threading.current_thread() is self.loop_thread, got))
                return got

            setattr(self.engine, name, recorded)


@pytest.fixture
def recorded(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[RecordedWal, Listener]]:
    fsync = getattr(request, "param", "never")
    wal = RecordedWal(str(tmp_path / "data"), fsync=fsync, fsync_interval_ms=3_600_000, **SMALL_WAL)
    try:
        with Listener(wal) as lst:
            wal.loop_thread = lst._thread
            yield wal, lst
    finally:
        wal.close()


@pytest.mark.parametrize("recorded", ["never", "interval", "always"], indirect=True)
def test_a_produce_to_an_existing_topic_is_appended_on_the_event_loop(
    recorded: tuple[RecordedWal, Listener],
) -> None:
    wal, lst = recorded
    with raw_connect(lst.port) as s:
        s.sendall(produce("t", 3, 1))
        assert produce_answer(recv_frame(s)) == (1, 0, 0)
        # The topic did not exist: created and appended in a worker thread.
        assert [(name, on_loop) for name, on_loop, _ in wal.calls] == [
            ("append" if wal.policy == "never" else "append(wait=False)", False)
        ]
        wal.calls.clear()
        s.sendall(produce("t", 2, 2) + produce("t", 4, 3))
        assert [produce_answer(recv_frame(s)) for _ in range(2)] == [(2, 0, 3), (3, 0, 5)]
    assert wal.calls == [("append_nowait", True, 3), ("append_nowait", True, 5)]
    assert wal.read("t", 0, max_records=20) == [
        *(b"r1-%d" % i for i in range(3)),
        *(b"r2-%d" % i for i in range(2)),
        *(b"r3-%d" % i for i in range(4)),
    ]


@pytest.mark.parametrize("recorded", ["always"], indirect=True)
def test_under_always_acks_1_is_appended_in_place_and_acks_0_in_a_thread(
    recorded: tuple[RecordedWal, Listener],
) -> None:
    # acks=1 waits for the shared sync round, as acks=-1 (Broker.answer_syncs): its append
    # does not wait, so it goes in place, and the answer still comes once durable. acks=0
    # has no answer to hold: its append is the plain one, durable when it returns, which
    # waits for the fsync and so runs in a worker thread.
    wal, lst = recorded
    with raw_connect(lst.port) as s:
        for k in range(1, 4):
            s.sendall(produce("t", 2, k, acks=1))
            assert produce_answer(recv_frame(s)) == (k, 0, 2 * (k - 1))
            assert wal.info("t").durable_watermark == 2 * k
        s.sendall(produce("t", 3, 4, acks=0) + produce("t", 1, 5, acks=1))
        assert produce_answer(recv_frame(s)) == (5, 0, 9)
    assert [(name, on_loop) for name, on_loop, _ in wal.calls] == [
        ("append(wait=False)", False),  # creates the topic
        ("append_nowait", True),
        ("append_nowait", True),
        ("append", False),  # acks=0
        ("append_nowait", True),
    ]
    assert wal.info("t").durable_watermark == 10


def big_produce(topic: str, n: int, size: int, correlation_id: int) -> bytes:
    records = encode_records_for_test([WireRecord(None, bytes([correlation_id]) * size) for _ in range(n)])
    return produce_request(topic, records, correlation_id=correlation_id)


def test_a_batch_that_needs_a_new_segment_goes_to_a_thread(recorded: tuple[RecordedWal, Listener]) -> None:
    wal, lst = recorded
    segment = SMALL_WAL["segment_size"]
    per_request = 48  # records of 16 KiB: 768 KiB a request (under max.message.bytes)
    requests = segment // (per_request * 16384) + 3
    with raw_connect(lst.port) as s:
        for k in range(1, requests + 1):
            s.sendall(big_produce("big", per_request, 16384, k))
            assert produce_answer(recv_frame(s)) == (k, 0, per_request * (k - 1))
    names = [(name, on_loop, got) for name, on_loop, got in wal.calls]
    in_place = [c for c in names if c[0] == "append_nowait"]
    # Refused (None, nothing appended) where a new segment was needed, then appended in a
    # worker thread; every other batch in place.
    assert ("append_nowait", True, None) in in_place
    assert all(on_loop for _, on_loop, _ in in_place)
    threaded = [c for c in names if c[0] != "append_nowait"]
    assert len(threaded) >= 2 and not any(on_loop for _, on_loop, _ in threaded)  # the first, the new segment
    assert len([c for c in names if c[2] is not None]) == requests
    for k in range(1, requests + 1):
        got = wal.read("big", per_request * (k - 1), max_records=per_request)
        assert got == [bytes([k]) * 16384] * per_request


def test_a_request_holds_the_event_loop_for_at_most_its_in_place_share(
    recorded: tuple[RecordedWal, Listener],
) -> None:
    # Three partitions of 768 KiB in one request: two fit in IN_PLACE_MAX_BYTES (2 MiB),
    # the third is appended in a worker thread.
    wal, lst = recorded
    for p in range(3):
        wal.engine.append("m", p, b"first", array.array("I", [0]), array.array("I", [5]))
    wal.calls.clear()
    parts = tuple(
        build(
            PartitionProduceData,
            index=p,
            records=encode_records_for_test([WireRecord(None, bytes([p]) * 16384) for _ in range(48)]),
        )
        for p in range(3)
    )
    body = build(
        ProduceRequest,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(build(TopicProduceData, name="m", partition_data=parts),),
    )
    with raw_connect(lst.port) as s:
        s.sendall(encode_request(0, 9, 7, body))
        recv_frame(s)
    assert [(name, on_loop, got) for name, on_loop, got in wal.calls] == [
        ("append_nowait", True, 1),
        ("append_nowait", True, 1),
        ("append", False, 1),
    ]
    for p in range(3):
        assert wal.read("m", 1, partition=p, max_records=100) == [bytes([p]) * 16384] * 48
