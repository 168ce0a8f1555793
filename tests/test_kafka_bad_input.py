"""Malformed, truncated, oversized and fuzzed frames: each ends in an error response
or a closed connection, and the listener and the WAL keep serving."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_harness import (
    Listener,
    api_versions_request,
    check_alive,
    encode_request,
    is_closed,
    listener,
    produce_request,
    raw_connect,
    recv_frame,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from walfs.kafka.dispatch import SUPPORTED
from walfs.kafka.messages import build
from walfs.wire.record_batch import WireRecord, encode_records_for_test


@pytest.fixture
def lst(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Listener]:
    caplog.set_level(logging.INFO, logger="walfs.kafka")
    with listener(tmp_path, max_request_bytes=64 * 1024) as running:
        yield running


def test_truncated_frame_then_disconnect(lst: Listener, caplog: pytest.LogCaptureFixture) -> None:
    with raw_connect(lst.port) as s:
        full = api_versions_request()
        s.sendall(full[: len(full) - 3])
    check_alive(lst.port)
    with raw_connect(lst.port) as s:
        s.sendall(b"\x00\x00")  # half a size field
    check_alive(lst.port)
    # Each connection is its own task: the closed ones may log after the live one answers.
    deadline = time.monotonic() + 10
    while caplog.text.count("closed after") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert caplog.text.count("closed after") == 2, caplog.text


@pytest.mark.parametrize("size", [64 * 1024 + 1, 2**31 - 1, -1, -(2**31)])
def test_oversized_or_negative_size_closes(lst: Listener, size: int) -> None:
    with raw_connect(lst.port) as s:
        s.sendall(struct.pack(">i", size) + b"\x00" * 16)
        assert is_closed(s)
    check_alive(lst.port)


@pytest.mark.parametrize("acks", [1, -1])
def test_requests_before_an_oversized_frame_are_answered_first(lst: Listener, acks: int) -> None:
    # The connection reads ahead of the request it handles (walfs/kafka/framing.py
    # read_ahead): the bad frame behind them is met early, but its error comes in order,
    # after the answers of the requests before it; nothing behind it is handled. With
    # acks=all those answers wait for a sync round: the connection still sends them
    # before it closes (their records are in the log; unanswered, they would be sent again).
    records = encode_records_for_test([WireRecord(None, b"before")])
    with raw_connect(lst.port) as s:
        s.sendall(
            produce_request("ahead", records, acks=acks, correlation_id=1)
            + produce_request("ahead", records, acks=acks, correlation_id=2)
            + struct.pack(">i", 64 * 1024 + 1)
            + b"\x00" * 16
            + produce_request("ahead", records, correlation_id=3)
        )
        assert [struct.unpack(">i", recv_frame(s)[:4])[0] for _ in range(2)] == [1, 2]
        assert is_closed(s)
    check_alive(lst.port)
    assert lst.wal.info("ahead").high_watermark == 2


def test_unknown_api_key_closes(lst: Listener, caplog: pytest.LogCaptureFixture) -> None:
    with raw_connect(lst.port) as s:
        payload = struct.pack(">hhi", 9999, 0, 3) + b"\x00\x00"
        s.sendall(struct.pack(">i", len(payload)) + payload)
        assert is_closed(s)
    assert "unsupported API key 9999" in caplog.text
    check_alive(lst.port)


def test_unsupported_api_versions_version_gets_error_and_table(lst: Listener) -> None:
    with raw_connect(lst.port) as s:
        payload = struct.pack(">hhi", 18, 99, 42) + b"\x00\x00\x00"
        s.sendall(struct.pack(">i", len(payload)) + payload)
        resp = recv_frame(s)
        correlation_id, error_code, n = struct.unpack_from(">ihi", resp)
        assert (correlation_id, error_code) == (42, 35)  # UNSUPPORTED_VERSION
        keys = {struct.unpack_from(">hhh", resp, 10 + 6 * i)[0] for i in range(n)}
        assert keys == set(SUPPORTED)


def test_unsupported_version_of_another_api_closes(lst: Listener) -> None:
    with raw_connect(lst.port) as s:
        payload = struct.pack(">hhi", 1, 99, 3) + b"\x00" * 20  # Fetch v99
        s.sendall(struct.pack(">i", len(payload)) + payload)
        assert is_closed(s)
    check_alive(lst.port)


def test_garbage_body_closes(lst: Listener, caplog: pytest.LogCaptureFixture) -> None:
    with raw_connect(lst.port) as s:
        payload = struct.pack(">hhi", 3, 1, 3) + b"\x00\x00" + b"\x00\x00\x00\x05"  # 5 topics, none sent
        s.sendall(struct.pack(">i", len(payload)) + payload)
        assert is_closed(s)
    assert "malformed Metadata v1 request" in caplog.text
    check_alive(lst.port)


def test_corrupt_batch_is_refused_and_nothing_written(lst: Listener) -> None:
    batch = bytearray(encode_records_for_test([WireRecord(b"k", b"v")]))
    batch[-1] ^= 0xFF  # breaks the CRC
    with raw_connect(lst.port) as s:
        s.sendall(produce_request("corrupt", bytes(batch)))
        resp = recv_frame(s)
    assert struct.unpack_from(">i", resp)[0] == 5
    assert lst.wal.info("corrupt").high_watermark == 0
    # The same batch intact goes in
    good = encode_records_for_test([WireRecord(b"k", b"v", [("h", b"1")], 1234)])
    with raw_connect(lst.port) as s:
        s.sendall(produce_request("corrupt", good))
        recv_frame(s)
    [rec] = lst.wal.read_records("corrupt", 0)
    assert (rec.key, rec.value, rec.timestamp_ms) == (b"k", b"v", 1234)


def test_gzip_batches_are_accepted(lst: Listener) -> None:
    good = encode_records_for_test([WireRecord(None, b"zipped %d" % i) for i in range(3)], codec=1)
    with raw_connect(lst.port) as s:
        s.sendall(produce_request("gz", good))
        recv_frame(s)
    assert lst.wal.read("gz", 0) == [b"zipped 0", b"zipped 1", b"zipped 2"]


def test_acks_zero_sends_no_response(lst: Listener) -> None:
    good = encode_records_for_test([WireRecord(None, b"fire and forget")])
    with raw_connect(lst.port) as s:
        s.sendall(produce_request("a0", good, acks=0, correlation_id=1))
        s.sendall(api_versions_request(2))
        resp = recv_frame(s)  # the first answer on the wire is the ApiVersions one
        assert struct.unpack_from(">i", resp)[0] == 2
    assert lst.wal.read("a0", 0) == [b"fire and forget"]


def test_disconnect_during_long_poll(lst: Listener, caplog: pytest.LogCaptureFixture) -> None:
    import datetime

    lst.wal.append("idle", b"x")
    body = build(
        FetchRequest,
        max_wait=datetime.timedelta(milliseconds=300),
        min_bytes=1,
        topics=(
            build(
                FetchTopic,
                topic="idle",
                partitions=(build(FetchPartition, partition=0, fetch_offset=1, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
    )
    s = raw_connect(lst.port)
    s.sendall(encode_request(1, 12, 9, body))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # reset while the listener waits
    check_alive(lst.port)
    lst.wal.append("idle", b"y")
    assert lst.wal.read("idle", 0) == [b"x", b"y"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    api=st.sampled_from(sorted(SUPPORTED)),
    junk=st.binary(max_size=300),
    data=st.data(),
)
def test_fuzzed_bodies_get_an_answer_or_a_close(
    lst: Listener, api: int, junk: bytes, data: st.DataObject
) -> None:
    lo, hi = SUPPORTED[api]
    version = data.draw(st.integers(lo, hi))
    payload = struct.pack(">hhi", api, version, 11) + junk
    with raw_connect(lst.port) as s:
        s.settimeout(15)
        s.sendall(struct.pack(">i", len(payload)) + payload)
        s.shutdown(socket.SHUT_WR)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
    check_alive(lst.port)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(cut=st.integers(min_value=0, max_value=400))
def test_truncated_produce_requests_write_nothing(lst: Listener, cut: int) -> None:
    good = encode_records_for_test([WireRecord(b"k", b"v" * 100) for _ in range(3)])
    frame = produce_request("trunc", good)
    with raw_connect(lst.port) as s:
        s.sendall(frame[: min(cut, len(frame) - 1)])
    check_alive(lst.port)
    assert lst.wal.info("trunc").high_watermark == 0
