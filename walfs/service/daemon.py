"""Runs one mount: opens the Wal, mounts, serves until unmount or a signal, closes cleanly.

Lifecycle (the order matters):
1. open the Wal (takes its lock: a second daemon on the same data dir fails here, before
   anything is mounted), then bind the local socket DATA_DIR/kafka.sock
   (walfs.common.local_socket: writes by path; removed at the end, before the Wal closes);
2. pyfuse3.init mounts; from now on every exit path unmounts, so the mount is never left
   dead ("Transport endpoint is not connected");
3. inside trio: background tasks start, readiness is announced (the `walfs mount` parent's
   pipe, and sd_notify READY=1), pyfuse3.main serves;
4. SIGTERM/SIGINT/SIGHUP -> STOPPING=1 and pyfuse3.terminate(); an external umount ends
   pyfuse3.main by itself;
5. partial lines still held by open files are committed, the mount goes away, and
   Wal.close() makes everything durable.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyfuse3
import trio

from walfs.common import local_socket
from walfs.common.metrics import Metrics
from walfs.engine.contract import LogEngine, is_local, normalize_target
from walfs.fuse import kernel_flags
from walfs.fuse.operations import WalOperations

log = logging.getLogger("walfs.service.daemon")

# Mount options pyfuse3/libfuse 3.14 accept (others make init fail, see fuse-facts.md).
FUSE_PASSTHROUGH_OPTIONS = frozenset(
    {
        "allow_root",
        "nosuid",
        "nodev",
        "noexec",
        "suid",
        "dev",
        "exec",
        "sync",
        "dirsync",
        "atime",
        "noatime",
        "auto_unmount",
        "debug",
    }
)


@dataclass
class MountConfig:
    data_dir: str
    mountpoint: str
    fsync: str = "interval"
    org_id: int = 1
    allow_other: bool = False
    fsync_interval_ms: int = 100
    segment_size: int | None = None
    block_size: int | None = None
    fuse_options: set[str] = field(default_factory=set)
    max_tasks: int = 99
    # "HOST:PORT" for a Kafka-wire listener on the same Wal (docs/kafka.md); None: off.
    kafka_listen: str | None = None
    # Let Kafka's DeleteTopics delete. Off by default: the mount itself refuses unlink.
    kafka_allow_delete: bool = False
    # Kafka's broker settings for the listener (walfs.kafka.broker_config.BrokerConfig).
    kafka_config: Any = None
    # The Kafka listener's TLS/SASL file (walfs.kafka.auth_config); None: plaintext.
    kafka_auth_config: str | None = None
    # Let the listener bind a non-loopback address without SASL.
    kafka_insecure_listen: bool = False

    # The kernel's read-ahead for this mount (KiB; 0 leaves the kernel's 128 KiB). Larger
    # read-ahead means fewer, larger READ requests: each costs a Python round trip.
    read_ahead_kb: int = 1024
    # The longest line a write may make (walfs.fuse.line_assembly.DEFAULT_MAX_LINE_BYTES): a writer
    # that never sends a newline gets EFBIG there instead of growing the daemon's memory.
    max_line_bytes: int = 16 << 20
    # Owner and mode of every file and directory of the tree (other FUSE file systems'
    # uid=, gid=, umask=); None: the daemon's own uid/gid. The kernel enforces them.
    uid: int | None = None
    gid: int | None = None
    umask: int = 0o022
    # "HOST:PORT" of a Prometheus endpoint (walfs.common.metrics); None: off.
    metrics_listen: str | None = None
    # The WAL's default retention (walfs.engine.settings; per-topic xattrs override it). None:
    # keep everything (the command line's default; the systemd conf of a new install
    # sets 7 days, Kafka's default).
    retention_ms: int | None = None
    retention_bytes: int | None = None
    # Appends that need a new segment are refused (ENOSPC) while less than this would
    # stay free: room for catalog entries, cursors and settings on a full disk.
    min_free_bytes: int = 0
    # `rm TOPIC` deletes the topic (off: the mount refuses unlink with EPERM).
    allow_delete: bool = False


def sd_notify(message: str) -> bool:
    """Sends one datagram to $NOTIFY_SOCKET (systemd's notify protocol); False if unset."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
        return True
    except OSError as exc:
        log.warning("sd_notify(%r) failed: %s", message, exc)
        return False


def is_dead_mount(path: str) -> bool:
    """True for a FUSE mount whose daemon is gone (ENOTCONN or ECONNABORTED).

    statfs, not stat: the kernel answers stat from cached attributes for a while after
    the daemon died, but always sends statfs to the daemon.
    """
    try:
        os.statvfs(path)
    except OSError as exc:
        return exc.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    return False


def lazy_unmount(path: str) -> None:
    """Detaches `path` even while files are open (fusermount3 -uz); quiet if not mounted."""
    subprocess.run(
        ["fusermount3", "-u", "-z", "-q", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def mount_device(mountpoint: str) -> str | None:
    """The mount's "major:minor" from /proc/self/mountinfo (asking the mount itself,
    stat(), would wait for this very daemon)."""
    # realpath() of the mount point itself would stat it: resolve its parent only.
    path = os.path.abspath(mountpoint)
    target = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[4] == target:
            found = fields[2]  # the last one is the mount on top
    return found


def set_read_ahead(mountpoint: str, kib: int) -> None:
    """Sets the mount's read-ahead (root only; others keep the kernel's default)."""
    if kib <= 0:
        return
    device = mount_device(mountpoint)
    if device is None:
        return
    try:
        with open(f"/sys/class/bdi/{device}/read_ahead_kb", "w") as f:
            f.write(str(kib))
    except OSError as exc:
        log.info("read-ahead left at the kernel default: %s", exc)


def open_wal(config: MountConfig) -> LogEngine:
    from walfs.engine.contract import open_engine  # late: `walfs --help` should not need the engine built

    kwargs: dict[str, Any] = {
        "fsync_interval_ms": config.fsync_interval_ms,
        "retention_ms": config.retention_ms,
        "retention_bytes": config.retention_bytes,
        "min_free_bytes": config.min_free_bytes,
    }
    if config.segment_size is not None:
        kwargs["segment_size"] = config.segment_size
    if config.block_size is not None:
        kwargs["block_size"] = config.block_size
    return open_engine(config.data_dir, fsync=config.fsync, org_id=config.org_id, **kwargs)


def fuse_options(config: MountConfig) -> set[str]:
    data_dir = normalize_target(config.data_dir)
    # fsname shows in /proc/mounts and df; a comma would split the option string.
    fsname = data_dir if "," not in data_dir else "walfs"
    options = {"default_permissions", f"fsname={fsname}", "subtype=walfs"}
    if config.allow_other:
        options.add("allow_other")
    options |= config.fuse_options
    return options


def run(config: MountConfig, on_ready: Callable[[], None] | None = None) -> int:
    """Mounts and serves until unmounted or signalled. Returns the exit status."""
    if is_dead_mount(config.mountpoint):
        # A daemon killed earlier left its mount behind: clear it so we can mount again.
        log.warning("%s is a dead mount; detaching it", config.mountpoint)
        lazy_unmount(config.mountpoint)
    wal = open_wal(config)
    ops = WalOperations(
        wal,
        normalize_target(config.data_dir),
        # Appends that wait (for an fsync, or for a cluster's acknowledgement) run in
        # worker threads, not on the event loop.
        blocking_appends=config.fsync == "always" or not is_local(config.data_dir),
        max_line_bytes=config.max_line_bytes,
        uid=config.uid,
        gid=config.gid,
        umask=config.umask,
        allow_delete=config.allow_delete,
        info={"fsync": config.fsync, "org_id": str(config.org_id)},
    )
    metrics = Metrics(wal, fuse=ops.request_latency)
    ops.metrics_text = metrics.summary_text  # the root's user.walfs.metrics: bounded
    if config.metrics_listen:
        with listening("--metrics-listen", config.metrics_listen):
            host, port = metrics.serve(config.metrics_listen)
        ops.info["metrics_listen"] = f"{host}:{port}"
        log.info("metrics on http://%s:%d/metrics", host, port)
    mounted = False
    local = bind_local_socket(config.data_dir)
    try:
        try:
            pyfuse3.init(ops, config.mountpoint, fuse_options(config))
        except RuntimeError as exc:  # pyfuse3's "fuse_session_mount failed": libfuse said why on stderr
            raise OSError(
                0, f"{config.mountpoint}: the kernel or fusermount3 refused the mount ({exc}); libfuse's "
                "reason is on the daemon's stderr (`walfs mount -f`, or the --log-file)"
            ) from exc
        mounted = True
        # Before the kernel's INIT is read (pyfuse3.main): cached pages survive growth.
        kernel_flags.no_auto_inval_data()
        trio.run(_serve, ops, config, on_ready, metrics, local)
    finally:
        if local is not None:
            local.close()  # before the WAL closes: a client that connects finds it owned
        if mounted:
            # Lazy (libfuse detaches as root; fusermount3 -z otherwise): a reader holding a
            # file must not keep the mount half alive.
            try:
                pyfuse3.close(unmount=True)
            except Exception:
                log.exception("unmount failed; detaching lazily")
                lazy_unmount(config.mountpoint)
        metrics.close()
        failed = wal.failed
        try:
            wal.close()
        except Exception:
            if not failed:
                raise
            log.exception("closing a failed WAL")
        log.info("walfs stopped: %s unmounted, WAL closed", config.mountpoint)
    if failed:
        log.error("walfs exits with status %d: an fsync failed (systemd restarts it)", EXIT_WAL_FAILED)
        return EXIT_WAL_FAILED
    return 0


# Exit status of a daemon whose WAL failed (an fsync error): non-zero so that systemd's
# Restart=on-failure reopens the WAL, whose recovery keeps exactly what reached the disk.
EXIT_WAL_FAILED = 75


async def watch_wal_failure(wal: Any, stop: Callable[[], None], every_s: float = 0.2) -> None:
    """Stops the daemon once the WAL has failed: answering EIO forever helps nobody,
    while an exit lets systemd restart it with a clean recovery."""
    while not wal.failed:
        await trio.sleep(every_s)
    log.error("the WAL failed (an fsync error): stopping so that the service restarts")
    stop()


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


async def _serve(
    ops: WalOperations,
    config: MountConfig,
    on_ready: Callable[[], None] | None,
    metrics: Metrics,
    local: local_socket.Bound | None = None,
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ops.invalidator.run, name="walfs-invalidate")
        nursery.start_soon(ops.watcher.run, name="walfs-watch")
        nursery.start_soon(ops.pages.run, name="walfs-page-push")
        ops.wal.watch(ops.watcher.poke)
        nursery.start_soon(_signals, name="walfs-signals")
        nursery.start_soon(watch_wal_failure, ops.wal, pyfuse3.terminate, name="walfs-failure")
        nursery.start_soon(_after_init, ops, config, name="walfs-after-init")
        if config.kafka_listen:
            # Before readiness: a port that cannot be bound fails the mount (the finally
            # in run() unmounts), instead of a mount that silently lacks its listener.
            with listening("--kafka-listen", config.kafka_listen):
                await _start_kafka(nursery, ops, config, metrics, local)
        elif local is not None:
            # The local socket alone: its Kafka code (a second of CPU, ~20 MiB) is loaded
            # when the first client connects; it waits in the socket's backlog meanwhile.
            nursery.start_soon(_serve_local, nursery, ops, config, metrics, local, name="walfs-local")
        # The mount exists since pyfuse3.init; requests wait in /dev/fuse until main runs,
        # which starts without yielding after this point.
        log.info("walfs serving %s on %s", config.data_dir, config.mountpoint)
        if on_ready is not None:
            on_ready()
        sd_notify("READY=1\nSTATUS=serving " + config.mountpoint)
        try:
            await pyfuse3.main(max_tasks=config.max_tasks)
        finally:
            sd_notify("STOPPING=1")
            with trio.CancelScope(shield=True):
                await ops.commit_all_partials()
            nursery.cancel_scope.cancel()


async def _after_init(ops: WalOperations, config: MountConfig) -> None:
    await ops.initialized.wait()
    set_read_ahead(config.mountpoint, config.read_ahead_kb)


async def _serve_local(
    nursery: trio.Nursery,
    ops: WalOperations,
    config: MountConfig,
    metrics: Metrics,
    local: local_socket.Bound,
) -> None:
    await trio.lowlevel.wait_readable(local.sock)  # a connection waits to be accepted
    await trio.to_thread.run_sync(importlib.import_module, "walfs.kafka")
    await _start_kafka(nursery, ops, config, metrics, local)


async def _start_kafka(
    nursery: trio.Nursery,
    ops: WalOperations,
    config: MountConfig,
    metrics: Metrics,
    local: local_socket.Bound | None = None,
) -> None:
    """Runs serve_kafka on the mount's own Wal, in the daemon's nursery: it stops with the
    mount (the nursery is cancelled once pyfuse3.main returns), before Wal.close(). It
    serves the local socket always, the TCP listener with --kafka-listen."""
    from walfs.common.addresses import parse_listen_address
    from walfs.kafka import serve_kafka
    from walfs.kafka.auth_config import AuthConfig

    host: str | None = None
    port = 0
    if config.kafka_listen:
        host, port = parse_listen_address(config.kafka_listen)
    auth = AuthConfig(config.kafka_auth_config) if config.kafka_auth_config else None
    bound = await nursery.start(
        functools.partial(
            serve_kafka,
            ops.wal,
            host,
            port,
            allow_delete=config.kafka_allow_delete,
            request_latency=metrics.kafka,
            config=config.kafka_config,
            auth=auth,
            insecure_listen=config.kafka_insecure_listen,
            local=local.sock if local is not None else None,
        ),
        name="walfs-kafka",
    )
    if host is None:
        return
    shown = f"[{host}]" if ":" in host else host
    log.info("kafka listening on %s:%d", shown, bound)


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


async def _signals() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("signal %s: unmounting", signal.Signals(signum).name)
            sd_notify("STOPPING=1")
            pyfuse3.terminate()
            return
