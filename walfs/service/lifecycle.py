"""One daemon's life, shared by `walfs mount` (walfs/service/daemon.py) and `walfs serve`
(walfs/service/kafka_server.py).

The order matters:
1. the engine opens (open_wal: it takes the data directory's lock, so a second daemon
   fails here, before anything is served), and its metrics are made;
2. `running` binds the local socket DATA_DIR/kafka.sock (walfs.common.local_socket: writes
   by path; a remote engine has none);
3. inside trio one nursery owns every background task: `supervise` starts the signal
   handler (its receiver is open before anything is announced, so that a caller that stops
   the daemon as soon as it reads "ready" gets a clean stop) and the watch for a failed
   engine; the face starts its listeners there (`start_kafka`, `serve_metrics`: a port that
   cannot be bound fails the start with a ListenError naming its option);
4. a signal, a failed engine, or the face's own end (an unmount) stops it: the nursery is
   cancelled, every task ends with it;
5. on the way out, in this order: the local socket goes (before the engine closes: a
   client that connects finds it owned), the face's own closing (the mount's unmount), the
   metrics, and the engine closes (durably). A failed engine (an fsync error) exits with
   EXIT_WAL_FAILED, so that systemd's Restart=on-failure reopens it with a clean recovery.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from walfs.common import local_socket
from walfs.engine.targets import is_local

if TYPE_CHECKING:
    import socket

    from walfs.engine.contract import LogEngine
    from walfs.service.metrics import Metrics

log = logging.getLogger("walfs.service")

# Exit status of a daemon whose WAL failed (an fsync error): non-zero so that systemd's
# Restart=on-failure reopens the WAL, whose recovery keeps exactly what reached the disk.
EXIT_WAL_FAILED = 75


def open_wal(
    data_dir: str,
    *,
    fsync: str,
    org_id: int,
    fsync_interval_ms: int,
    retention_ms: int | None,
    retention_bytes: int | None,
    min_free_bytes: int,
    segment_size: int | None = None,
    block_size: int | None = None,
) -> LogEngine:
    """The daemon's engine (a new data directory gets the geometry given; None: the
    engine's default)."""
    from walfs.open import open_engine  # late: `walfs --help` needs no engine built

    kwargs: dict[str, Any] = {
        "fsync_interval_ms": fsync_interval_ms,
        "retention_ms": retention_ms,
        "retention_bytes": retention_bytes,
        "min_free_bytes": min_free_bytes,
    }
    if segment_size is not None:
        kwargs["segment_size"] = segment_size
    if block_size is not None:
        kwargs["block_size"] = block_size
    return open_engine(data_dir, fsync=fsync, org_id=org_id, **kwargs)


def bind_local_socket(data_dir: str) -> local_socket.Bound | None:
    """The daemon's local socket in its data directory (walfs.common.local_socket), once the
    WAL (and its lock) is open; None for a remote engine, or when it cannot be bound
    (logged: the daemon serves everything else)."""
    if not is_local(data_dir):
        return None
    try:
        bound = local_socket.bind(data_dir)
    except OSError as exc:
        log.warning("no local socket in %s (writes by path need it): %s", data_dir, exc)
        return None
    log.info("local socket %s", local_socket.socket_path(data_dir))
    return bound


@dataclass
class Service:
    """A running daemon's engine, metrics and local socket; `exit_status` once it ended."""

    engine: LogEngine
    metrics: Metrics
    local: local_socket.Bound | None = None
    # The face's own closing (the mount's unmount), run after the local socket closes and
    # before the metrics and the engine do.
    closing: list[Callable[[], None]] = field(default_factory=list)
    failed: bool = False

    @property
    def local_sock(self) -> socket.socket | None:
        return self.local.sock if self.local is not None else None

    @property
    def exit_status(self) -> int:
        return EXIT_WAL_FAILED if self.failed else 0


