"""A ListOffsets answer (versions 1-7) for many partitions, written in wire form.

kio's generic writer built and encoded a dataclass per partition and per topic of a
ListOffsets answer: about 40 us a partition, 0.8 s for 20,000 (bench/engine/bench_topics.py
asks one ListOffsets of every partition). Every partition entry is fixed-size numbers:

  topic     = name (string; v6+: compact string) | partition count | partitions | v6+: 0 tags
  partition = partition_index i32 | error_code i16 | timestamp i64 | offset i64
              | v4+: leader_epoch i32 (-1: walfs keeps no leader epochs) | v6+: 0 tags

and the answer's envelope (header, throttle time, the trailing tags) is kio's encoding of
the same response with one marker topic in place of the list, which is then replaced by
the real list, as walfs/kafka/metadata_answer.py does for Metadata (whose wire encoders
this uses). tests/test_kafka_list_offsets_answer.py checks the result byte for byte
against kio's writer, every version.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from walfs.kafka.messages import ErrorCode, build, encode_response, response_module
from walfs.kafka.metadata_answer import kio_bytes, split_at_marker, wire_count, wire_string

FLEXIBLE_FROM = 6
LEADER_EPOCH_FROM = 4
NO_LEADER_EPOCH = -1
# Not a valid topic name (NUL bytes): never a real topic's entry.
_MARK = "\0walfs list offsets topics\0"

_PART = struct.Struct(">ihqq")
_PART_EPOCH = struct.Struct(">ihqqi")

# (partition_index, error code, timestamp, offset)
Answer = tuple[int, ErrorCode, int, int]
# (topic name, its partitions' answers)
TopicAnswers = tuple[str, Sequence[Answer]]


def encode_list_offsets_answer(correlation_id: int, version: int, topics: Sequence[TopicAnswers]) -> bytes:
    """The unframed answer (header and body) of a ListOffsets of `version` (1-7)."""
    mod = response_module(2, version)
    flexible = version >= FLEXIBLE_FROM
    marker = build(mod.ListOffsetsTopicResponse, name=_MARK, partitions=())
    shell = encode_response(correlation_id, build(mod.ListOffsetsResponse, topics=(marker,)))
    head, tail = split_at_marker(
        shell, wire_count(1, flexible) + kio_bytes(mod.ListOffsetsTopicResponse, marker)
    )
    parts = [head, wire_count(len(topics), flexible)]
    add = parts.append
    if version >= LEADER_EPOCH_FROM:
        pack = _PART_EPOCH.pack
        tag = b"\0" if flexible else b""
        for name, answers in topics:
            add(wire_string(name.encode(), flexible))
            add(wire_count(len(answers), flexible))
            for p, error, ts, offset in answers:
                add(pack(p, error.value, ts, offset, NO_LEADER_EPOCH))
                add(tag)
            add(tag)
    else:
        pack = _PART.pack
        for name, answers in topics:
            add(wire_string(name.encode(), False))
            add(wire_count(len(answers), False))
            for p, error, ts, offset in answers:
                add(pack(p, error.value, ts, offset))
    parts.append(tail)
    return b"".join(parts)
