"""Requests read ahead of their answers (walfs/kafka/pipeline.py): while a produce with
acks=all waits for its sync, the connection reads and appends the next requests; the
answers still go out in request order, after the sync, and the read-ahead is bounded.
The answers that wait at once share one sync round (walfs/kafka/group_sync.py).

The WAL's sync is held on a gate (the real sync runs once the gate opens), so what the
listener does meanwhile is seen without any timing. acks=all waits for the listener's
sync under fsync="interval" (here with an interval of an hour, so only the listener
syncs) and under "always" (its appends do not wait for their own fsync, so the next
requests are appended while it runs); under "never" it is answered once appended
(Broker.answer_syncs, docs/kafka.md "Durability"). acks=1 under "always" waits for the
same shared round."""

from __future__ import annotations

import errno
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka_harness import (
    SMALL_WAL,
    Listener,
    api_versions_request,
    check_alive,
    produce_request,
    raw_connect,
    recv_frame,
    wait_until,
)
from kio.schema.produce.v9.response import ProduceResponse
from kio.serial import entity_reader

import walfs
from walfs.errors import WalIOError
from walfs.kafka.pipeline import PIPELINE_DEPTH
from walfs.local import debug
from walfs.wire.record_batch import WireRecord, encode_records_for_test


class GatedWal(walfs.Wal):
    """A WAL whose engine's sync() waits for the test to open the gate, then syncs for
    real (the listener holds the engine, walfs.engine.contract, not this Wal). With
    ``sync_first`` it syncs for real first, then waits for one ``release`` per call: an
    append the test makes meanwhile came after that sync read what it covers."""

    def __init__(self, *args: Any, sync_first: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.release = threading.Semaphore(0)
        self.waiting = 0  # syncs held right now
        self.calls = 0  # sync() calls
        real = self.engine.sync

        def hold() -> None:
            self.waiting += 1
            try:
                if not (self.release.acquire(timeout=60) if sync_first else self.gate.wait(timeout=60)):
                    raise TimeoutError("the test never let the sync go on")
            finally:
                self.waiting -= 1

        def gated_sync() -> None:
            self.calls += 1
            if not sync_first:
                hold()
                real()
                return
            try:
                real()
            finally:
                hold()

        self.engine.sync = gated_sync  # type: ignore[method-assign]


# The policies under which acks=all waits for the listener's sync: "interval" with an
# interval syncer that never comes during a test, and "always".
SYNCING_WALS = {
    "interval": {"fsync": "interval", "fsync_interval_ms": 3_600_000, **SMALL_WAL},
    "always": {"fsync": "always", **SMALL_WAL},
}


@pytest.fixture(params=sorted(SYNCING_WALS))
def gated(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[GatedWal, Listener]]:
    wal = GatedWal(str(tmp_path / "data"), **SYNCING_WALS[request.param])
    try:
        with Listener(wal) as lst:
            yield wal, lst
            wal.gate.set()  # never leave a handler parked at the gate
    finally:
        wal.gate.set()
        wal.close()


def produce(topic: str, n: int, correlation_id: int, acks: int = -1) -> bytes:
    """A Produce of n records whose values name the request and the record (b"r<cid>-<i>")."""
    records = encode_records_for_test([WireRecord(None, b"r%d-%d" % (correlation_id, i)) for i in range(n)])
    return produce_request(topic, records, acks=acks, correlation_id=correlation_id)


def correlation_id(frame: bytes) -> int:
    return int(struct.unpack(">i", frame[:4])[0])


def produce_answer(frame: bytes) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a one-partition Produce v9 answer."""
    header_cls = ProduceResponse.__header_schema__
    header, used = entity_reader(header_cls)(frame, 0)
    body, _ = entity_reader(ProduceResponse)(frame, used)
    part = body.responses[0].partition_responses[0]
    return int(header.correlation_id), int(part.error_code), int(part.base_offset)


def nothing_to_read(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        s.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    finally:
        s.setblocking(True)
    return False


def test_next_produce_is_appended_while_the_first_waits_for_its_sync(
    gated: tuple[GatedWal, Listener],
) -> None:
    wal, lst = gated
    with raw_connect(lst.port) as s:
        s.sendall(produce("t", 5, 1) + produce("t", 3, 2))
        # Answering one request at a time, the second would stay unread until the first
        # one's sync returned: here both are appended while that sync is held.
        wait_until(lambda: wal.info("t").high_watermark == 8, 30, "the second request's append")
        assert wal.waiting >= 1
        assert nothing_to_read(s)  # no answer before its records are durable
        wal.gate.set()
        answers = [produce_answer(recv_frame(s)) for _ in range(2)]
    assert answers == [(1, 0, 0), (2, 0, 5)]
    assert wal.info("t").durable_watermark == 8
    assert [v for v in wal.read("t", 0, max_records=10)] == [b"r1-%d" % i for i in range(5)] + [
        b"r2-%d" % i for i in range(3)
    ]


def test_answers_keep_request_order_behind_a_waiting_produce(gated: tuple[GatedWal, Listener]) -> None:
    wal, lst = gated
    with raw_connect(lst.port) as s:
        # acks=all (waits), ApiVersions (ready at once), acks=1 (ready at once), acks=0 (no answer).
        s.sendall(
            produce("t", 2, 1)
            + api_versions_request(2)
            + produce("t", 1, 3, acks=1)
            + produce("t", 4, 4, acks=0)
        )
        wait_until(lambda: wal.info("t").high_watermark == 7, 30, "all three produces")
        assert nothing_to_read(s)  # the ready answers wait behind the first one
        wal.gate.set()
        first = produce_answer(recv_frame(s))
        second = recv_frame(s)
        third = produce_answer(recv_frame(s))
        assert first == (1, 0, 0)
        assert correlation_id(second) == 2
        assert third == (3, 0, 2)
        # acks=0 got no answer: the next frame is the answer to what comes next.
        s.sendall(api_versions_request(5))
        assert correlation_id(recv_frame(s)) == 5


def test_read_ahead_is_bounded(gated: tuple[GatedWal, Listener]) -> None:
    wal, lst = gated
    total = PIPELINE_DEPTH + 5
    with raw_connect(lst.port) as s:
        s.sendall(b"".join(produce("t", 1, i) for i in range(total)))
        # PIPELINE_DEPTH answers are owed, one more request is appended and waits to queue
        # its answer; the rest stay unread in the socket until answers go out.
        owed = PIPELINE_DEPTH + 1
        wait_until(lambda: wal.info("t").high_watermark == owed, 30, "the read-ahead to fill")
        # The reader is parked on the full pipe; an ApiVersions on another connection is
        # answered meanwhile (the listener is not blocked), and this one reads no further.
        check_alive(lst.port)
        assert wal.info("t").high_watermark == owed
        wal.gate.set()
        answers = [produce_answer(recv_frame(s)) for _ in range(total)]
    assert answers == [(i, 0, i) for i in range(total)]


def test_client_gone_while_answers_wait(gated: tuple[GatedWal, Listener]) -> None:
    wal, lst = gated
    s = raw_connect(lst.port)
    s.sendall(produce("t", 2, 1) + produce("t", 2, 2))
    wait_until(lambda: wal.info("t").high_watermark == 4, 30, "both appends")
    s.close()
    wal.gate.set()
    # The answers have nowhere to go; the records are durable and the listener serves on.
    wait_until(lambda: wal.info("t").durable_watermark == 4, 30, "the held syncs")
    check_alive(lst.port)
    with raw_connect(lst.port) as s2:
        s2.sendall(produce("t", 1, 9))
        assert produce_answer(recv_frame(s2)) == (9, 0, 4)


def test_waiting_answers_share_one_sync_round(gated: tuple[GatedWal, Listener]) -> None:
    wal, lst = gated
    conns = [raw_connect(lst.port) for _ in range(4)]
    try:
        # The first request starts a round, held at the gate; the rest of this connection's
        # requests and the other connections' all arrive while it runs.
        conns[0].sendall(produce("t", 1, 0))
        wait_until(lambda: wal.waiting == 1, 30, "the first sync round")
        for i, s in enumerate(conns):
            s.sendall(b"".join(produce("t", 1, 10 * i + k) for k in range(1, 4)))
        wait_until(lambda: wal.info("t").high_watermark == 13, 30, "all appends")
        fsyncs = wal.engine.report()["syncs"]
        wal.gate.set()
        answers = [produce_answer(recv_frame(s)) for s in conns for _ in range(4 if s is conns[0] else 3)]
    finally:
        for s in conns:
            s.close()
    assert sorted(a[0] for a in answers) == sorted([0] + [10 * i + k for i in range(4) for k in range(1, 4)])
    assert all(code == 0 for _, code, _ in answers)
    # One wal.sync() per answer before; now the one held at the gate and the next, which
    # its chain called as soon as it returned, for the twelve appended meanwhile
    # (group_sync.py). In the core one fsync for all thirteen: the held call syncs once
    # the gate opens, after every append, so the next one finds them durable.
    assert wal.calls == 2
    assert wal.engine.report()["syncs"] - fsyncs == 1
    assert wal.info("t").durable_watermark == 13


@pytest.mark.parametrize("policy", sorted(SYNCING_WALS))
def test_failed_sync_fails_every_waiting_answer(tmp_path: Path, policy: str) -> None:
    wal = walfs.Wal(str(tmp_path / "data"), **SYNCING_WALS[policy])
    with Listener(wal) as lst, raw_connect(lst.port) as s:
        s.sendall(produce("t", 2, 1))
        assert produce_answer(recv_frame(s)) == (1, 0, 0)
        debug.inject_fault(wal, "sync", errno.EIO)
        s.sendall(produce("t", 2, 2) + produce("t", 2, 3))
        answers = [produce_answer(recv_frame(s)) for _ in range(2)]
    # KAFKA_STORAGE_ERROR (56), no offset: nothing was acknowledged as durable.
    assert answers == [(2, 56, -1), (3, 56, -1)]
    assert wal.engine.failed
    with pytest.raises(WalIOError):  # closing a failed WAL reports it too
        wal.close()


def consume_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    """The first n values of partition 0, fetched by a real Kafka consumer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value() or b"")
        return got
    finally:
        c.close()


