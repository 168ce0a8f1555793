"""What the listener does without a trip through trio's scheduler
(docs/notes/2026-11-24-kafka-fetch-path.md, "Fewer CPU per fetch"): the shared
request-byte budget taken and given back without its lock while no frame waits
(framing.ByteBudget), and reads and sends that
complete at once made through a dup of the connection's socket (framing.direct_socket).
What must still hold: a frame that does not fit waits, and goes on when bytes come back;
each connection closes its dup with itself; answers come whole and in order, also when
the client reads slowly (tests/test_kafka_fetch_send.py) and over TLS (no dup there,
tests/test_kafka_auth.py)."""

from __future__ import annotations

import gc
import os
import socket
import warnings
from pathlib import Path

import trio
from kafka_harness import SMALL_WAL, Listener, api_versions_request, raw_connect, recv_frame, wait_until

import walfs
from walfs.kafka.framing import ByteBudget, direct_socket


def test_a_frame_that_does_not_fit_waits_until_bytes_come_back() -> None:
    order: list[str] = []

    async def main() -> None:
        budget = ByteBudget(100)
        await budget.acquire(60)  # fits: taken at once
        assert budget.used == 60 and budget.waits == 0

        async def big() -> None:
            await budget.acquire(60)
            order.append("big")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(big)
            await trio.testing.wait_all_tasks_blocked()
            assert order == [] and budget.waits == 1  # 120 > 100: it waits
            await budget.acquire(30)  # fits beside the first frame
            order.append("small")
            await budget.release(60)  # the first frame is handled: the waiter goes on
        assert order == ["small", "big"]
        assert budget.used == 90
        await budget.release(30)
        await budget.release(60)
        assert budget.used == 0

    trio.run(main)


def test_a_waiting_frame_cancelled_leaves_the_budget_as_it_was() -> None:
    async def main() -> None:
        budget = ByteBudget(100)
        await budget.acquire(90)
        with trio.move_on_after(0.05):
            await budget.acquire(20)
        assert budget.used == 90
        await budget.release(90)
        await budget.acquire(100)  # nothing waits any more: taken at once
        assert budget.used == 100

    trio.run(main)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_each_connection_closes_its_direct_socket(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "data"), **SMALL_WAL) as wal, Listener(wal) as lst:
        s = raw_connect(lst.port)
        s.sendall(api_versions_request(1))
        recv_frame(s)
        s.close()
        before = open_fds()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            for i in range(20):
                s = raw_connect(lst.port)
                s.sendall(api_versions_request(i))
                recv_frame(s)
                s.close()
            # Each served connection held two descriptors (its socket and the dup): all closed.
            wait_until(lambda: open_fds() <= before, what="the connections' descriptors closed")
            gc.collect()
        # Closed by the connection, not left to the garbage collector.
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_direct_socket_is_for_plain_tcp_streams_only() -> None:
    a, b = socket.socketpair()

    async def main() -> None:
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))
        raw = direct_socket(stream)
        assert raw is not None
        try:
            assert raw.fileno() != a.fileno() and not raw.getblocking()
            raw.sendall(b"x")
            assert b.recv(1) == b"x"
        finally:
            raw.close()
        assert direct_socket(trio.testing.MemorySendStream()) is None  # type: ignore[arg-type]
        await stream.aclose()

    try:
        trio.run(main)
    finally:
        b.close()
