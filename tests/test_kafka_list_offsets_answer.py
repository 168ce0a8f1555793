"""walfs/kafka/list_offsets_answer.py writes ListOffsets answers in wire form: byte for byte
what kio's writer makes of the same response, every version the listener speaks (1-7),
for topics of one and many partitions, error answers, names of several lengths and
alphabets, and what a client decodes of it."""

from __future__ import annotations

import pytest

from walfs.kafka.list_offsets_answer import NO_LEADER_EPOCH, TopicAnswers, encode_list_offsets_answer
from walfs.kafka.messages import ErrorCode, build, encode_response, response_module

TOPICS: list[TopicAnswers] = [
    ("orders", [(0, ErrorCode.none, -1, 42)]),
    ("a", [
        (0, ErrorCode.none, -1, 0),
        (1, ErrorCode.none, 1_700_000_000_000, 7),
        (2, ErrorCode.none, -1, 2**40),
    ]),
    ("x" * 249, [(0, ErrorCode.none, -1, 1)]),  # the longest name: a two-byte varint in v6+
    ("missing", [(0, ErrorCode.unknown_topic_or_partition, -1, -1)]),
    ("old", [(3, ErrorCode.unsupported_version, -1, -1)]),
    ("ünïcødé-topic", [(0, ErrorCode.none, -1, 5), (1, ErrorCode.none, -1, 6)]),
    ("no-partitions", []),
    *((f"t{i:05d}", [(0, ErrorCode.none, -1, i)]) for i in range(300)),
    ("wide", [(p, ErrorCode.none, -1, p) for p in range(200)]),  # a partition count past one varint byte
]


def kio_answer(version: int, topics: list[TopicAnswers]) -> bytes:
    mod = response_module(2, version)
    entries = tuple(
        build(
            mod.ListOffsetsTopicResponse,
            name=name,
            partitions=tuple(
                build(
                    mod.ListOffsetsPartitionResponse,
                    partition_index=p,
                    error_code=error,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=NO_LEADER_EPOCH,
                )
                for p, error, ts, offset in answers
            ),
        )
        for name, answers in topics
    )
    got = encode_response(7, build(mod.ListOffsetsResponse, topics=entries))
    assert isinstance(got, bytes)
    return got


@pytest.mark.parametrize("version", range(1, 8))
@pytest.mark.parametrize("topics", [TOPICS, [], TOPICS[:1]], ids=["many", "none", "one"])
def test_same_bytes_as_kio(version: int, topics: list[TopicAnswers]) -> None:
    assert encode_list_offsets_answer(7, version, topics) == kio_answer(version, topics)


def test_the_answer_decodes_to_the_offsets() -> None:
    from kio.serial import entity_reader

    version = 7
    mod = response_module(2, version)
    got = encode_list_offsets_answer(7, version, TOPICS)
    _, used = entity_reader(mod.ListOffsetsResponse.__header_schema__)(got, 0)
    answer, _ = entity_reader(mod.ListOffsetsResponse)(got, used)
    decoded = [
        (t.name, [(p.partition_index, p.error_code, p.timestamp, p.offset) for p in t.partitions])
        for t in answer.topics
    ]
    assert decoded == [(name, list(answers)) for name, answers in TOPICS]
    assert {p.leader_epoch for t in answer.topics for p in t.partitions} == {NO_LEADER_EPOCH}
