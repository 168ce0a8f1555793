"""`walfs serve`: the Kafka face alone on a data directory (or a cluster), in the
foreground, with the daemon's life of walfs/service/lifecycle.py: SIGTERM or SIGINT stop
it, a failed engine ends it with EXIT_WAL_FAILED, and the WAL is closed (synced) on the way
out. Once listening it prints ``kafka listening on HOST:PORT`` on stdout (a caller that
passed port 0 learns the port), and ``metrics on http://HOST:PORT/metrics`` with a metrics
endpoint."""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from walfs.service import lifecycle
from walfs.service.metrics import Metrics

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine
    from walfs.kafka.auth_config import AuthConfig


@dataclass
class ServeConfig:
    data_dir: str
    kafka_listen: str  # "HOST:PORT"
    allow_delete: bool = False
    max_request_bytes: int | None = None  # None: the listener's defaults (walfs.kafka.framing)
    max_inflight_bytes: int | None = None
    max_connections: int | None = None
    broker_config: Any = None  # walfs.kafka.broker_config.BrokerConfig
    auth: AuthConfig | None = None
    insecure_listen: bool = False
    metrics_listen: str | None = None  # "HOST:PORT" of a Prometheus endpoint; None: off


def run(engine: LogEngine, config: ServeConfig) -> int:
    """Serves `wal` until a signal or its failure; closes it. Returns the exit status."""
    with lifecycle.running(engine, config.data_dir, Metrics(engine)) as service:
        trio.run(_serve, service, config)
    return service.exit_status


async def _serve(service: lifecycle.Service, config: ServeConfig) -> None:
    from walfs.kafka.framing import (
        DEFAULT_MAX_CONNECTIONS,
        DEFAULT_MAX_INFLIGHT_BYTES,
        DEFAULT_MAX_REQUEST_BYTES,
    )

    limit = config.max_request_bytes or DEFAULT_MAX_REQUEST_BYTES
    async with trio.open_nursery() as nursery:
        stop = nursery.cancel_scope.cancel

        def on_signal(signum: signal.Signals) -> None:
            logging.getLogger("walfs.kafka").info("%s: stopping", signum.name)
            stop()

        # The signals are caught from before the "listening" line: a caller that stops us
        # as soon as it reads it gets a clean stop.
        await lifecycle.supervise(nursery, service, stop, on_signal)
        host, bound = await lifecycle.start_kafka(
            nursery,
            service,
            config.kafka_listen,
            allow_delete=config.allow_delete,
            max_request_bytes=limit,
            max_inflight_bytes=max(config.max_inflight_bytes or DEFAULT_MAX_INFLIGHT_BYTES, limit),
            max_connections=config.max_connections or DEFAULT_MAX_CONNECTIONS,
            config=config.broker_config,
            auth=config.auth,
            insecure_listen=config.insecure_listen,
        )
        assert host is not None
        print(f"kafka listening on {lifecycle.show_address(host, bound)}", flush=True)
        if config.metrics_listen:
            mhost, mport = lifecycle.serve_metrics(service, config.metrics_listen)
            print(f"metrics on http://{mhost}:{mport}/metrics", flush=True)