def test_acks_all_under_fsync_never_is_answered_once_appended(tmp_path: Path) -> None:
    # Kafka's single broker answers acks=all without an fsync; so does fsync="never": the
    # sync stays held at the gate, the answer comes anyway, and the records are in the log
    # (page cache) but not yet durable.
    wal = GatedWal(str(tmp_path / "data"), fsync="never", **SMALL_WAL)
    try:
        with Listener(wal) as lst, raw_connect(lst.port) as s:
            s.sendall(produce("t", 5, 1) + produce("t", 3, 2))
            answers = [produce_answer(recv_frame(s)) for _ in range(2)]
            assert answers == [(1, 0, 0), (2, 0, 5)]
            assert wal.calls == 0
            assert wal.info("t").high_watermark == 8
            assert wal.info("t").durable_watermark == 0
            # A consumer is still handed durable records only: its fetch syncs first.
            wal.gate.set()
            assert consume_all(lst.bootstrap, "t", 8)[-1] == b"r2-2"
            assert wal.calls >= 1
            assert wal.info("t").durable_watermark == 8
    finally:
        wal.gate.set()
        wal.close()


def test_acks_1_under_fsync_always_waits_for_the_shared_sync_round(tmp_path: Path) -> None:
    # Under "always" acks=1 is answered once durable, as acks=all: through the same shared
    # sync round (Broker.answer_syncs), the produce path's one durability wait, not the
    # engine's own wait in a worker thread. So the answer stays held with the round at
    # the gate while the connection appends the next request, and comes once it is open.
    wal = GatedWal(str(tmp_path / "data"), fsync="always", **SMALL_WAL)
    try:
        with Listener(wal) as lst, raw_connect(lst.port) as s:
            s.sendall(produce("t", 4, 1, acks=1) + produce("t", 2, 2, acks=1))
            wait_until(lambda: wal.info("t").high_watermark == 6, 30, "both appends")
            wait_until(lambda: wal.waiting >= 1, 30, "the shared sync round")
            assert nothing_to_read(s)  # no answer before the records are durable
            assert wal.info("t").durable_watermark == 0
            wal.gate.set()
            assert [produce_answer(recv_frame(s)) for _ in range(2)] == [(1, 0, 0), (2, 0, 4)]
            assert wal.info("t").durable_watermark == 6
    finally:
        wal.gate.set()
        wal.close()
