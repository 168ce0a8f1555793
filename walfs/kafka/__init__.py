"""Kafka-wire listener over a walfs engine (walfs.engine.contract.LogEngine; docs/kafka.md).

The listener is imported on first use (PEP 562): its message tables take a second or
more to import. The record-batch codec is walfs.wire's, shared with Spark's `bootstrap`
reads and writes and the cluster engine."""

from typing import Any

__all__ = ["parse_listen_address", "serve_kafka"]


def __getattr__(name: str) -> Any:
    if name == "parse_listen_address":  # the one home is walfs.common.addresses
        from walfs.common.addresses import parse_listen_address

        return parse_listen_address
    if name in __all__:
        from walfs.kafka import listener

        return getattr(listener, name)
    raise AttributeError(f"module 'walfs.kafka' has no attribute {name!r}")
