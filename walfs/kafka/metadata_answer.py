"""A Metadata answer (versions 0-12) for many topics, written in wire form.

kio's generic writer spent ~100-250 us per topic of a Metadata answer building and
encoding its dataclasses: 1-3 s for 10,000 topics, where Apache Kafka answers in tens of
ms (bench/engine/bench_topics.py). Every topic entry walfs answers is the same but for its
name, its error code and its partition count (the listener is the one broker and leads
every partition: walfs/kafka/metadata.py), so kio encodes one entry per (version, error,
count) and the answer is those bytes with each topic's name put in:

  topic entry = error_code i16 | name (string; v9+: compact string) | the rest, which
                does not depend on the name (kio's bytes, cached)

and the answer's envelope (header, throttle, brokers, cluster id, controller, the
trailing fields) is kio's encoding of the same response with one marker topic in place of
the list, which is then replaced by the real list. tests/test_kafka_metadata_answer.py
checks the result byte for byte against kio's writer, every version.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from kio.serial import entity_writer

from walfs.kafka.messages import ErrorCode, build, encode_response, response_module

FLEXIBLE_FROM = 9
NO_AUTHORIZED_OPERATIONS = -(2**31)
# Not a valid topic name (NUL bytes): never a real topic's entry.
_MARK = "\0walfs metadata topics\0"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# (name, error code, partition count)
Entry = tuple[str, ErrorCode, int]
# (kio's response module, count) -> a topic's partition list (metadata._partitions)
Partitions = Callable[[Any, int], tuple[Any, ...]]


# The wire encoders, one home: walfs/kafka/list_offsets_answer.py writes with them too.
def uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def wire_string(raw: bytes, flexible: bool) -> bytes:
    return (uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def wire_count(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _I32.pack(n)


def topic_entry(mod: Any, name: str, error: ErrorCode, partitions: tuple[Any, ...]) -> Any:
    """The one MetadataResponseTopic walfs answers (kio's dataclass)."""
    return build(
        mod.MetadataResponseTopic,
        error_code=error,
        name=name,
        topic_id=None,
        is_internal=False,
        partitions=partitions,
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def kio_bytes(cls: type, value: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, value)
    return out.getvalue()


def split_at_marker(shell: object, one: bytes) -> tuple[bytes, bytes]:
    """The bytes of an answer encoded (by kio) around one marker entry, before and after
    `one` (the count 1 and the marker's bytes), where the real entries go."""
    assert isinstance(shell, bytes | bytearray)  # no field large enough to go by reference
    at = shell.find(one)
    if at < 0 or shell.find(one, at + 1) >= 0:
        raise AssertionError("the marker entry is not found once in the answer")
    return bytes(shell[:at]), bytes(shell[at + len(one) :])


@lru_cache(maxsize=1024)
def _tail(version: int, error: ErrorCode, count: int, partitions: Partitions) -> bytes:
    """A topic entry's bytes after its name, for this version, error and count."""
    mod = response_module(3, version)
    whole = kio_bytes(mod.MetadataResponseTopic, topic_entry(mod, _MARK, error, partitions(mod, count)))
    return whole[2 + len(wire_string(_MARK.encode(), version >= FLEXIBLE_FROM)) :]


def encode_metadata_answer(
    correlation_id: int,
    version: int,
    envelope: dict[str, Any],
    entries: Sequence[Entry],
    partitions: Partitions,
) -> bytes:
    """The unframed answer (header and body): `envelope` holds the MetadataResponse's
    other fields (brokers, cluster_id, controller_id, cluster_authorized_operations);
    `partitions(mod, count)` a topic's partition list."""
    mod = response_module(3, version)
    flexible = version >= FLEXIBLE_FROM
    marker = topic_entry(mod, _MARK, ErrorCode.none, ())
    shell = encode_response(correlation_id, build(mod.MetadataResponse, topics=(marker,), **envelope))
    head, tail = split_at_marker(
        shell, wire_count(1, flexible) + kio_bytes(mod.MetadataResponseTopic, marker)
    )
    parts = [head, wire_count(len(entries), flexible)]
    add = parts.append
    around: dict[tuple[ErrorCode, int], tuple[bytes, bytes]] = {}  # (error, count) -> (head, tail)
    for name, error, count in entries:
        head_tail = around.get((error, count))
        if head_tail is None:
            head_tail = (_I16.pack(error.value), _tail(version, error, count, partitions))
            around[(error, count)] = head_tail
        raw = name.encode()
        n = len(raw)
        add(head_tail[0])
        add(bytes((n + 1,)) if flexible and n < 127 else wire_length(n, flexible))
        add(raw)
        add(head_tail[1])
    parts.append(tail)
    return b"".join(parts)


def wire_length(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _I16.pack(n)
