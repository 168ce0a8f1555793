"""Scripted exchanges whose answers walfs must give as Kafka gives them: each function
runs requests against a bootstrap address (`walfs serve` or a real broker,
tests/real_kafka.py) and returns the answers as plain tuples, to be compared."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from crc32c import crc32c
from kafka_wire import Wire, make

from walfs.wire.record_batch import CRC_START, WireRecord, encode_records_for_test, set_header_field


def produce(bootstrap: str, topic: str, rows: list[tuple[bytes | None, int]]) -> None:
    """(value, timestamp) records to partition 0, in order, one batch each."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    for value, ts in rows:
        p.produce(topic, value=value, partition=0, timestamp=ts)
        p.flush(30)
    assert p.flush(30) == 0


def _commit(
    w: Wire,
    group: str,
    topic: str,
    partition: int,
    offset: int,
    metadata: str | None,
    version: int = 8,
    generation: int = -1,
    member: str = "",
) -> int:
    req = make(
        8,
        version,
        "OffsetCommitRequest",
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        retention_time_ms=-1,
        topics=(
            make(
                8,
                version,
                "OffsetCommitRequestTopic",
                name=topic,
                partitions=(
                    make(
                        8,
                        version,
                        "OffsetCommitRequestPartition",
                        partition_index=partition,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=metadata,
                    ),
                ),
            ),
        ),
    )
    resp = w.call(8, version, req)
    return int(resp.topics[0].partitions[0].error_code)


def _fetch(w: Wire, group: str, topics: list[tuple[str, list[int]]] | None, version: int = 7) -> Any:
    req = make(
        9,
        version,
        "OffsetFetchRequest",
        group_id=group,
        require_stable=False,
        topics=None
        if topics is None
        else tuple(
            make(9, version, "OffsetFetchRequestTopic", name=t, partition_indexes=tuple(ps))
            for t, ps in topics
        ),
    )
    resp = w.call(9, version, req)
    return (
        int(getattr(resp, "error_code", 0)),
        sorted(
            (t.name, p.partition_index, int(p.committed_offset), p.metadata, int(p.error_code))
            for t in resp.topics
            for p in t.partitions
        ),
    )


def _find_coordinator(w: Wire, group: str) -> None:
    """Until the broker says it coordinates the group (Kafka creates its offsets topic on
    the first FindCoordinator and then loads it)."""
    deadline = time.monotonic() + 60
    while True:
        req = make(10, 3, "FindCoordinatorRequest", key=group, key_type=0)
        if int(w.call(10, 3, req).error_code) == 0:
            return
        assert time.monotonic() < deadline, "no coordinator"
        time.sleep(0.5)


def offset_commit_answers(bootstrap: str) -> dict[str, Any]:
    produce(bootstrap, "known", [(b"a", 1_000), (b"b", 2_000), (b"c", 3_000)])
    out: dict[str, Any] = {}
    with Wire(bootstrap) as w:
        for group in ("g", "g2", "", "nobody"):
            _find_coordinator(w, group)
        deadline = time.monotonic() + 60
        while _commit(w, "g", "known", 0, 0, None) != 0:  # the coordinator may still be loading
            assert time.monotonic() < deadline
            time.sleep(0.5)
        out["commit with metadata"] = _commit(w, "g", "known", 0, 1, "m1")
        out["fetch it"] = _fetch(w, "g", [("known", [0])])
        out["commit null metadata"] = _commit(w, "g", "known", 0, 2, None)
        out["fetch null metadata"] = _fetch(w, "g", [("known", [0])])
        out["metadata too large"] = _commit(w, "g", "known", 0, 3, "x" * 5000)
        out["fetch after too large"] = _fetch(w, "g", [("known", [0])])
        out["commit at the end"] = _commit(w, "g", "known", 0, 3, "end")
        out["unknown topic"] = _commit(w, "g", "nope", 0, 0, "")
        out["unknown partition"] = _commit(w, "g", "known", 7, 0, "")
        out["empty group commit"] = _commit(w, "", "known", 0, 1, "")
        out["empty group fetch"] = _fetch(w, "", [("known", [0])])
        out["unknown group fetch"] = _fetch(w, "nobody", [("known", [0])])
        out["member of no generation"] = _commit(w, "g", "known", 0, 1, "", generation=5, member="m-x")
        out["fetch all topics"] = _fetch(w, "g", None)
        out["fetch v1"] = _fetch(w, "g", [("known", [0])], version=1)
        out["commit v2"] = _commit(w, "g2", "known", 0, 2, "v2", version=2)
        out["fetch v2 commit"] = _fetch(w, "g2", [("known", [0])])
    return out


