"""Bounded resources on the Kafka listener (issue 11): a connection cap, and a budget of
request bytes shared by all connections so that many large frames cannot add up."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

from conftest_mount import rss_kib
from kafka_harness import (
    SMALL_WAL_ARGS,
    ServeProcess,
    api_versions_request,
    check_alive,
    is_closed,
    raw_connect,
    recv_frame,
)


def test_connections_past_the_cap_are_closed_and_logged(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path / "d", *SMALL_WAL_ARGS, "--max-connections", "4")
    try:
        held = [raw_connect(srv.port) for _ in range(4)]
        for i, s in enumerate(held):
            s.sendall(api_versions_request(10 + i))
            assert struct.unpack(">i", recv_frame(s)[:4])[0] == 10 + i
        extra = raw_connect(srv.port)
        extra.settimeout(10)
        assert is_closed(extra)  # the fifth is closed at once
        extra.close()
        held.pop().close()
        # A slot is free again (the server notices the close asynchronously).
        for _ in range(100):
            s = raw_connect(srv.port)
            s.settimeout(10)
            try:
                s.sendall(api_versions_request(99))
                assert struct.unpack(">i", recv_frame(s)[:4])[0] == 99
                held.append(s)
                break
            except (ConnectionError, OSError):
                s.close()
        else:
            raise AssertionError("no connection was served after one closed")
        for s in held:
            s.close()
    finally:
        code, err = srv.stop()
    assert "connection limit (4) reached" in err


def test_many_large_frames_share_one_byte_budget(tmp_path: Path) -> None:
    # 12 connections each send a 16 MiB frame; all of them together may hold 32 MiB.
    srv = ServeProcess(
        tmp_path / "d", *SMALL_WAL_ARGS, "--max-request-bytes", str(16 << 20), "--max-inflight-bytes", "32M"
    )
    try:
        base = rss_kib(srv.proc.pid)
        size = 16 << 20
        socks: list[socket.socket] = []

        def flood() -> None:
            s = raw_connect(srv.port)
            socks.append(s)
            s.settimeout(3)
            try:
                # All but the last byte: a frame the server must hold while it waits.
                s.sendall(struct.pack(">i", size) + b"\x00\x12\x00\x03" + b"\xff" * (size - 5))
            except OSError:
                pass  # the server stopped reading: the budget is full

        threads = [threading.Thread(target=flood) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        time.sleep(1.0)  # let the server read what it will (no timing is asserted)
        grown = rss_kib(srv.proc.pid) - base
        # Without the budget the listener buffers all 12 frames (192 MiB).
        assert grown < 120 << 10, f"listener grew by {grown} KiB"
        for s in socks:
            s.close()
        check_alive(srv.port)
    finally:
        srv.stop()
