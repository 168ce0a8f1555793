"""Glue to kio, which supplies every Kafka message as a dataclass per API version,
with the encodings (flexible or not, tagged fields, header versions) attached.

Handlers build responses through ``build``: it keeps only the fields that the
version being answered has, so one handler serves every version of its API."""

from __future__ import annotations

import dataclasses
import datetime
import io
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module, load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

__all__ = ["ErrorCode", "build", "decode_request", "encode_response", "response_module"]

_ZERO = datetime.timedelta(0)


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **values: Any) -> Any:
    """An instance of ``cls`` from those of ``values`` it has fields for.

    throttle_time (present in most responses) is filled with zero: walfs never
    throttles clients."""
    names = _field_names(cls)
    kwargs = {k: v for k, v in values.items() if k in names}
    if "throttle_time" in names and "throttle_time" not in kwargs:
        kwargs["throttle_time"] = _ZERO
    return cls(**kwargs)


def decode_request(api_key: int, version: int, payload: bytes) -> tuple[Any, Any]:
    """(header, body) of a request whose key and version kio knows."""
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    header, used = entity_reader(header_cls)(payload, 0)
    body, size = entity_reader(cls)(payload, used)
    # Trailing bytes are tolerated, as Kafka brokers do: librdkafka 2.x sends three
    # bytes past the end of a Metadata v12 request (fields of an older layout).
    return header, body


def encode_response(correlation_id: int, response: Any) -> bytes:
    """Header and body of a response, unframed."""
    header_cls = type(response).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(type(response))(buf, response)
    return buf.getvalue()
