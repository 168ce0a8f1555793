"""Runs one mount: opens the Wal, mounts, serves until unmount or a signal, closes cleanly.

The daemon's life is walfs/service/lifecycle.py's, shared with `walfs serve`; the mount's
own steps in it (the order matters):
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

import errno
import importlib
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyfuse3
import trio

from walfs.engine.capabilities import NoWaitAppend, has
from walfs.engine.contract import LogEngine
from walfs.engine.targets import normalize_target
from walfs.fuse import kernel_flags
from walfs.fuse.operations import WalOperations
from walfs.service import lifecycle
from walfs.service.metrics import Metrics

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
    return lifecycle.open_wal(
        config.data_dir,
        fsync=config.fsync,
        org_id=config.org_id,
        fsync_interval_ms=config.fsync_interval_ms,
        retention_ms=config.retention_ms,
        retention_bytes=config.retention_bytes,
        min_free_bytes=config.min_free_bytes,
        segment_size=config.segment_size,
        block_size=config.block_size,
    )


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
    engine = open_wal(config)
    ops = WalOperations(
        engine,
        normalize_target(config.data_dir),
        # Appends that wait (for an fsync, or for a cluster's acknowledgement: an engine
        # that cannot append without waiting) run in worker threads, not on the event loop.
        blocking_appends=config.fsync == "always" or not has(engine, NoWaitAppend),
        max_line_bytes=config.max_line_bytes,
        uid=config.uid,
        gid=config.gid,
        umask=config.umask,
        allow_delete=config.allow_delete,
        info={"fsync": config.fsync, "org_id": str(config.org_id)},
    )
    metrics = Metrics(engine, fuse=ops.request_latency)
    ops.metrics_text = metrics.summary_text  # the root's user.walfs.metrics: bounded
    try:
        with lifecycle.running(engine, config.data_dir, metrics) as service:
            if config.metrics_listen:
                host, port = lifecycle.serve_metrics(service, config.metrics_listen)
                ops.info["metrics_listen"] = f"{host}:{port}"
                log.info("metrics on http://%s:%d/metrics", host, port)
            try:
                pyfuse3.init(ops, config.mountpoint, fuse_options(config))
            except RuntimeError as exc:  # pyfuse3's "fuse_session_mount failed": libfuse said why on stderr
                raise OSError(
                    0, f"{config.mountpoint}: the kernel or fusermount3 refused the mount ({exc}); libfuse's "
                    "reason is on the daemon's stderr (`walfs mount -f`, or the --log-file)"
                ) from exc
            service.closing.append(lambda: _unmount(config.mountpoint))
            # Before the kernel's INIT is read (pyfuse3.main): cached pages survive growth.
            kernel_flags.no_auto_inval_data()
            trio.run(_serve, ops, config, on_ready, service)
    finally:
        log.info("walfs stopped: %s unmounted, WAL closed", config.mountpoint)
    return service.exit_status


def _unmount(mountpoint: str) -> None:
    # Lazy (libfuse detaches as root; fusermount3 -z otherwise): a reader holding a file
    # must not keep the mount half alive.
    try:
        pyfuse3.close(unmount=True)
    except Exception:
        log.exception("unmount failed; detaching lazily")
        lazy_unmount(mountpoint)


def _on_signal(signum: signal.Signals) -> None:
    log.info("signal %s: unmounting", signum.name)
    sd_notify("STOPPING=1")
    pyfuse3.terminate()


async def _serve(
    ops: WalOperations,
    config: MountConfig,
    on_ready: Callable[[], None] | None,
    service: lifecycle.Service,
) -> None:
    async with trio.open_nursery() as nursery:
        signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        await lifecycle.supervise(nursery, service, pyfuse3.terminate, _on_signal, signals)
        nursery.start_soon(ops.invalidator.run, name="walfs-invalidate")
        nursery.start_soon(ops.watcher.run, name="walfs-watch")
        nursery.start_soon(ops.pages.run, name="walfs-page-push")
        ops.engine.watch(ops.watcher.poke)
        nursery.start_soon(_after_init, ops, config, name="walfs-after-init")
        if config.kafka_listen:
            # Before readiness: a port that cannot be bound fails the mount (run()
            # unmounts), instead of a mount that silently lacks its listener.
            await _start_kafka(nursery, service, config)
        elif service.local is not None:
            # The local socket alone: its Kafka code (a second of CPU, ~20 MiB) is loaded
            # when the first client connects; it waits in the socket's backlog meanwhile.
            nursery.start_soon(_serve_local, nursery, service, config, name="walfs-local")
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


async def _serve_local(nursery: trio.Nursery, service: lifecycle.Service, config: MountConfig) -> None:
    assert service.local is not None
    await trio.lowlevel.wait_readable(service.local.sock)  # a connection waits to be accepted
    await trio.to_thread.run_sync(importlib.import_module, "walfs.kafka")
    await _start_kafka(nursery, service, config)


async def _start_kafka(nursery: trio.Nursery, service: lifecycle.Service, config: MountConfig) -> None:
    """The Kafka face on the mount's own Wal, in the daemon's nursery: it stops with the
    mount (the nursery is cancelled once pyfuse3.main returns), before Wal.close(). It
    serves the local socket always, the TCP listener with --kafka-listen."""
    from walfs.kafka.auth_config import AuthConfig

    auth = AuthConfig(config.kafka_auth_config) if config.kafka_auth_config else None
    host, bound = await lifecycle.start_kafka(
        nursery,
        service,
        config.kafka_listen,
        allow_delete=config.kafka_allow_delete,
        config=config.kafka_config,
        auth=auth,
        insecure_listen=config.kafka_insecure_listen,
    )
    if host is not None:
        log.info("kafka listening on %s", lifecycle.show_address(host, bound))
