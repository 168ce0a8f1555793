"""walfs/kafka/metadata_answer.py writes Metadata answers in wire form: byte for byte what
kio's writer makes of the same response, every version, for topics of every kind the
listener answers (partition counts 0, 1 and many; the error codes; names of several
lengths and alphabets), and what a client decodes of it."""

from __future__ import annotations

import pytest

from walfs.kafka.messages import ErrorCode, build, encode_response, response_module
from walfs.kafka.metadata import _partitions
from walfs.kafka.metadata_answer import NO_AUTHORIZED_OPERATIONS, Entry, encode_metadata_answer, topic_entry

ENTRIES: list[Entry] = [
    ("orders", ErrorCode.none, 1),
    ("a", ErrorCode.none, 3),
    ("x" * 249, ErrorCode.none, 1),  # the longest name: a two-byte varint in v9+
    ("missing", ErrorCode.unknown_topic_or_partition, 0),
    ("bad name", ErrorCode.invalid_topic_exception, 0),
    ("ünïcødé-topic", ErrorCode.none, 2),
    *((f"t{i:05d}", ErrorCode.none, 1) for i in range(300)),
]


def envelope(version: int) -> dict[str, object]:
    mod = response_module(3, version)
    broker = build(mod.MetadataResponseBroker, node_id=0, host="127.0.0.1", port=9092, rack=None)
    return {
        "brokers": (broker,),
        "cluster_id": "walfs-cluster",
        "controller_id": 0,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


@pytest.mark.parametrize("version", range(13))
@pytest.mark.parametrize("entries", [ENTRIES, [], ENTRIES[:1]], ids=["many", "none", "one"])
def test_same_bytes_as_kio(version: int, entries: list[Entry]) -> None:
    mod = response_module(3, version)
    env = envelope(version)
    topics = tuple(topic_entry(mod, n, e, _partitions(mod, c)) for n, e, c in entries)
    want = encode_response(7, build(mod.MetadataResponse, topics=topics, **env))
    got = encode_metadata_answer(7, version, env, entries, _partitions)
    assert got == want


def test_the_answer_decodes_to_the_topics() -> None:
    from kio.serial import entity_reader

    version = 12
    mod = response_module(3, version)
    got = encode_metadata_answer(7, version, envelope(version), ENTRIES, _partitions)
    header_cls = mod.MetadataResponse.__header_schema__
    _, used = entity_reader(header_cls)(got, 0)
    answer, _ = entity_reader(mod.MetadataResponse)(got, used)
    assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == ENTRIES
