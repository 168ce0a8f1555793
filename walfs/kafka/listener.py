"""The TCP listener: accepts connections and runs each one's request loop.

Requests on one connection are handled one at a time, in order, and answered in
order, as Kafka brokers do (clients rely on the order; they open another connection
for the group coordinator, so a long-polling Fetch does not hold up heartbeats). An
answer that only waits for durability (a produce with acks=all) is sent by the
connection's ResponsePipe while the next requests are read and handled
(walfs/kafka/pipeline.py)."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import socket
import ssl
import struct
import time
from typing import TYPE_CHECKING, Any

import trio

from walfs.common.local_socket import org_of_client_id
from walfs.kafka.api import Later
from walfs.kafka.broker import Connection
from walfs.kafka.broker_config import BrokerConfig
from walfs.kafka.dispatch import HANDLERS, SUPPORTED, CloseConnection, dispatch
from walfs.kafka.framing import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    ByteBudget,
    FrameError,
    FrameReader,
    direct_socket,
    read_ahead,
    read_preamble,
)
from walfs.kafka.pipeline import response_pipe
from walfs.kafka.sasl_session import AuthenticationFailed, SaslSession
from walfs.kafka.tenants import Tenants

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine
    from walfs.kafka.auth_config import AuthConfig

log = logging.getLogger("walfs.kafka")


def api_name(payload: bytes | memoryview) -> str:
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


def send_whole_answers(stream: trio.SocketStream) -> None:
    """Lets the kernel take a whole answer at once: trio's SocketStream sets
    TCP_NOTSENT_LOWAT to 16 KiB, so a socket whose reader has not caught up counts as full
    once 16 KiB wait unsent. A 1 MiB fetch answer to a consumer with a 64 KiB receive
    buffer (the Java client's) then went out in ~9 sendmsg calls, each after a wait for
    writability: one event-loop turn of this server per ~128 KiB the client read. With
    the system's default (0 here means the net.ipv4.tcp_notsent_lowat sysctl, unlimited
    unless an operator set it) the answer goes into the send buffer (autotuned by the
    kernel up to net.ipv4.tcp_wmem's maximum) in one or two calls, and the kernel feeds
    it to the client as it reads, without waking the loop (docs/notes/2026-11-24-kafka-fetch-path.md, "The
    Fetch round trip"). Memory stays bounded by the send buffer, as before."""
    notsent_lowat = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if notsent_lowat is None:
        return
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.IPPROTO_TCP, notsent_lowat, 0)


async def _close(stream: trio.abc.AsyncResource) -> None:
    # A TLS close_notify could wait on a peer that reads nothing: bounded.
    with trio.move_on_after(5):
        try:
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


async def _serve_connection(
    tenants: Tenants,
    stream: trio.SocketStream,
    max_request_bytes: int,
    budget: ByteBudget | None = None,
    auth: AuthConfig | None = None,
    ssl_context: ssl.SSLContext | None = None,
    local: bool = False,
) -> None:
    """`local`: a connection on the daemon's local socket (walfs.common.local_socket): no TLS,
    no SASL, its org named by its first request's client id."""
    try:
        if local:
            conn = Connection(peer=_local_peer(stream.socket), host="localhost", port=0)
        else:
            peer_host, peer_port = _addr(stream.socket.getpeername())
            host, port = _addr(stream.socket.getsockname())
            conn = Connection(peer=f"{peer_host}:{peer_port}", host=host, port=port)
    except OSError as e:
        # Reset before we got to it (ENOTCONN): nothing to serve.
        log.info("connection gone before it was served: %s", e)
        with trio.CancelScope(shield=True):
            await stream.aclose()
        return
    if local:
        auth = ssl_context = None
    else:
        send_whole_answers(stream)
    broker = tenants.default
    org_unset = local  # the local socket's org is set by the first request
    session = conn.sasl = SaslSession(auth, conn.peer) if auth is not None and auth.sasl else None
    io: trio.abc.Stream = stream
    if ssl_context is not None:
        io = trio.SSLStream(stream, ssl_context, server_side=True)
    # Reads and sends that complete at once skip trio's loop turn (plain TCP only).
    direct = direct_socket(stream) if io is stream else None
    reader = FrameReader(io, max_request_bytes, budget, direct)
    log.debug("%s: connected", conn.peer)
    observe = broker.request_latency.observe if broker.request_latency is not None else None
    # TLS and SASL must be done within the config's authentication_timeout_ms: a connection
    # that never finishes them would hold a connection slot for good.
    gate = trio.CancelScope()
    if auth is not None and (session is not None or ssl_context is not None):
        gate.deadline = trio.current_time() + auth.auth_timeout_s
    refused: str | None = None  # why SASL refused the client: closed once its answer is out
    try:
        with gate:
            if isinstance(io, trio.SSLStream):
                await io.do_handshake()
            if session is None:
                gate.deadline = math.inf
            drain_on = (FrameError, CloseConnection)  # the requests before the bad one get their answers
            answers = response_pipe(io, drain_on=drain_on, direct=direct)
            async with answers as pipe, read_ahead(reader) as frames:
                while True:
                    payload = await frames.next_frame()
                    if payload is None:
                        break
                    if session is not None and session.raw_tokens and not session.authenticated:
                        # SaslHandshake v0: bare tokens, no Kafka framing (librdkafka).
                        try:
                            token = await session.step(bytes(payload))
                        except AuthenticationFailed as e:
                            why = f"SASL {session.mechanism} authentication failed: {e}"
                            raise CloseConnection(why) from e
                        finally:
                            del payload
                            await reader.release_frame()
                        await pipe.send(token)
                        if session.user is not None:
                            broker = tenants.get(session.user.org_id)
                            gate.deadline = math.inf
                        continue
                    if session is not None and not session.authenticated:
                        api_key = read_preamble(payload)[0]
                        if not session.allowed(api_key):
                            # Kafka's IllegalSaslStateException: no answer, the connection closes.
                            why = f"request with API key {api_key} before SASL authentication"
                            raise CloseConnection(why)
                    if org_unset:
                        org_unset = False
                        org = org_of_client_id(read_client_id(payload))
                        if org is not None:
                            broker = tenants.get(org)
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
                    job, conn.after_answer = conn.after_answer, None
                    if job is not None and pipe.idle and frames.idle:
                        job()  # the answer is out and nothing waits: the fetch's read-ahead
                    if session is not None:
                        if session.failed:
                            refused = f"SASL refused ({session.mechanism or 'no mechanism'})"
                            break  # the pipe sends the refusal before the connection closes
                        if session.user is not None and gate.deadline != math.inf:
                            broker = tenants.get(session.user.org_id)
                            gate.deadline = math.inf
        if gate.cancelled_caught:
            log.warning("%s: closing connection: TLS/SASL not done in time", conn.peer)
        elif refused is not None:
            log.warning("%s: closing connection: %s", conn.peer, refused)
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
        if conn.fetch_ahead is not None:
            conn.fetch_ahead.take_all()
        if direct is not None:
            direct.close()  # before the stream: its descriptor is a dup of the stream's
        with trio.CancelScope(shield=True):
            await reader.release_all()
            if io is not stream:
                await _close(io)
            await stream.aclose()
        log.debug("%s: closed", conn.peer)


def _local_peer(sock: trio.socket.SocketType) -> str:
    """A local socket's peer for the log: its process and user (SO_PEERCRED)."""
    try:
        cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", cred)
    except OSError:
        return "local"
    return f"local pid {pid} uid {uid}"


def read_client_id(payload: bytes | memoryview) -> str | None:
    """The client id of a request (header v1 and later: an INT16-length string after
    the api key, version and correlation id); None when absent or unreadable."""
    if len(payload) < 10:
        return None
    n = int.from_bytes(payload[8:10], "big", signed=True)
    if n < 0 or len(payload) < 10 + n:
        return None
    return bytes(payload[10 : 10 + n]).decode("utf-8", "replace")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen_security(
    host: str,
    auth: AuthConfig | None,
    insecure_listen: bool,
    flags: tuple[str, str] = ("--auth-config", "--insecure-listen"),
) -> None:
    """The rule for where a listener may bind (docs/kafka.md, Security): loopback needs
    nothing; any other address needs SASL (SASL_PLAINTEXT or SASL_SSL) unless the operator
    said --insecure-listen. Raises InsecureListenError naming `flags` (the auth config's
    and the insecure switch's options: the mount's are --kafka-auth-config and
    --kafka-insecure-listen)."""
    if is_loopback(host) or insecure_listen or (auth is not None and auth.sasl):
        return
    proto = auth.security_protocol if auth is not None else "PLAINTEXT"
    raise InsecureListenError(
        f"refusing to listen on {host} with {proto}: clients there would not authenticate "
        f"(give {flags[0]} FILE with SASL_SSL or SASL_PLAINTEXT users, or {flags[1]})"
    )


class InsecureListenError(ValueError):
    pass


async def serve_kafka(
    engine: LogEngine,
    host: str | None,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    allow_delete: bool = False,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    request_latency: Any = None,
    config: BrokerConfig | None = None,
    auth: AuthConfig | None = None,
    insecure_listen: bool = False,
    local: socket.socket | None = None,
) -> None:
    """Serve ``wal`` to Kafka clients on ``host:port`` until cancelled.

    Start it with ``port = await nursery.start(serve_kafka, wal, host, port)``: the
    value is the bound port (useful with port 0). ``allow_delete`` enables
    DeleteTopics; ``config`` holds Kafka's broker settings (num.partitions, ...). The
    caller owns ``wal`` and closes it after this returns.
    ``max_inflight_bytes`` bounds the request bytes all connections hold at once (a frame
    that does not fit waits); connections beyond ``max_connections`` are closed at once.
    ``auth`` (walfs.kafka.auth_config.AuthConfig) sets TLS and SASL; SASL users see their
    own org's topics and groups (LogEngine.for_org), connections without SASL those of
    ``wal.org_id``. A non-loopback ``host`` without SASL raises InsecureListenError unless
    ``insecure_listen``.
    ``local``: the daemon's listening local socket (walfs.common.local_socket.bind), served by
    the same brokers (its connections without TLS or SASL, each in the org its first
    request names); ``host`` None: that socket only (the started value is then 0)."""
    if max_request_bytes > max_inflight_bytes:
        raise ValueError("max_request_bytes cannot exceed max_inflight_bytes")
    if host is None and local is None:
        raise ValueError("serve_kafka needs a host or a local socket")
    if host is not None:
        check_listen_security(host, auth, insecure_listen)
    ssl_context = auth.ssl_context() if auth is not None else None
    budget = ByteBudget(max_inflight_bytes)
    open_connections = 0
    refused = 0
    listeners: list[trio.SocketListener] = []
    bound = 0
    if host is not None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()[1]
        proto = auth.security_protocol if auth is not None else "PLAINTEXT"
        log.info("kafka listener on %s:%d (%s)", host, bound, proto)
    local_listeners: list[trio.SocketListener] = []
    if local is not None:
        local_listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(local))]

    async def handle(stream: trio.SocketStream) -> None:
        await limited(stream, False)

    async def handle_local(stream: trio.SocketStream) -> None:
        await limited(stream, True)

    async def limited(stream: trio.SocketStream, is_local: bool) -> None:
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
            await _serve_connection(tenants, stream, max_request_bytes, budget, auth, ssl_context, is_local)
        finally:
            open_connections -= 1

    async with trio.open_nursery() as nursery:
        tenants = Tenants(
            engine,
            nursery,
            allow_delete=allow_delete,
            api_versions=dict(SUPPORTED),
            config=config or BrokerConfig(),
            request_latency=request_latency,
        )
        if listeners:
            await nursery.start(trio.serve_listeners, handle, listeners)
        if local_listeners:
            await nursery.start(trio.serve_listeners, handle_local, local_listeners)
        task_status.started(bound)