def list_offsets_answers(bootstrap: str) -> dict[str, Any]:
    # Producer timestamps out of append order: 5000, 1000, 9000, 3000, 9000, 7000.
    rows = [(b"r0", 5_000), (b"r1", 1_000), (b"r2", 9_000), (b"r3", 3_000), (b"r4", 9_000), (b"r5", 7_000)]
    produce(bootstrap, "times", rows)
    time.sleep(0.5)
    out: dict[str, Any] = {}
    with Wire(bootstrap) as w:
        for version in (1, 7):
            for ts in (-2, -1, -3, 0, 1_000, 2_000, 5_000, 6_000, 9_000, 9_001):
                req = make(
                    2,
                    version,
                    "ListOffsetsRequest",
                    replica_id=-1,
                    isolation_level=0,
                    topics=(
                        make(
                            2,
                            version,
                            "ListOffsetsTopic",
                            name="times",
                            partitions=(
                                make(
                                    2,
                                    version,
                                    "ListOffsetsPartition",
                                    partition_index=0,
                                    current_leader_epoch=-1,
                                    timestamp=ts,
                                    max_num_offsets=1,
                                ),
                            ),
                        ),
                    ),
                )
                p = w.call(2, version, req).topics[0].partitions[0]
                out[f"v{version} ts={ts}"] = (int(p.error_code), int(p.timestamp), int(p.offset))
    return out


def _produce_raw(w: Wire, topic: str, records: bytes) -> tuple[int, int]:
    req = make(
        0,
        9,
        "ProduceRequest",
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            make(
                0,
                9,
                "TopicProduceData",
                name=topic,
                partition_data=(make(0, 9, "PartitionProduceData", index=0, records=records),),
            ),
        ),
    )
    p = w.call(0, 9, req).responses[0].partition_responses[0]
    return int(p.error_code), int(p.base_offset) if int(p.error_code) == 0 else -1


def create_topic(w: Wire, topic: str, partitions: int = 1) -> int:
    req = make(
        19,
        5,
        "CreateTopicsRequest",
        timeout=datetime.timedelta(seconds=30),
        validate_only=False,
        topics=(
            make(
                19,
                5,
                "CreatableTopic",
                name=topic,
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=(),
            ),
        ),
    )
    code = int(w.call(19, 5, req).topics[0].error_code)
    if code == 0:
        wait_for_leaders(w, topic, partitions)
    return code


