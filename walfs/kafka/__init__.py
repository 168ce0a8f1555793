"""Kafka-wire listener over a walfs engine (walfs.engine_api.LogEngine; docs/kafka.md)."""

from walfs.kafka.listener import parse_listen_address, serve_kafka

__all__ = ["parse_listen_address", "serve_kafka"]