@contextlib.contextmanager
def running(engine: LogEngine, data_dir: str, metrics: Metrics) -> Iterator[Service]:
    """Binds the local socket; on the way out (whatever happened inside) closes the local
    socket, runs the face's `closing`, closes the metrics and the engine, in this order.
    A failed engine's close error is logged, not raised: the exit status tells."""
    service = Service(engine, metrics, bind_local_socket(data_dir))
    try:
        yield service
    finally:
        if service.local is not None:
            service.local.close()  # before the WAL closes: a client that connects finds it owned
        try:
            for close in service.closing:
                close()
        finally:
            metrics.close()
            service.failed = bool(engine.failed)
            try:
                engine.close()
            except Exception:
                if not service.failed:
                    raise
                log.exception("closing a failed WAL")
    if service.failed:
        log.error("walfs exits with status %d: an fsync failed (systemd restarts it)", EXIT_WAL_FAILED)


async def watch_wal_failure(engine: Any, stop: Callable[[], None], every_s: float = 0.2) -> None:
    """Stops the daemon once the WAL has failed: answering EIO forever helps nobody,
    while an exit lets systemd restart it with a clean recovery."""
    while not engine.failed:
        await trio.sleep(every_s)
    log.error("the WAL failed (an fsync error): stopping so that the service restarts")
    stop()


async def _signals(
    signals: tuple[signal.Signals, ...],
    on_signal: Callable[[signal.Signals], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.open_signal_receiver(*signals) as received:
        task_status.started()
        async for signum in received:
            on_signal(signal.Signals(signum))


async def supervise(
    nursery: trio.Nursery,
    service: Service,
    stop: Callable[[], None],
    on_signal: Callable[[signal.Signals], None],
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
) -> None:
    """Starts, in the daemon's nursery, what every daemon runs: the signal handler (its
    receiver open once this returns) and the watch that calls `stop` once the engine has
    failed."""
    await nursery.start(functools.partial(_signals, signals, on_signal), name="walfs-signals")
    nursery.start_soon(watch_wal_failure, service.engine, stop, name="walfs-failure")


class ListenError(OSError):
    """A listener (Kafka, metrics) that could not bind: names its option and address."""


_LISTEN_HINTS = {
    errno.EADDRINUSE: "another process holds this port: stop it, or choose another; port 0 picks a free one",
    errno.EACCES: "ports below 1024 need root (or CAP_NET_BIND_SERVICE)",
    errno.EADDRNOTAVAIL: "no interface of this machine has this address",
}


@contextlib.contextmanager
def listening(option: str, address: str) -> Iterator[None]:
    """Turns a failed bind inside into a ListenError naming `option` and `address`."""
    try:
        yield
    except ListenError:
        raise
    except OSError as exc:
        hint = _LISTEN_HINTS.get(exc.errno or 0)
        what = exc.strerror or str(exc)
        message = f"{option} {address}: cannot listen: {what}" + (f" ({hint})" if hint else "")
        raise ListenError(exc.errno or 0, message) from exc


async def start_kafka(
    nursery: trio.Nursery,
    service: Service,
    listen: str | None,
    option: str = "--kafka-listen",
    **options: Any,
) -> tuple[str | None, int]:
    """Runs serve_kafka on the daemon's engine in its nursery (it stops with the daemon,
    before the engine closes): the local socket always, a TCP listener on `listen`
    ("HOST:PORT"; None: none). Returns (host, bound port)."""
    from walfs.common.addresses import parse_listen_address
    from walfs.kafka import serve_kafka

    host: str | None = None
    port = 0
    if listen:
        host, port = parse_listen_address(listen)
    start = functools.partial(
        serve_kafka,
        service.engine,
        host,
        port,
        request_latency=service.metrics.kafka,
        local=service.local_sock,
        **options,
    )
    with listening(option, listen) if listen else contextlib.nullcontext():
        bound = await nursery.start(start, name="walfs-kafka")
    return host, bound


def show_address(host: str, port: int) -> str:
    """HOST:PORT as a person types it ([::1]:9092 for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve_metrics(service: Service, listen: str) -> tuple[str, int]:
    """Starts the Prometheus endpoint on `listen` (a ListenError if it cannot bind)."""
    with listening("--metrics-listen", listen):
        return service.metrics.serve(listen)
