"""A Fetch answer (versions 4-12) written straight into its wire pieces.

kio's generic writer took ~85 us of each 1 MiB fetch to build and encode the answer's
dataclasses (docs/notes/2026-11-24-kafka-fetch-path.md, "The Fetch round trip"); what walfs answers is always
the same shape, so it is written here in one pass. This is the one place that encodes
a FetchResponse (tests/test_kafka_fetch_answer.py checks it byte for byte against kio's
writer, every version and shape). What walfs always answers: no throttle, top-level
error NONE, no fetch session (session id 0), the last stable offset equal to the high
watermark (no transactions), no aborted transactions (an empty array), no preferred
read replica (-1), no tagged fields. Records of ``BY_REFERENCE_FROM`` bytes and more go
out by reference, as separate pieces (framing.send_frame writes them with one sendmsg).

Layout (Apache Kafka's FetchResponse.json; big-endian; v12 is flexible: compact arrays,
strings and bytes with an unsigned varint of length + 1, and a tagged-field count after
each struct and after the response header):
  header: correlation_id i32 [v12: tags]
  throttle_time_ms i32 | [v7+: error_code i16 | session_id i32]
  responses: array of topic: name string | partitions: array of
    partition_index i32 | error_code i16 | high_watermark i64 | last_stable_offset i64
    | [v5+: log_start_offset i64] | aborted_transactions (nullable array)
    | [v11+: preferred_read_replica i32] | records (nullable bytes) | [v12: tags]
  [v12: topic tags] [v12: response tags]"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from walfs.kafka.messages import BY_REFERENCE_FROM, Encoded

MIN_VERSION, MAX_VERSION = 4, 12
FLEXIBLE_FROM = 12

# (partition, error code, high watermark, log start offset, records)
Partition = tuple[int, int, int, int, bytes | bytearray | memoryview]
Topic = tuple[str, Sequence[Partition]]

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PART = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_fetch_answer(correlation_id: int, version: int, topics: Sequence[Topic]) -> Encoded:
    """The unframed answer (header and body), as messages.encode_response returns it:
    bytes, or pieces when a partition's records are large."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not answered here")
    flexible = version >= FLEXIBLE_FROM
    parts: list[bytes | bytearray | memoryview] = []
    small = bytearray(_I32.pack(correlation_id))
    if flexible:
        small.append(0)  # header tags
    if version >= 7:
        small += _TOP.pack(0, 0, 0)
    else:
        small += _I32.pack(0)
    small += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, partitions in topics:
        raw = name.encode()
        small += _uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))
        small += raw
        small += _uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for p, code, hwm, lwm, records in partitions:
            small += _PART.pack(p, code, hwm, hwm)
            if version >= 5:
                small += _I64.pack(lwm)
            small += b"\x01" if flexible else b"\x00\x00\x00\x00"  # no aborted transactions
            if version >= 11:
                small += b"\xff\xff\xff\xff"  # no preferred read replica
            n = len(records)
            small += _uvarint(n + 1) if flexible else _I32.pack(n)
            if n >= BY_REFERENCE_FROM:
                parts.append(small)
                parts.append(records)
                small = bytearray()
            else:
                small += records
            if flexible:
                small.append(0)  # partition tags
        if flexible:
            small.append(0)  # topic tags
    if flexible:
        small.append(0)  # response tags
    if not parts:
        return bytes(small)
    if small:
        parts.append(small)
    return parts
