"""confluent-kafka (librdkafka) producers, consumers and admin against the listener."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_harness import consume, listener
from kafka_harness import rdkafka_consumer as consumer


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_consume_keys_headers_timestamps(tmp_path: Path, acks: str) -> None:
    with listener(tmp_path) as lst:
        p = Producer({"bootstrap.servers": lst.bootstrap, "acks": acks, "linger.ms": 5})
        for i in range(50):
            p.produce(
                "orders",
                value=b"value-%d" % i,
                key=b"key-%d" % i,
                headers=[("i", str(i).encode()), ("empty", None)],
                timestamp=1_700_000_000_000 + i,
            )
        p.produce("orders", value=b"no key")
        assert p.flush(30) == 0
        c = consumer(lst.bootstrap, f"g-{acks}")
        c.subscribe(["orders"])
        got = consume(c, 51)
        c.close()
        assert [m.offset() for m in got] == list(range(51))
        assert got[7].key() == b"key-7" and got[7].value() == b"value-7"
        assert got[7].headers() == [("i", b"7"), ("empty", None)]
        assert got[7].timestamp()[1] == 1_700_000_000_007
        assert got[50].key() is None and got[50].value() == b"no key"


def test_engine_appends_are_served_with_null_keys(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("plain", b"one")
        lst.wal.append("plain", [b"two", b"three"])
        c = consumer(lst.bootstrap, "g")
        c.assign([TopicPartition("plain", 0, OFFSET_BEGINNING)])
        got = consume(c, 3)
        c.close()
        assert [(m.key(), m.value()) for m in got] == [(None, b"one"), (None, b"two"), (None, b"three")]


def test_long_poll_delivers_records_produced_while_waiting(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("lp", b"first")
        c = consumer(lst.bootstrap, "lp", **{"fetch.wait.max.ms": 5000})
        c.assign([TopicPartition("lp", 0, OFFSET_BEGINNING)])
        assert [m.value() for m in consume(c, 1)] == [b"first"]
        # The consumer is now parked in a long poll; an engine append must wake it.
        lst.wal.append("lp", b"second")
        assert [m.value() for m in consume(c, 1)] == [b"second"]
        c.close()


def test_create_topics_with_partitions_and_produce_to_each(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        admin = AdminClient({"bootstrap.servers": lst.bootstrap})
        futures = admin.create_topics([NewTopic("parts", num_partitions=4, replication_factor=1)])
        futures["parts"].result(timeout=30)
        md = admin.list_topics(timeout=30)
        assert sorted(md.topics["parts"].partitions) == [0, 1, 2, 3]
        # Already exists
        again = admin.create_topics([NewTopic("parts", num_partitions=4, replication_factor=1)])
        with pytest.raises(KafkaException) as e:
            again["parts"].result(timeout=30)
        assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
        p = Producer({"bootstrap.servers": lst.bootstrap})
        for part in range(4):
            p.produce("parts", value=b"p%d" % part, partition=part)
        assert p.flush(30) == 0
        for part in range(4):
            assert lst.wal.read("parts", 0, part) == [b"p%d" % part]


def test_delete_topics_refused_unless_allowed(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("keep", b"x")
        admin = AdminClient({"bootstrap.servers": lst.bootstrap})
        f = admin.delete_topics(["keep"], operation_timeout=10)["keep"]
        with pytest.raises(KafkaException) as e:
            f.result(timeout=30)
        assert e.value.args[0].code() == KafkaError.TOPIC_DELETION_DISABLED
        assert lst.wal.read("keep", 0) == [b"x"]
    with listener(tmp_path / "b", allow_delete=True) as lst:
        lst.wal.append("gone", b"x")
        admin = AdminClient({"bootstrap.servers": lst.bootstrap})
        lst.wal.commit("g", "gone", 1)
        admin.delete_topics(["gone"], operation_timeout=10)["gone"].result(timeout=30)
        # Deleted for real: gone from the listing, its offsets too; created again from 0.
        assert "gone" not in admin.list_topics(timeout=10).topics
        assert lst.wal.topics() == []
        assert lst.wal.committed("g", "gone") is None
        p = Producer({"bootstrap.servers": lst.bootstrap})
        p.produce("gone", b"again")
        assert p.flush(30) == 0
        assert lst.wal.read_records("gone", 0)[0].offset == 0
        assert lst.wal.read("gone", 0) == [b"again"]


def test_offsets_for_times_uses_the_time_index(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        for i in range(20):
            lst.wal.append("timed", b"r%d" % i)
            time.sleep(0.003)  # distinct append times, so each record has its own ms
        stamps = [r.timestamp_ms for r in lst.wal.read_records("timed", 0)]
        assert stamps == sorted(set(stamps))
        c = consumer(lst.bootstrap, "t")
        got = c.offsets_for_times([TopicPartition("timed", 0, stamps[8])], timeout=30)
        assert got[0].offset == 8
        got = c.offsets_for_times([TopicPartition("timed", 0, stamps[8] - 1)], timeout=30)
        assert got[0].offset == 8
        past_end = c.offsets_for_times([TopicPartition("timed", 0, stamps[-1] + 1)], timeout=30)
        assert past_end[0].offset == -1  # no record that new: Kafka answers -1 (end)
        low, high = c.get_watermark_offsets(TopicPartition("timed", 0), timeout=30)
        assert (low, high) == (0, 20)
        c.close()


def test_group_of_two_shares_partitions_commits_and_resumes(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        admin = AdminClient({"bootstrap.servers": lst.bootstrap})
        admin.create_topics([NewTopic("shared", num_partitions=4, replication_factor=1)])["shared"].result(
            timeout=30
        )
        p = Producer({"bootstrap.servers": lst.bootstrap, "acks": "all"})
        for i in range(200):
            p.produce("shared", value=b"m%d" % i, partition=i % 4)
        assert p.flush(30) == 0

        def member() -> Consumer:
            c = consumer(
                lst.bootstrap, "workers", **{"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
            )
            c.subscribe(["shared"])
            return c

        a, b = member(), member()
        seen: dict[str, set[int]] = {"a": set(), "b": set()}
        values: set[bytes] = set()
        deadline = time.monotonic() + 60
        # Read half of each partition's backlog between the two, committing as we go.
        while len(values) < 100 and time.monotonic() < deadline:
            for name, c in (("a", a), ("b", b)):
                m = c.poll(0.2)
                if m is None or m.error():
                    continue
                part, value = m.partition(), m.value()
                assert part is not None and value is not None
                seen[name].add(part)
                values.add(value)
                c.commit(message=m, asynchronous=False)
        assert len(values) >= 100
        # Both members got partitions, and none was owned by both at the end.
        assert seen["a"] and seen["b"]
        assert set(tp.partition for tp in a.assignment()).isdisjoint(tp.partition for tp in b.assignment())
        a.close()
        b.close()

        committed = {part: lst.wal.committed("workers", "shared", part) for part in range(4)}
        assert sum(v or 0 for v in committed.values()) == len(values)

        # Restart: a new member resumes from the commits and sees exactly the rest.
        c = member()
        rest = consume(c, 200 - len(values), timeout=60)
        c.close()
        assert len(rest) == 200 - len(values)
        assert values.isdisjoint(m.value() for m in rest)
        assert values | {m.value() for m in rest} == {b"m%d" % i for i in range(200)}


def test_created_topics_survive_a_restart(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        admin = AdminClient({"bootstrap.servers": lst.bootstrap})
        admin.create_topics([NewTopic("empty3", num_partitions=3, replication_factor=1)])["empty3"].result(
            timeout=30
        )
    with listener(tmp_path) as lst:
        assert [p for _, p in lst.wal.streams("empty3")] == [0, 1, 2]
        md = AdminClient({"bootstrap.servers": lst.bootstrap}).list_topics(timeout=30)
        assert sorted(md.topics["empty3"].partitions) == [0, 1, 2]
