"""OffsetCommit / OffsetFetch on a topic or partition the broker does not have answer
UNKNOWN_TOPIC_OR_PARTITION (Kafka's code), not OFFSET_OUT_OF_RANGE (issue 12), as
librdkafka reports it per partition."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka_harness import listener


def test_commit_and_fetch_unknown_topic_or_partition(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.create("known", 0)
        lst.wal.append("known", b"a")
        c = Consumer({"bootstrap.servers": lst.bootstrap, "group.id": "g", "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition("known", 0, 1)], asynchronous=False)
            assert lst.wal.committed("g", "known", 0) == 1
            for tp in (TopicPartition("nope", 0, 0), TopicPartition("known", 5, 0)):
                try:
                    res = c.commit(offsets=[tp], asynchronous=False)
                    errs = [p.error for p in res or []]
                except KafkaException as e:
                    errs = [e.args[0]]
                assert [e.code() for e in errs if e is not None] == [KafkaError.UNKNOWN_TOPIC_OR_PART], errs
            got = c.committed(
                [TopicPartition("known", 0), TopicPartition("nope", 0), TopicPartition("known", 5)],
                timeout=10,
            )
            assert got[0].offset == 1 and got[0].error is None
            assert [p.error.code() if p.error else None for p in got[1:]] == [
                KafkaError.UNKNOWN_TOPIC_OR_PART
            ] * 2
        finally:
            c.close()
