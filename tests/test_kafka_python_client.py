"""kafka-python (a pure-Python client, idempotent producer by default)."""

from __future__ import annotations

from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka_harness import listener


def test_kafka_python_round_trip_with_group_commit(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        admin = KafkaAdminClient(bootstrap_servers=lst.bootstrap)
        admin.create_topics([NewTopic("kp", num_partitions=2, replication_factor=1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=lst.bootstrap, acks="all")
        futures = [
            producer.send(
                "kp", value=b"v%d" % i, key=b"k%d" % i, partition=i % 2, headers=[("n", str(i).encode())]
            )
            for i in range(20)
        ]
        metas = [f.get(timeout=30) for f in futures]
        producer.close()
        assert sorted(m.offset for m in metas if m.partition == 0) == list(range(10))

        c = KafkaConsumer(
            "kp",
            bootstrap_servers=lst.bootstrap,
            group_id="kpg",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=5000,
        )
        got = []
        for m in c:
            got.append(m)
            if len(got) == 20:
                break
        c.commit()
        c.close()
        assert sorted(m.value for m in got) == sorted(b"v%d" % i for i in range(20))
        m5 = next(m for m in got if m.value == b"v5")
        assert (m5.key, m5.headers) == (b"k5", [("n", b"5")])
        assert lst.wal.committed("kpg", "kp", 0) == 10
        assert lst.wal.committed("kpg", "kp", 1) == 10


def test_kafka_python_reads_engine_appends(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("plain", b"hello")
        c = KafkaConsumer(bootstrap_servers=lst.bootstrap, consumer_timeout_ms=5000)
        tp = TopicPartition("plain", 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        m = next(iter(c))
        c.close()
        assert (m.key, m.value, m.offset) == (None, b"hello", 0)
