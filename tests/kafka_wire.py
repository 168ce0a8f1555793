"""A minimal Kafka client for tests that send exact requests: each request is built with
kio (the same message definitions the listener uses) and each response decoded with kio,
so one script can be run against `walfs serve` and against a real Kafka broker and the
answers compared field by field."""

from __future__ import annotations

import socket
from typing import Any

from kafka_harness import encode_request, recv_frame
from kio.index import load_payload_module, load_response_schema
from kio.serial import entity_reader
from kio.static.constants import EntityType

from walfs.kafka.messages import build


def request_module(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


class Wire:
    """One connection; ``call`` sends a request and returns the decoded response."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self._cid = 0

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self._cid += 1
        self.sock.sendall(encode_request(api_key, version, self._cid, body))
        frame = recv_frame(self.sock)
        cls = load_response_schema(api_key, version)
        header, used = entity_reader(cls.__header_schema__)(frame, 0)
        assert header.correlation_id == self._cid
        resp, _ = entity_reader(cls)(frame, used)
        return resp

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make(api_key: int, version: int, cls_name: str, **values: Any) -> Any:
    """An instance of request class ``cls_name`` of an API version (fields it lacks dropped)."""
    return build(getattr(request_module(api_key, version), cls_name), **values)
