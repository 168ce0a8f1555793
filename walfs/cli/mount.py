"""`walfs mount DATA_DIR MOUNTPOINT [options]`: mounts and returns once the mount serves.

Without --foreground the command forks: the child (new session, stdio on /dev/null or the
log file) runs the daemon, and the parent waits on a pipe until the child says the mount
is ready (exit 0) or reports why it failed (exit 1). mount(8) and fstab need exactly this:
the helper must return, with the mount up.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
from collections.abc import Callable

from walfs.cli.common import (
    CliError,
    Parser,
    UsageError,
    explain,
    module_main,
    mount_of,
    octal,
)
from walfs.common.sizes import parse_size
from walfs.engine.targets import is_local, normalize_target, prepare_target

# Options mount(8)/fstab pass that concern mount(8) itself, not the file system.
IGNORED_MOUNT_OPTIONS = frozenset(
    {
        "rw",
        "defaults",
        "auto",
        "noauto",
        "user",
        "nouser",
        "users",
        "_netdev",
        "nofail",
        "default_permissions",
    }
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="walfs mount", description="Mount a walfs data directory as a file tree.")
    p.add_argument(
        "data_dir", help="the WAL's data directory (created if missing), or kafka://HOST:PORT[,...]/NAMESPACE"
    )
    p.add_argument("mountpoint", help="an existing empty directory (see --nonempty)")
    p.add_argument("-f", "--foreground", action="store_true", help="stay attached (systemd)")
    p.add_argument(
        "--fsync",
        choices=("always", "interval", "never"),
        default=None,
        help="when appends reach the disk: before each write returns (always), within "
        "--fsync-interval-ms (interval, the default), or when the kernel decides (never)",
    )
    p.add_argument(
        "--fsync-interval-ms", type=int, default=None, help="with --fsync interval: the period (default 100)"
    )
    p.add_argument(
        "--org-id", type=int, default=None, help="the org whose topics the mount shows (default 1)"
    )
    p.add_argument(
        "--nonempty",
        action="store_true",
        default=None,
        help="mount over a directory that holds files (hidden while mounted; off: refused)",
    )
    p.add_argument(
        "--allow-other",
        action="store_true",
        default=None,
        help="let other users in (needs user_allow_other in /etc/fuse.conf unless root)",
    )
    p.add_argument("--log-level", default=None, help="debug, info, warning (default), error")
    p.add_argument("--log-file", default=None, help="log here when in the background")
    p.add_argument(
        "--segment-size",
        type=parse_size,
        default=None,
        help="size of each segment file of a new data directory, e.g. 64M (default 1G)",
    )
    p.add_argument(
        "--block-size",
        type=parse_size,
        default=None,
        help="a new data directory's block, the least disk a topic takes, e.g. 1M (default 10M)",
    )
    p.add_argument(
        "--read-ahead-kb",
        type=int,
        default=None,
        help="the kernel's read-ahead for the mount in KiB (default 1024; 0: kernel default)",
    )
    p.add_argument("--uid", type=int, default=None, help="owner of every file (default: the daemon's)")
    p.add_argument("--gid", type=int, default=None, help="group of every file (default: the daemon's)")
    p.add_argument(
        "--umask",
        type=octal,
        default=None,
        help="octal; modes are 0666/0777 less it (default 022): who may read, write, commit",
    )
    p.add_argument(
        "--max-line-bytes",
        type=parse_size,
        default=None,
        help="the longest line (record) a write may make, e.g. 16M (default 16 MiB, at least 1M)",
    )
    p.add_argument(
        "--retention-ms",
        default=None,
        help="default retention by age in ms for every topic (-1: none, the default)",
    )
    p.add_argument(
        "--retention-bytes",
        default=None,
        help="default retention by size per partition, e.g. 10G: the disk its segment files take, "
        "in whole files (docs/operations.md; -1: none, the default)",
    )
    p.add_argument(
        "--min-free",
        default=None,
        help="refuse appends needing a new segment while less than this stays free, e.g. 1G (default 0)",
    )
    p.add_argument(
        "--metrics-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics on HOST:PORT (off by default; e.g. 127.0.0.1:9464)",
    )
    p.add_argument(
        "--kafka-listen",
        default=None,
        metavar="HOST:PORT",
        help="also serve Kafka clients on HOST:PORT (off by default; e.g. 127.0.0.1:9092)",
    )
    p.add_argument(
        "--allow-delete",
        action="store_true",
        default=None,
        help="let `rm TOPIC` delete the topic (off: rm is refused)",
    )
    p.add_argument(
        "--kafka-allow-delete",
        action="store_true",
        default=None,
        help="let Kafka's DeleteTopics delete topics (off: the mount never deletes)",
    )
    p.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Kafka broker setting for the listener: num.partitions, auto.create.topics.enable, "
        "message.max.bytes, log.message.timestamp.type, log.retention.ms, log.retention.bytes (repeatable)",
    )
    p.add_argument(
        "--kafka-auth-config",
        default=None,
        metavar="FILE",
        help="TLS and SASL users for the Kafka listener (docs/kafka.md, Security)",
    )
    p.add_argument(
        "--kafka-insecure-listen",
        action="store_true",
        default=None,
        help="let the Kafka listener bind a non-loopback address without SASL",
    )
    p.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        help="comma-separated: fsync=, org_id=, allow_other, log_level=, "
        "log_file=, segment_size=, block_size=, fsync_interval_ms=, "
        "read_ahead_kb=, max_line_bytes=, uid=, gid=, umask=, metrics_listen=, retention_ms=, nonempty, "
        "retention_bytes=, min_free=, kafka_listen=HOST:PORT, kafka_config=NAME:VALUE (repeatable), "
        "kafka_auth_config=FILE, kafka_insecure_listen, kafka_allow_delete, allow_delete, and "
        "FUSE options (nosuid, nodev, noexec, noatime, allow_root, ...)",
    )
    # mount(8) passes these to helpers; they mean nothing here.
    p.add_argument("-s", "-n", "-v", dest="_ignored", action="store_true", help=argparse.SUPPRESS)
    return p


LOG_LEVELS = ("debug", "info", "warning", "error")


def config_from_args(args: argparse.Namespace) -> tuple[object, dict[str, str]]:
    """Merges -o options under the explicit flags; returns (MountConfig, logging opts)."""
    from walfs.fuse.operations import DEFAULT_MAX_LINE_BYTES, MIN_MAX_LINE_BYTES
    from walfs.service.daemon import FUSE_PASSTHROUGH_OPTIONS, MountConfig

    opts: dict[str, str] = {}
    kafka_items = list(args.kafka_config)
    fuse: set[str] = set()
    for group in args.options:
        for item in group.split(","):
            item = item.strip()
            if not item or item in IGNORED_MOUNT_OPTIONS or item.startswith("x-"):
                continue
            key, _, value = item.partition("=")
            key = key.replace("-", "_")
            if key == "kafka_config":
                kafka_items.append(value)
                continue
            if key in (
                "fsync",
                "org_id",
                "log_level",
                "log_file",
                "segment_size",
                "block_size",
                "fsync_interval_ms",
                "kafka_listen",
                "kafka_auth_config",
                "read_ahead_kb",
                "max_line_bytes",
                "metrics_listen",
                "retention_ms",
                "retention_bytes",
                "min_free",
                "uid",
                "gid",
                "umask",
            ):
                opts[key] = value
            elif key in ("allow_other", "kafka_allow_delete", "allow_delete", "kafka_insecure_listen",
                         "nonempty"):
                opts[key] = "1"
            elif key == "foreground":
                opts[key] = "1"
            elif key in FUSE_PASSTHROUGH_OPTIONS:
                fuse.add(item)
            elif key == "ro":
                raise UsageError("-o ro: read-only mounts are not supported")
            else:
                raise UsageError(f"-o: unknown option {item!r} (`walfs mount --help` lists them)")

    def pick(flag: object, key: str, default: str | None) -> str | None:
        return str(flag) if flag is not None else opts.get(key, default)

    fsync = pick(args.fsync, "fsync", "interval")
    if fsync not in ("always", "interval", "never"):
        raise UsageError(f"-o fsync=: must be always, interval or never, not {fsync!r}")
    kafka_listen = pick(args.kafka_listen, "kafka_listen", None)
    kafka_auth = pick(args.kafka_auth_config, "kafka_auth_config", None) or None
    kafka_insecure = bool(args.kafka_insecure_listen) or "kafka_insecure_listen" in opts
    if (kafka_auth or kafka_insecure) and not kafka_listen:
        raise UsageError("--kafka-auth-config and --kafka-insecure-listen need --kafka-listen")
    from walfs.common.addresses import parse_listen_address

    if kafka_listen:
        from walfs.kafka.auth_config import AuthConfig, AuthConfigError
        from walfs.kafka.listener import check_listen_security

        try:
            parse_listen_address(kafka_listen)
        except ValueError as exc:
            raise UsageError(f"--kafka-listen: {exc}") from None
        # Checked before the daemon backgrounds itself: a bad file or an address that the
        # rule refuses fails `walfs mount` (and systemd's start) with the reason.
        try:
            auth = AuthConfig(kafka_auth) if kafka_auth else None
            if auth is not None:
                auth.ssl_context()
            check_listen_security(
                parse_listen_address(kafka_listen)[0],
                auth,
                kafka_insecure,
                flags=("--kafka-auth-config", "--kafka-insecure-listen"),
            )
        except (AuthConfigError, ValueError) as exc:
            raise UsageError(f"--kafka-listen {kafka_listen}: {exc}") from None
        if kafka_auth:
            kafka_auth = os.path.abspath(kafka_auth)
    from walfs.kafka.broker_config import parse_broker_config, retention_options

    try:
        kafka_config = parse_broker_config(kafka_items)
        retention_ms, retention_bytes = retention_options(
            kafka_config,
            pick(args.retention_ms, "retention_ms", None),
            pick(args.retention_bytes, "retention_bytes", None),
        )
    except ValueError as exc:
        raise UsageError(f"--kafka-config: {exc}") from None

    def maybe(name: str, flag: object, convert: Callable[[str], int] = int) -> int | None:
        text = pick(flag, name, None)
        if text is None:
            return None
        try:
            return convert(str(text))
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise UsageError(f"--{name.replace('_', '-')} (-o {name}=): {exc}") from None

    def num(name: str, flag: object, default: int, convert: Callable[[str], int] = int) -> int:
        value = maybe(name, flag, convert)
        return default if value is None else value

    max_line_bytes = num("max_line_bytes", args.max_line_bytes, DEFAULT_MAX_LINE_BYTES, parse_size)
    if max_line_bytes < MIN_MAX_LINE_BYTES:
        raise UsageError(f"--max-line-bytes must be at least {MIN_MAX_LINE_BYTES}")
    config = MountConfig(
        data_dir=normalize_target(args.data_dir),
        mountpoint=os.path.abspath(args.mountpoint),
        fsync=fsync,
        org_id=num("org_id", args.org_id, 1),
        allow_other=bool(args.allow_other) or "allow_other" in opts,
        fsync_interval_ms=num("fsync_interval_ms", args.fsync_interval_ms, 100),
        segment_size=maybe("segment_size", args.segment_size, parse_size),
        block_size=maybe("block_size", args.block_size, parse_size),
        fuse_options=fuse,
        read_ahead_kb=num("read_ahead_kb", args.read_ahead_kb, 1024),
        kafka_listen=kafka_listen or None,
        kafka_allow_delete=bool(args.kafka_allow_delete) or "kafka_allow_delete" in opts,
        kafka_auth_config=kafka_auth,
        kafka_insecure_listen=kafka_insecure,
        allow_delete=bool(args.allow_delete) or "allow_delete" in opts,
        max_line_bytes=max_line_bytes,
        metrics_listen=pick(args.metrics_listen, "metrics_listen", None) or None,
        retention_ms=limit_option(retention_ms, "retention_ms"),
        retention_bytes=limit_option(retention_bytes, "retention_bytes"),
        kafka_config=kafka_config,
        min_free_bytes=limit_option(pick(args.min_free, "min_free", None), "min_free") or 0,
        uid=maybe("uid", args.uid),
        gid=maybe("gid", args.gid),
        umask=args.umask if args.umask is not None else num("umask", None, 0o022, octal),
    )
    if config.metrics_listen:
        try:
            parse_listen_address(config.metrics_listen)
        except ValueError as exc:
            raise UsageError(f"--metrics-listen: {exc}") from None
    level = pick(args.log_level, "log_level", "warning") or "warning"
    if level.lower() not in LOG_LEVELS:
        raise UsageError(f"--log-level: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    log_opts = {
        "level": level,
        "file": pick(args.log_file, "log_file", "") or "",
        "foreground": "1" if args.foreground or "foreground" in opts else "",
        "nonempty": "1" if args.nonempty or "nonempty" in opts else "",
    }
    return config, log_opts


def limit_option(text: str | None, name: str) -> int | None:
    """A retention limit option: a number with K/M/G, or -1 for none."""
    from walfs.common.sizes import parse_limit

    if text is None:
        return None
    try:
        return parse_limit(text)
    except ValueError:
        flag = "--" + name.replace("_", "-")
        raise UsageError(f"{flag}: not a limit: {text!r} (bytes or ms, with K/M/G; -1: none)") from None


def setup_logging(level: str, path: str | None) -> None:
    """Log records to `path` (stderr when None). A crash in native code (a segfault, an
    abort) also leaves every thread's Python stack on stderr (faulthandler); a daemon in
    the background has its stderr on the log file for this (see _daemonize)."""
    faulthandler.enable(all_threads=True)
    handler: logging.Handler
    handler = logging.FileHandler(path) if path else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Every open's recovery summary (walfs.local.recovery_log.log_recovery) shows at the default level.
    if root.level == logging.WARNING:
        logging.getLogger("walfs.recovery").setLevel(logging.INFO)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    config, log_opts = config_from_args(args)
    from walfs.service.daemon import MountConfig, run

    assert isinstance(config, MountConfig)
    check_places(config, nonempty=bool(log_opts["nonempty"]))
    if log_opts["file"]:
        try:
            os.close(os.open(log_opts["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640))
        except OSError as exc:
            raise CliError(f"--log-file {log_opts['file']}: {exc.strerror}") from None
    prepare_target(config.data_dir)

    if log_opts["foreground"]:
        setup_logging(log_opts["level"], log_opts["file"] or None)
        try:
            return run(config)
        except Exception as exc:
            # A traceback only for what a user cannot cause (a bug).
            logging.getLogger("walfs").error("mount failed: %s", exc, exc_info=explain(exc) is None)
            print(f"walfs mount: {failure(exc, config.data_dir)}", file=sys.stderr)
            return 1
    return _daemonize(config, log_opts)


def check_places(config: object, nonempty: bool) -> None:
    """The mount point and the data directory, checked before anything starts: each
    refusal names the path and what to do."""
    from walfs.service.daemon import MountConfig, is_dead_mount

    assert isinstance(config, MountConfig)
    mp = config.mountpoint
    if is_local(config.data_dir) and os.path.exists(config.data_dir) and not os.path.isdir(config.data_dir):
        raise CliError(f"{config.data_dir} is a file, not a data directory")
    held = mount_of(config.data_dir) if is_local(config.data_dir) else None
    if held is not None:
        raise CliError(
            f"{config.data_dir} is already mounted on {held}: one daemon per data directory "
            f"(`walfs umount {held}` first, or use that mount)"
        )
    if is_dead_mount(mp):
        return  # a killed daemon's mount: run() detaches it
    if not os.path.isdir(mp):
        missing = "" if os.path.exists(mp) else " (it does not exist: mkdir it first)"
        raise CliError(f"{mp} is not a directory{missing}")
    if os.path.ismount(mp):
        # A second mount on top would hide the first one's tree without stopping it.
        raise CliError(f"{mp} is already a mount point (`walfs umount {mp}` first)")
    if not nonempty:
        # fuse3 mounts over files without a word; they would be hidden (and anything a
        # program wrote there while nothing was mounted would look lost).
        with os.scandir(mp) as entries:
            names = sorted(e.name for e in entries)
        if names:
            shown = ", ".join(repr(n) for n in names[:3]) + (", ..." if len(names) > 3 else "")
            raise CliError(
                f"{mp} is not empty ({len(names)} {'entry' if len(names) == 1 else 'entries'}: {shown}); "
                "the mount would hide them: "
                "move them away, or mount over them with --nonempty (-o nonempty)"
            )


def failure(exc: BaseException, data_dir: str) -> str:
    """The one line a failed mount prints (damage names `walfs fsck` and `--repair`)."""
    line = explain(exc, data_dir)
    if line is None:
        line = f"internal error: {type(exc).__name__}: {exc} (a bug; the log has its traceback)"
    return line


def _daemonize(config: object, log_opts: dict[str, str]) -> int:
    from walfs.service.daemon import MountConfig, run

    assert isinstance(config, MountConfig)
    read_fd, write_fd = os.pipe()
    # Flush before fork so buffered output is not written twice.
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid > 0:
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            message = pipe.read().decode("utf-8", "replace")
        if message.startswith("ready"):
            return 0
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        text = message.removeprefix("error:").strip() or "the daemon exited before mounting"
        print(f"walfs mount: {text}", file=sys.stderr)
        return 1

    # Child: the daemon. Its own session, so the terminal's signals don't reach it.
    os.close(read_fd)
    status = 1
    try:
        os.setsid()
        os.chdir("/")
        devnull = os.open(os.devnull, os.O_RDWR)
        # stderr on the log file: what native code prints (libfuse's messages, a fatal
        # error's stacks from faulthandler) lands beside the log records.
        err = devnull
        if log_opts["file"]:
            err = os.open(log_opts["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        for fd, src in ((0, devnull), (1, devnull), (2, err)):
            os.dup2(src, fd)
        for fd in {devnull, err}:
            os.close(fd)
        setup_logging(log_opts["level"], log_opts["file"] or os.devnull)

        def ready() -> None:
            os.write(write_fd, b"ready\n")
            os.close(write_fd)

        status = run(config, on_ready=ready)
    except BaseException as exc:  # everything must reach the parent, then exit
        logging.getLogger("walfs").error("mount failed: %s", exc, exc_info=explain(exc) is None)
        try:
            os.write(write_fd, f"error: {failure(exc, config.data_dir)}".encode())
        except OSError:
            pass  # already reported ready; the log has it
    finally:
        os._exit(status)


if __name__ == "__main__":
    module_main("mount", main)
