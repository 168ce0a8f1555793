"""How the listener sends a large Fetch answer (walfs/kafka/listener.py send_whole_answers,
walfs/kafka/framing.py send_frame): the whole answer goes into the kernel while the client
has read none of it (not 16 KiB at a time, one event-loop turn per piece the client reads);
a slow reader still gets every answer whole and in order; a client that hangs up in the
middle of an answer (reset or close) is dropped with the answers it was owed, and the
listener serves everyone else: a real client (librdkafka) reads every record after it.

The socket queues are read with `ss` (iproute2), as an operator would see them."""

from __future__ import annotations

import datetime
import socket
import struct
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError
from kafka_harness import SMALL_WAL, Listener, encode_request, recv_frame, wait_until
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.serial import entity_reader

import walfs
from walfs.kafka.messages import ErrorCode, build
from walfs.wire.record_batch import decode_batches

VALUE = 16 << 10
MIB = 1 << 20


def values_log(wal: walfs.Wal, n: int) -> list[bytes]:
    vals = [b"%06d" % i + bytes([i % 251]) * (VALUE - 6) for i in range(n)]
    for i in range(0, n, 32):
        wal.append("t", vals[i : i + 32])
    wal.sync()
    return vals


def fetch_request(offset: int, cid: int, limit: int = MIB) -> bytes:
    body = build(
        FetchRequest,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=50 * MIB,
        topics=(
            build(
                FetchTopic,
                topic="t",
                partitions=(
                    build(FetchPartition, partition=0, fetch_offset=offset, partition_max_bytes=limit),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return encode_request(1, 12, cid, body)


def answer_values(frame: bytes, cid: int) -> list[bytes]:
    (got_cid,) = struct.unpack_from(">i", frame)
    assert got_cid == cid
    _header, used = entity_reader(FetchResponse.__header_schema__)(frame, 0)
    resp = entity_reader(FetchResponse)(frame, used)[0]
    (part,) = resp.responses[0].partitions
    assert part.error_code == ErrorCode.none
    return [r.value for b in decode_batches(bytes(part.records)) for r in b.records]


def queues(local_port: int, peer_port: int) -> tuple[int, int]:
    """(Recv-Q, Send-Q) of the established TCP socket local_port -> peer_port (`ss`)."""
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{local_port} and dport = :{peer_port} )"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.split()
    if not out:
        return 0, 0
    return int(out[0]), int(out[1])


def slow_client(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    return s


def test_a_large_answer_goes_into_the_kernel_whole_while_the_client_reads_none(tmp_path: Path) -> None:
    # The precondition of the whole answer fitting: Linux's send buffer autotuning may
    # grow to tcp_wmem's maximum (4 MiB by default).
    wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    assert wmem_max >= 2 * MIB, f"net.ipv4.tcp_wmem's maximum is {wmem_max}: this test needs >= 2 MiB"
    with walfs.Wal(str(tmp_path / "data"), **SMALL_WAL) as wal, Listener(wal) as lst:
        vals = values_log(wal, 200)
        with slow_client(lst.port) as s:
            me = s.getsockname()[1]
            s.sendall(fetch_request(0, 7))
            held: list[int] = []

            def unread() -> int:
                # Bytes of the answer the server has sent that the client has not read:
                # the server's unsent/unacked queue plus the client's receive queue.
                server_send = queues(lst.port, me)[1]
                client_recv = queues(me, lst.port)[0]
                held.append(server_send + client_recv)
                return held[-1]

            # Trio's 16 KiB TCP_NOTSENT_LOWAT held the server to ~16 KiB unsent plus the
            # client's small window: it never got near the ~1 MiB answer.
            wait_until(lambda: unread() >= MIB - VALUE, what="the whole answer queued in the kernel")
            frame = recv_frame(s)
            # All of it was in the kernel before the client read a byte (data the client
            # has not acknowledged yet counts on both sides, hence >=).
            assert held[-1] >= len(frame) + 4
            got = answer_values(frame, 7)
            assert len(got) >= 60 and got == vals[: len(got)]


def test_a_slow_reader_gets_every_answer_whole_and_in_order(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "data"), **SMALL_WAL) as wal, Listener(wal) as lst:
        vals = values_log(wal, 400)
        with slow_client(lst.port) as s:
            # Three fetches in flight; the client reads 4 KiB at a time.
            offsets = [0, 100, 250]
            for i, off in enumerate(offsets):
                s.sendall(fetch_request(off, 10 + i, limit=MIB // 2))
            for i, off in enumerate(offsets):
                head = b""
                while len(head) < 4:
                    head += s.recv(4 - len(head))
                (size,) = struct.unpack(">i", head)
                frame = bytearray()
                while len(frame) < size:
                    chunk = s.recv(min(4096, size - len(frame)))
                    assert chunk, "the server closed the connection mid-answer"
                    frame += chunk
                got = answer_values(bytes(frame), 10 + i)
                assert got and got == vals[off : off + len(got)]


def test_a_client_gone_mid_answer_leaves_the_listener_serving(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "data"), **SMALL_WAL) as wal, Listener(wal) as lst:
        vals = values_log(wal, 300)
        for how in ("reset", "close"):
            s = slow_client(lst.port)
            me = s.getsockname()[1]
            for i in range(3):
                s.sendall(fetch_request(i * 60, i))
            assert len(s.recv(1000)) > 0  # the first answer has started
            if how == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            # The listener drops the connection (and the answers it still owed).
            wait_until(lambda me=me: queues(lst.port, me) == (0, 0), what=f"the server to close ({how})")
        # A real client reads every record after it.
        c = Consumer(
            {
                "bootstrap.servers": lst.bootstrap,
                "group.id": "g",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        try:
            c.subscribe(["t"])
            got: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(got) < len(vals) and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                got.append(m.value())
            assert got == vals
        finally:
            c.close()
