"""Glue to kio, which supplies every Kafka message as a dataclass per API version,
with the encodings (flexible or not, tagged fields, header versions) attached.

Handlers build responses through ``build``: it keeps only the fields that the
version being answered has, so one handler serves every version of its API."""

from __future__ import annotations

import dataclasses
import datetime
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module, load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

__all__ = ["Encoded", "ErrorCode", "build", "decode_request", "encode_response", "response_module"]

# An encoded answer: its bytes, or the pieces to send one after another (a fetch's record
# batches stay where they were encoded instead of being copied into the answer).
Encoded = bytes | list[bytes | bytearray | memoryview]

# Byte fields from this size on (record batches) are kept by reference, not copied.
BY_REFERENCE_FROM = 64 * 1024

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


@cache
def _request_readers(api_key: int, version: int) -> tuple[Any, Any]:
    """kio's readers of a request's header and body (kio's lookup of the schema imports
    its module by name on each call: ~2 us a request)."""
    cls = load_request_schema(api_key, version)
    return entity_reader(cls.__header_schema__), entity_reader(cls)


def decode_request(api_key: int, version: int, payload: bytes | memoryview) -> tuple[Any, Any]:
    """(header, body) of a request whose key and version kio knows."""
    read_header, read_body = _request_readers(api_key, version)
    header, used = read_header(payload, 0)
    body, size = read_body(payload, used)
    # Trailing bytes are tolerated, as Kafka brokers do: librdkafka 2.x sends three
    # bytes past the end of a Metadata v12 request (fields of an older layout).
    return header, body


class _Pieces:
    """What kio writes a response into: small fields gathered, large ones kept as they are."""

    __slots__ = ("parts", "small")

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []
        self.small = bytearray()

    def write(self, b: bytes | bytearray | memoryview) -> int:
        n = len(b)
        if n >= BY_REFERENCE_FROM:
            if self.small:
                self.parts.append(self.small)
                self.small = bytearray()
            self.parts.append(b)
        else:
            self.small += b
        return n


def encode_response(correlation_id: int, response: Any) -> Encoded:
    """Header and body of a response, unframed: bytes, or for a response holding large
    byte fields (a fetch's record batches) the list of pieces that make it, those fields
    by reference (framing.send_frame writes them with one sendmsg)."""
    header_cls = type(response).__header_schema__
    out = _Pieces()
    sink: Any = out  # kio's writers only call write()
    entity_writer(header_cls)(sink, header_cls(correlation_id=correlation_id))
    entity_writer(type(response))(sink, response)
    if not out.parts:
        return bytes(out.small)
    if out.small:
        out.parts.append(out.small)
    return out.parts