def wait_for_leaders(w: Wire, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Waits until Metadata shows every partition of a new topic with a leader: a real
    broker answers CreateTopics before its partitions are led, and a Produce sent in
    between gets NOT_LEADER_OR_FOLLOWER (6), which a loaded machine makes likely."""
    req = make(3, 12, "MetadataRequest", topics=None, allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        answer = w.call(3, 12, req)
        led = [
            p
            for t in answer.topics
            if t.name == topic and int(t.error_code) == 0
            for p in t.partitions
            if int(p.error_code) == 0 and int(p.leader_id) >= 0
        ]
        if len(led) >= partitions:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: partitions not led after {timeout} s: {answer.topics!r}")
        time.sleep(0.05)


def idempotence_answers(bootstrap: str, restart: Callable[[], str]) -> dict[str, Any]:
    """An idempotent producer's batches, resent, out of order, across a restart of the
    broker (``restart`` returns the new bootstrap), and with epochs bumped."""
    out: dict[str, Any] = {}

    def batch(pid: int, epoch: int, seq: int, n: int) -> bytes:
        recs = [WireRecord(None, b"s%d" % (seq + i), [], 1_000 + seq + i) for i in range(n)]
        return encode_records_for_test(recs, producer=(pid, epoch, seq))

    with Wire(bootstrap) as w:
        out["create"] = create_topic(w, "idem")
        init = make(
            22,
            4,
            "InitProducerIdRequest",
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        deadline = time.monotonic() + 60
        while int((resp := w.call(22, 4, init)).error_code) != 0:  # Kafka: coordinator loading
            assert time.monotonic() < deadline, resp
            time.sleep(0.5)
        pid = int(resp.producer_id)
        out["init"] = (int(resp.error_code), int(resp.producer_epoch))
        out["seq 0-2"] = _produce_raw(w, "idem", batch(pid, 0, 0, 3))
        out["seq 0-2 again"] = _produce_raw(w, "idem", batch(pid, 0, 0, 3))
        out["seq 3-4"] = _produce_raw(w, "idem", batch(pid, 0, 3, 2))
        out["seq 10 (gap)"] = _produce_raw(w, "idem", batch(pid, 0, 10, 1))
        out["seq 4 (overlap)"] = _produce_raw(w, "idem", batch(pid, 0, 4, 1))
    bootstrap = restart()
    with Wire(bootstrap) as w:
        out["after restart: seq 3-4 again"] = _produce_raw(w, "idem", batch(pid, 0, 3, 2))
        out["after restart: seq 0-2 again"] = _produce_raw(w, "idem", batch(pid, 0, 0, 3))
        out["after restart: seq 5"] = _produce_raw(w, "idem", batch(pid, 0, 5, 1))
        out["after restart: seq 7 (gap)"] = _produce_raw(w, "idem", batch(pid, 0, 7, 1))
        out["epoch 1 seq 3"] = _produce_raw(w, "idem", batch(pid, 1, 3, 1))
        out["epoch 1 seq 0"] = _produce_raw(w, "idem", batch(pid, 1, 0, 1))
        out["epoch 0 again"] = _produce_raw(w, "idem", batch(pid, 0, 6, 1))
        out["unknown producer, seq 17"] = _produce_raw(w, "idem", batch(pid + 1000, 0, 17, 1))
        req = make(
            2,
            7,
            "ListOffsetsRequest",
            replica_id=-1,
            isolation_level=0,
            topics=(
                make(
                    2,
                    7,
                    "ListOffsetsTopic",
                    name="idem",
                    partitions=(
                        make(
                            2,
                            7,
                            "ListOffsetsPartition",
                            partition_index=0,
                            current_leader_epoch=-1,
                            timestamp=-1,
                        ),
                    ),
                ),
            ),
        )
        out["end"] = int(w.call(2, 7, req).topics[0].partitions[0].offset)
    return out


def _patched(batch: bytes, attributes: int | None = None, last_delta: int | None = None) -> bytes:
    """A batch with its attributes or last offset delta changed, CRC made right again."""
    b = bytearray(batch)
    if attributes is not None:
        set_header_field(b, "attributes", attributes)
    if last_delta is not None:
        set_header_field(b, "last_offset_delta", last_delta)
    set_header_field(b, "crc", crc32c(bytes(b[CRC_START:])))
    return bytes(b)


def invalid_batch_answers(bootstrap: str) -> dict[str, Any]:
    """Batches Kafka refuses with INVALID_RECORD (87) as a whole (LogValidator's batch
    rules), each followed by a good one that must still be appended."""
    good = encode_records_for_test([WireRecord(b"k", b"v", [], 1_000), WireRecord(b"k", b"w", [], 1_001)])
    cases = {
        "inconsistent offset range": _patched(good, last_delta=5),
        "control batch": _patched(good, attributes=0x20),
        "producer id without sequence": encode_records_for_test(
            [WireRecord(b"k", b"v", [], 1_000)], producer=(1234, 0, -1)
        ),
    }
    out: dict[str, Any] = {}
    with Wire(bootstrap) as w:
        out["create"] = create_topic(w, "bad")
        for name, records in cases.items():
            out[name] = _produce_raw(w, "bad", records)
            out[f"then good ({name})"] = _produce_raw(w, "bad", good)
    return out
