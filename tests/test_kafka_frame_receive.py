"""How the listener receives a large request (walfs/kafka/framing.py FrameReader
_receive_into): the rest of a frame of 64 KiB or more is waited for with the socket's
SO_RCVLOWAT at that rest, so the reader wakes once, when the frame is whole, and the
kernel acknowledges the client's segments meanwhile (the client's send buffer drains
while the listener does other work). Then the bad days of that path: a frame sent in
dribbles, a small request right behind a large one (SO_RCVLOWAT is back to 1 for it),
pipelined large frames, one above the SO_RCVLOWAT cap, a client that closes or resets
in the middle of a frame.

The socket queues are read with `ss` (iproute2), as an operator would see them."""

from __future__ import annotations

import logging
import socket
import struct
import time
from pathlib import Path

import pytest
from kafka_harness import (
    Listener,
    api_versions_request,
    check_alive,
    listener,
    produce_request,
    raw_connect,
    recv_frame,
    wait_until,
)
from kio.schema.produce.v9.response import ProduceResponse
from kio.serial import entity_reader
from test_kafka_fetch_send import queues

from walfs.kafka.framing import RECEIVE_LOWAT_MAX
from walfs.kafka.messages import ErrorCode
from walfs.wire.record_batch import WireRecord, encode_records_for_test

KIB = 1 << 10
VALUE = 16 * KIB


def vals(n: int, tag: int = 0) -> list[bytes]:
    """n 16 KiB values; value i starts with tag and i."""
    return [b"%03d%06d" % (tag, i) + b"v" * (VALUE - 9) for i in range(n)]


def batch(n: int, tag: int = 0) -> bytes:
    """vals(n, tag) as record batches of at most 32 (512 KiB: under max.message.bytes)."""
    vs = vals(n, tag)
    return b"".join(
        encode_records_for_test([WireRecord(None, v) for v in vs[i : i + 32]]) for i in range(0, n, 32)
    )


def produce_answer(frame: bytes, cid: int) -> tuple[ErrorCode, int]:
    """(error, base offset) of a one-partition ProduceResponse v9 with correlation id cid."""
    (got_cid,) = struct.unpack_from(">i", frame)
    assert got_cid == cid
    _header, used = entity_reader(ProduceResponse.__header_schema__)(frame, 0)  # type: ignore[attr-defined]
    resp = entity_reader(ProduceResponse)(frame, used)[0]
    (part,) = resp.responses[0].partition_responses
    return ErrorCode(part.error_code), part.base_offset


def values(lst: Listener, topic: str) -> list[bytes]:
    return lst.wal.read(topic, 0, max_records=10_000, max_bytes=64 << 20)


def test_the_rest_of_a_large_frame_waits_acknowledged_in_the_kernel_until_it_is_whole(tmp_path: Path) -> None:
    frame = produce_request("t", batch(64), acks=1, correlation_id=3)  # ~1 MiB
    # The head fits one read of the reader's buffer (64 KiB): it is taken whole, and the
    # reader then waits for the rest of the frame.
    head, parts = 60 * KIB, [128 * KIB] * 3
    assert len(frame) - head - sum(parts) > 100 * KIB
    with listener(tmp_path) as lst, raw_connect(lst.port) as s:
        me = s.getsockname()[1]
        s.sendall(frame[:head])
        wait_until(lambda: queues(lst.port, me)[0] == 0, what="the listener reading the head")
        sent = head
        for n in parts:
            s.sendall(frame[sent : sent + n])
            sent += n
            # Acknowledged by the kernel: the client's send queue is empty.
            wait_until(lambda: queues(me, lst.port)[1] == 0, what="the client's bytes acknowledged")
        time.sleep(0.3)  # time for a reader that wakes per segment to take them: none here
        # Before, the reader woke for every part and took it (Recv-Q 0): one event-loop
        # turn per segment the client wrote.
        assert queues(lst.port, me)[0] == sum(parts)
        assert lst.wal.info("t").high_watermark == 0
        s.sendall(frame[sent:])
        assert produce_answer(recv_frame(s), 3) == (ErrorCode.none, 0)
        assert queues(lst.port, me)[0] == 0
        assert values(lst, "t") == vals(64)
        # A small request right behind: SO_RCVLOWAT is back to 1, or this would not wake
        # the reader (the last wait was for the ~590 KiB tail).
        s.sendall(api_versions_request(9))
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 9


def test_a_large_frame_dribbled_in_small_pieces_is_answered(tmp_path: Path) -> None:
    frame = produce_request("t", batch(12), acks=1, correlation_id=4)  # ~192 KiB
    with listener(tmp_path) as lst, raw_connect(lst.port) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(frame), 3000):
            s.sendall(frame[i : i + 3000])
            if i % 30000 == 0:
                time.sleep(0.01)
        assert produce_answer(recv_frame(s), 4) == (ErrorCode.none, 0)
        s.sendall(api_versions_request(5))
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 5
        assert lst.wal.info("t").high_watermark == 12


def test_pipelined_large_frames_and_a_small_one_are_answered_in_order(tmp_path: Path) -> None:
    frames = [produce_request("t", batch(40, tag), acks=1, correlation_id=10 + tag) for tag in range(3)]
    with listener(tmp_path) as lst, raw_connect(lst.port) as s:
        s.sendall(b"".join(frames) + api_versions_request(20))
        got = [produce_answer(recv_frame(s), 10 + tag) for tag in range(3)]
        assert got == [(ErrorCode.none, 0), (ErrorCode.none, 40), (ErrorCode.none, 80)]
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 20
        assert values(lst, "t") == [v for tag in range(3) for v in vals(40, tag)]


def test_a_frame_above_the_receive_low_water_cap_is_received_whole(tmp_path: Path) -> None:
    records = b"".join(batch(48, tag) for tag in range(8))  # ~6 MiB in batches of 512 KiB
    frame = produce_request("t", records, acks=1, correlation_id=6)
    assert len(frame) > RECEIVE_LOWAT_MAX + 64 * KIB
    with listener(tmp_path, wal_kwargs={"segment_size": 64 << 20}) as lst, raw_connect(lst.port) as s:
        s.sendall(frame)
        assert produce_answer(recv_frame(s), 6) == (ErrorCode.none, 0)
        assert values(lst, "t") == [v for tag in range(8) for v in vals(48, tag)]
        s.sendall(api_versions_request(7))
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 7


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_client_gone_in_the_middle_of_a_large_frame_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.INFO, logger="walfs.kafka")
    frame = produce_request("t", batch(64), acks=1, correlation_id=8)
    with listener(tmp_path) as lst:
        s = raw_connect(lst.port)
        me = s.getsockname()[1]
        s.sendall(frame[: 60 * KIB])
        # The reader took the head and waits for the rest, with SO_RCVLOWAT at the rest;
        # part of that rest comes, acknowledged, and then the client goes.
        wait_until(lambda: queues(lst.port, me)[0] == 0, what="the listener reading the head")
        s.sendall(frame[60 * KIB : 300 * KIB])
        wait_until(lambda: queues(me, lst.port)[1] == 0, what="the client's bytes acknowledged")
        if how == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        # The end of the stream (or the reset) wakes the reader although less than its low
        # water mark came: the connection is dropped and the listener serves the next.
        dropped = (f"of {len(frame) - 4} bytes of a frame", "connection lost")
        wait_until(
            lambda: any(d in caplog.text for d in dropped), what="the listener dropping the connection"
        )
        check_alive(lst.port)
        assert lst.wal.info("t").high_watermark == 0
