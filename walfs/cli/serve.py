"""`walfs serve DATA_DIR --kafka-listen 127.0.0.1:9092`: the Kafka listener without a
mount. Runs in the foreground (systemd, tests); SIGTERM or SIGINT stop it, and the
WAL is closed (synced) on the way out (walfs/service/kafka_server.py runs it; this module
parses and checks the command line).

Once listening it prints ``kafka listening on HOST:PORT`` on stdout, so a caller
that passed port 0 learns the port. It also serves DATA_DIR/kafka.sock, as every daemon
does (walfs.common.local_socket: writes by path)."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys

from walfs.cli.common import CliError, Parser, explain, module_main
from walfs.common.sizes import parse_size as _size

DEFAULT_LISTEN = "127.0.0.1:9092"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="walfs serve", description="Serve a walfs data directory to Kafka clients.")
    p.add_argument("data_dir", help="the WAL's data directory (created if missing)")
    p.add_argument(
        "--kafka-listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to listen on (default {DEFAULT_LISTEN}; port 0 picks a free one)",
    )
    p.add_argument(
        "--fsync",
        choices=("always", "interval", "never"),
        default="interval",
        help="when appends reach the disk: before each answer (always), within --fsync-interval-ms "
        "(interval, the default), or when the kernel decides (never)",
    )
    p.add_argument(
        "--fsync-interval-ms", type=int, default=100, help="with --fsync interval: the period (default 100)"
    )
    p.add_argument(
        "--org-id", type=int, default=1, help="the org whose topics clients without SASL see (default 1)"
    )
    p.add_argument(
        "--segment-size",
        type=_size,
        default=None,
        help="size of each segment file of a new data directory, e.g. 64M (default 1G)",
    )
    p.add_argument(
        "--block-size",
        type=_size,
        default=None,
        help="a new data directory's block, the least disk a topic takes, e.g. 1M (default 10M)",
    )
    p.add_argument("--allow-delete", action="store_true", help="let DeleteTopics delete")
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=None,
        help="close connections sending larger requests (default 100 MiB)",
    )
    p.add_argument(
        "--max-inflight-bytes",
        type=_size,
        default=None,
        help="request bytes all connections may hold at once; others wait (default 256M)",
    )
    p.add_argument("--retention-ms", default=None, help="default retention by age in ms (-1: none)")
    p.add_argument(
        "--retention-bytes",
        default=None,
        help="default retention per partition, e.g. 10G: the disk its segment files take, in whole files",
    )
    p.add_argument("--min-free", default=None, help="free space kept in reserve, e.g. 1G (default 0)")
    p.add_argument(
        "--metrics-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics on HOST:PORT (off by default)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="connections beyond this are closed on accept (default 256)",
    )
    p.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Kafka broker setting: num.partitions, auto.create.topics.enable, message.max.bytes, "
        "log.message.timestamp.type, log.retention.ms, log.retention.bytes (repeatable)",
    )
    p.add_argument(
        "--auth-config",
        default=None,
        metavar="FILE",
        help="TLS and SASL settings and users (JSON; docs/kafka.md, Security; walfs kafka-user)",
    )
    p.add_argument(
        "--insecure-listen",
        action="store_true",
        help="let a non-loopback address be bound without SASL (clients there do not authenticate)",
    )
    p.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error"), help="(default info)"
    )
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    faulthandler.enable(all_threads=True)  # a native crash leaves every thread's stack on stderr
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    from walfs.cli.malloc_tuning import keep_freed_buffers
    from walfs.common.addresses import parse_listen_address

    keep_freed_buffers()  # no page faults on each produce request's buffers

    try:
        host, port = parse_listen_address(args.kafka_listen)
    except ValueError as e:
        print(f"walfs serve: --kafka-listen: {e}", file=sys.stderr)
        return 2
    from walfs.kafka.auth_config import AuthConfig, AuthConfigError
    from walfs.kafka.listener import check_listen_security

    try:
        auth = AuthConfig(args.auth_config) if args.auth_config else None
        if auth is not None:
            auth.ssl_context()  # a bad certificate or key fails here, before the WAL opens
        check_listen_security(host, auth, args.insecure_listen, flags=("--auth-config", "--insecure-listen"))
    except (AuthConfigError, ValueError) as e:
        print(f"walfs serve: {e}", file=sys.stderr)
        return 2
    from walfs.cli.mount import limit_option
    from walfs.engine.targets import is_local, prepare_target
    from walfs.kafka.broker_config import parse_broker_config, retention_options

    try:
        broker_config = parse_broker_config(args.kafka_config)
        retention_ms, retention_bytes = retention_options(
            broker_config, args.retention_ms, args.retention_bytes
        )
    except ValueError as e:
        print(f"walfs serve: --kafka-config: {e}", file=sys.stderr)
        return 2

    if is_local(args.data_dir) and os.path.exists(args.data_dir) and not os.path.isdir(args.data_dir):
        raise CliError(f"{args.data_dir} is a file, not a data directory")
    prepare_target(args.data_dir)
    from walfs.service import kafka_server, lifecycle

    try:
        engine = lifecycle.open_wal(
            args.data_dir,
            fsync=args.fsync,
            org_id=args.org_id,
            fsync_interval_ms=args.fsync_interval_ms,
            retention_ms=limit_option(retention_ms, "retention_ms"),
            retention_bytes=limit_option(retention_bytes, "retention_bytes"),
            min_free_bytes=limit_option(args.min_free, "min_free") or 0,
            segment_size=args.segment_size or None,
            block_size=args.block_size or None,
        )
    except Exception as e:
        line = explain(e, args.data_dir)
        if line is None:
            raise
        print(f"walfs serve: cannot open {args.data_dir}: {line}", file=sys.stderr)
        return 1
    config = kafka_server.ServeConfig(
        data_dir=args.data_dir,
        kafka_listen=args.kafka_listen,
        allow_delete=args.allow_delete,
        max_request_bytes=args.max_request_bytes,
        max_inflight_bytes=args.max_inflight_bytes,
        max_connections=args.max_connections,
        broker_config=broker_config,
        auth=auth,
        insecure_listen=args.insecure_listen,
        metrics_listen=args.metrics_listen,
    )
    try:
        status = kafka_server.run(engine, config)
    except (OSError, BaseExceptionGroup) as e:
        # trio's nurseries deliver a failed bind (a ListenError naming its option and
        # address) wrapped in an exception group.
        line = explain(e, args.data_dir)
        if line is None:
            raise
        print(f"walfs serve: {line}", file=sys.stderr)
        return 1
    if status == lifecycle.EXIT_WAL_FAILED:
        print(f"walfs serve: an fsync failed; exiting with status {status}", file=sys.stderr)
    return status


if __name__ == "__main__":
    module_main("serve", main)
