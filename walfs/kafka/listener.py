"""The TCP listener: accepts connections and runs each one's request loop.

Requests on one connection are handled one at a time, in order, and answered in
order, as Kafka brokers do (clients rely on the order; they open another connection
for the group coordinator, so a long-polling Fetch does not hold up heartbeats). An
answer that only waits for durability (a produce with acks=all) is sent by the
connection's ResponsePipe while the next requests are read and handled
(walfs/kafka/pipeline.py)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from walfs.kafka.api import Later
from walfs.kafka.broker import Broker, Connection
from walfs.kafka.broker_config import BrokerConfig
from walfs.kafka.dispatch import HANDLERS, SUPPORTED, CloseConnection, dispatch
from walfs.kafka.framing import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    ByteBudget,
    FrameError,
    FrameReader,
)
from walfs.kafka.pipeline import response_pipe

if TYPE_CHECKING:
    from walfs.engine_api import LogEngine

log = logging.getLogger("walfs.kafka")


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for IPv6) -> (host, port). Port 0 = any free port."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    p = int(port)
    if p > 65535:
        raise ValueError(f"port {p} out of range")
    return host, p


def api_name(payload: bytes) -> str:
    """The request's API for metrics: its name in the dispatch table, else its key."""
    if len(payload) < 2:
        return "short"
    key = int.from_bytes(payload[:2], "big", signed=True)
    api = HANDLERS.get(key)
    return api.name if api is not None else str(key)


def _addr(sockaddr: object) -> tuple[str, int]:
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        return str(sockaddr[0]), int(sockaddr[1])
    return "?", 0


async def _serve_connection(
    broker: Broker, stream: trio.SocketStream, max_request_bytes: int, budget: ByteBudget | None = None
) -> None:
    try:
        peer_host, peer_port = _addr(stream.socket.getpeername())
        host, port = _addr(stream.socket.getsockname())
    except OSError as e:
        # Reset before we got to it (ENOTCONN): nothing to serve.
        log.info("connection gone before it was served: %s", e)
        with trio.CancelScope(shield=True):
            await stream.aclose()
        return
    conn = Connection(peer=f"{peer_host}:{peer_port}", host=host, port=port)
    reader = FrameReader(stream, max_request_bytes, budget)
    log.debug("%s: connected", conn.peer)
    observe = broker.request_latency.observe if broker.request_latency is not None else None
    try:
        async with response_pipe(stream) as pipe:
            while True:
                payload = await reader.next_frame()
                if payload is None:
                    break
                api = api_name(payload)
                t0 = time.perf_counter()
                failed = True
                try:
                    response = await dispatch(broker, conn, payload)
                    failed = False
                finally:
                    # A Later answer (acks=all) is observed by the pipe once it is ready.
                    if observe is not None and (failed or not isinstance(response, Later)):
                        observe(api, time.perf_counter() - t0, failed)
                    del payload
                    await reader.release_frame()
                await pipe.send(response, api, t0, observe)
    except (FrameError, CloseConnection) as e:
        log.warning("%s: closing connection: %s", conn.peer, e)
    except trio.BrokenResourceError as e:
        log.info("%s: connection lost: %s", conn.peer, e.__cause__ or e)
    except OSError as e:
        log.info("%s: connection lost: %s", conn.peer, e)
    except Exception:
        # A bug in a handler ends this connection only; the listener and the WAL
        # carry on serving everyone else.
        log.exception("%s: internal error, closing connection", conn.peer)
    finally:
        with trio.CancelScope(shield=True):
            await reader.release_frame()
            await stream.aclose()
        log.debug("%s: closed", conn.peer)


async def serve_kafka(
    wal: LogEngine,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    allow_delete: bool = False,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    request_latency: Any = None,
    config: BrokerConfig | None = None,
) -> None:
    """Serve ``wal`` to Kafka clients on ``host:port`` until cancelled.

    Start it with ``port = await nursery.start(serve_kafka, wal, host, port)``: the
    value is the bound port (useful with port 0). ``allow_delete`` enables
    DeleteTopics; ``config`` holds Kafka's broker settings (num.partitions, ...). The
    caller owns ``wal`` and closes it after this returns.
    ``max_inflight_bytes`` bounds the request bytes all connections hold at once (a frame
    that does not fit waits); connections beyond ``max_connections`` are closed at once."""
    if max_request_bytes > max_inflight_bytes:
        raise ValueError("max_request_bytes cannot exceed max_inflight_bytes")
    broker = Broker(
        wal, allow_delete=allow_delete, api_versions=dict(SUPPORTED), config=config or BrokerConfig()
    )
    broker.request_latency = request_latency
    budget = ByteBudget(max_inflight_bytes)
    open_connections = 0
    refused = 0
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info("kafka listener on %s:%d", host, bound)

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal open_connections, refused
        if open_connections >= max_connections:
            refused += 1
            if refused == 1 or refused % 1000 == 0:
                log.warning(
                    "connection limit (%d) reached: closing a new connection (%d refused so far)",
                    max_connections,
                    refused,
                )
            with trio.CancelScope(shield=True):
                await stream.aclose()
            return
        open_connections += 1
        try:
            await _serve_connection(broker, stream, max_request_bytes, budget)
        finally:
            open_connections -= 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.groups.run)
        await nursery.start(trio.serve_listeners, handle, listeners)
        task_status.started(bound)
