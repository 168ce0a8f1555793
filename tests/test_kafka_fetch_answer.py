"""walfs/kafka/fetch_answer.py writes a Fetch answer byte for byte as kio's generic writer
does (messages.encode_response of the FetchResponse dataclasses the handler built before),
in every version the listener serves (4-12) and every shape walfs answers: no topic,
errors, empty, small and large records, many topics and partitions, non-ASCII names;
large records go out by reference, not copied."""

from __future__ import annotations

import os

import pytest

from walfs.kafka.fetch import HANDLERS
from walfs.kafka.fetch_answer import MAX_VERSION, MIN_VERSION, Topic, encode_fetch_answer
from walfs.kafka.messages import BY_REFERENCE_FROM, ErrorCode, build, encode_response, response_module


def kio_answer(correlation_id: int, version: int, topics: list[Topic]) -> bytes:
    mod = response_module(1, version)
    resp = build(
        mod.FetchResponse,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(
            build(
                mod.FetchableTopicResponse,
                topic=name,
                partitions=tuple(
                    build(
                        mod.PartitionData,
                        partition_index=p,
                        error_code=code,
                        high_watermark=hwm,
                        last_stable_offset=hwm,
                        log_start_offset=lwm,
                        aborted_transactions=(),
                        preferred_read_replica=-1,
                        records=data,
                    )
                    for p, code, hwm, lwm, data in parts
                ),
            )
            for name, parts in topics
        ),
    )
    out = encode_response(correlation_id, resp)
    return out if isinstance(out, bytes) else b"".join(bytes(p) for p in out)


def joined(out: bytes | list[bytes | bytearray | memoryview]) -> bytes:
    return out if isinstance(out, bytes) else b"".join(bytes(p) for p in out)


LARGE = os.urandom(BY_REFERENCE_FROM + 1000)
SHAPES: dict[str, list[Topic]] = {
    "no topic": [],
    "one empty partition": [("t", [(0, ErrorCode.none, 0, 0, b"")])],
    "small records": [("topic-1", [(3, ErrorCode.none, 12345678901, 17, os.urandom(300))])],
    "large records": [("t", [(0, ErrorCode.none, 1 << 40, 5, LARGE)])],
    "errors": [
        (
            "gone",
            [
                (0, ErrorCode.unknown_topic_or_partition, -1, -1, b""),
                (1, ErrorCode.offset_out_of_range, 99, 10, b""),
                (2, ErrorCode.corrupt_message, 40, 0, b""),
            ],
        )
    ],
    "many": [
        (f"t{i}", [(p, ErrorCode.none, 1000 * p + i, p, os.urandom(p * 7)) for p in range(5)])
        for i in range(4)
    ]
    + [("big", [(0, ErrorCode.none, 7, 0, LARGE), (1, ErrorCode.none, 9, 0, LARGE[:100])])],
    "non-ascii name": [("tëst-é✓", [(0, ErrorCode.none, 2, 1, b"xy")])],
    # 200 topics: the compact array's length needs a two-byte varint.
    "long arrays": [(f"n{i}", [(0, ErrorCode.none, i, 0, b"")]) for i in range(200)],
}


def test_the_versions_are_the_handlers() -> None:
    api = HANDLERS[1]
    assert (api.min_version, api.max_version) == (MIN_VERSION, MAX_VERSION)


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_answer_is_byte_for_byte_kios(version: int, shape: str) -> None:
    topics = SHAPES[shape]
    for correlation_id in (0, 7, -5, 2**31 - 1):
        assert joined(encode_fetch_answer(correlation_id, version, topics)) == kio_answer(
            correlation_id, version, topics
        )


@pytest.mark.parametrize("version", [MIN_VERSION, 11, MAX_VERSION])
def test_large_records_go_by_reference(version: int) -> None:
    records = memoryview(LARGE)
    out = encode_fetch_answer(1, version, [("t", [(0, ErrorCode.none, 1, 0, records)])])
    assert isinstance(out, list)
    assert any(p is records for p in out)
    small = encode_fetch_answer(1, version, [("t", [(0, ErrorCode.none, 1, 0, b"abc")])])
    assert isinstance(small, bytes)


@pytest.mark.parametrize("version", [3, 13])
def test_versions_outside_the_range_are_refused(version: int) -> None:
    with pytest.raises(ValueError, match=f"v{version}"):
        encode_fetch_answer(1, version, [])
