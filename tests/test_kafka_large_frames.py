"""Large requests and answers on the Kafka listener's copy-free paths: a produce frame of
64 KiB or more is received straight into its own buffer (framing.FrameReader), and a fetch
answer is written as its size and pieces with sendmsg, its record batches by reference
(messages.encode_response, framing.send_frame). Real clients move megabytes of 16 KiB
records through both; raw sockets make the kernel split them (a tiny receive buffer read
slowly, a request sent in dribbles, a small request right behind a large one)."""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from kafka_harness import (
    api_versions_request,
    encode_request,
    fetch_request,
    listener,
    produce_request,
    raw_connect,
    recv_exact,
)
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.produce.v9.response import ProduceResponse
from kio.serial import entity_reader

from walfs.wire.record_batch import WireRecord, decode_batches, encode_records_for_test


def _decode(cls: type, frame: bytes) -> object:
    _header, used = entity_reader(cls.__header_schema__)(frame, 0)  # type: ignore[attr-defined]
    return entity_reader(cls)(frame, used)[0]


def _produce_frame(topic: str, batch: bytes, correlation_id: int) -> bytes:
    return produce_request(topic, batch, acks=1, correlation_id=correlation_id)


def _fetch_frame(topic: str, offset: int, correlation_id: int, max_bytes: int) -> bytes:
    body = fetch_request(topic, {0: offset}, max_bytes, max_bytes)
    return encode_request(1, 12, correlation_id, body)


def _recv_frame_slowly(s: socket.socket) -> bytes:
    """A frame read in small bites with pauses, so the server's socket buffer fills up
    and its sendmsg returns having written part of the answer."""
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    out = bytearray()
    while len(out) < size:
        chunk = s.recv(min(8192, size - len(out)))
        assert chunk, "server closed mid-answer"
        out += chunk
        if len(out) % (256 * 1024) < 8192:
            time.sleep(0.02)
    return bytes(out)


def test_real_clients_move_megabytes_of_16k_records_through_three_partitions(tmp_path: Path) -> None:
    values = {p: [os.urandom(16384) for _ in range(120)] for p in range(3)}
    with listener(tmp_path) as lst:
        for p in range(3):
            lst.wal.create("big", p)
        prod = Producer(
            {"bootstrap.servers": lst.bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1 << 20}
        )
        for i in range(120):
            for p in range(3):
                prod.produce("big", value=values[p][i], key=b"k%d" % i, partition=p)
        assert prod.flush(60) == 0
        c = Consumer(
            {
                "bootstrap.servers": lst.bootstrap,
                "group.id": "big",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe(["big"])
        got: dict[int, list[tuple[int, bytes, bytes | None]]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < 360 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            got[m.partition()].append((m.offset(), m.value(), m.key()))
        c.close()
        for p in range(3):
            assert [o for o, _, _ in got[p]] == list(range(120))
            assert [v for _, v, _ in got[p]] == values[p]
            assert [k for _, _, k in got[p]] == [b"k%d" % i for i in range(120)]
        # What the consumer saw is what the WAL holds.
        assert lst.wal.read("big", 0, partition=1, max_records=200, max_bytes=8 << 20) == values[1]


def test_a_dribbled_request_a_request_behind_it_and_an_answer_read_slowly(tmp_path: Path) -> None:
    # Four batches of 55 x 16 KiB (~900 KB each: under message.max.bytes).
    values = [os.urandom(16384) for _ in range(220)]
    batches = [
        encode_records_for_test([WireRecord(None, v, [], 1_700_000_000_000) for v in values[i : i + 55]])
        for i in range(0, 220, 55)
    ]
    with listener(tmp_path) as lst:
        lst.wal.create("dribble", 0)
        with raw_connect(lst.port) as s:
            s.settimeout(30)
            for n, batch in enumerate(batches):
                produce = _produce_frame("dribble", batch, 40 + n)
                # The size and a few bytes first, then the rest in uneven pieces with
                # pauses: the frame reaches the listener in many reads.
                s.sendall(produce[:7])
                time.sleep(0.02)
                pos = 7
                for step in (1000, 70_000, 333_333):
                    s.sendall(produce[pos : pos + step])
                    pos += step
                    time.sleep(0.02)
                # The rest of the large frame and a small request behind it, in one send.
                s.sendall(produce[pos:] + api_versions_request(50 + n))
                (size,) = struct.unpack(">i", recv_exact(s, 4))
                produced = _decode(ProduceResponse, recv_exact(s, size))
                part = produced.responses[0].partition_responses[0]  # type: ignore[attr-defined]
                assert int(part.error_code) == 0 and int(part.base_offset) == 55 * n
                (size,) = struct.unpack(">i", recv_exact(s, 4))
                assert struct.unpack(">i", recv_exact(s, size)[:4]) == (50 + n,)  # the next answer, in order
        assert lst.wal.read("dribble", 0, max_records=300, max_bytes=8 << 20) == values
        lst.wal.sync()  # acks=1: the answer below serves durable records only

        # The whole partition back in one answer of ~3.6 MB, through a receive buffer of
        # a few KiB read in small bites: the listener's writes are cut short many times.
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        with s:
            s.connect(("127.0.0.1", lst.port))
            s.sendall(_fetch_frame("dribble", 0, 60, 8 << 20))
            answer = _decode(FetchResponse, _recv_frame_slowly(s))
            fp = answer.responses[0].partitions[0]  # type: ignore[attr-defined]
            assert int(fp.error_code) == 0 and int(fp.high_watermark) == 220
            (got,) = decode_batches(fp.records)
            assert [r.value for r in got.records] == values
