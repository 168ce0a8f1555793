"""aiokafka (asyncio, PyPI) against the listener (issue 12): producing with every codec,
tombstones and headers, an idempotent producer, a consumer group that commits with
metadata, and the committed offsets read back through Kafka and through the Wal API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from kafka_harness import listener

N = 300


async def _produce(bootstrap: str, topic: str, codec: str | None) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, compression_type=codec, enable_idempotence=True, linger_ms=20
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=None if i % 50 == 49 else b"%s value %d " % (topic.encode(), i) * 5,
                key=b"k%d" % (i % 7),
                headers=[("i", str(i).encode())],
                timestamp_ms=1_700_000_000_000 + i,
            )
            for i in range(N)
        ]
        offsets = [(await f).offset for f in futures]
        assert offsets == list(range(N))
    finally:
        await producer.stop()


async def _consume_and_commit(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, int]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"aio-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    got: list[tuple[bytes | None, bytes | None, int]] = []
    try:
        async with asyncio.timeout(60):
            while len(got) < N:
                batches = await consumer.getmany(timeout_ms=500)
                for msgs in batches.values():
                    got += [(m.key, m.value, m.timestamp) for m in msgs]
        tp = TopicPartition(topic, 0)
        await consumer.commit({tp: OffsetAndMetadata(N, "aiokafka was here")})
        assert await consumer.committed(tp) == N
    finally:
        await consumer.stop()
    return got


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_codecs_group_commit_with_metadata(tmp_path: Path, codec: str | None) -> None:
    topic = f"aio-{codec or 'none'}"
    with listener(tmp_path) as lst:
        asyncio.run(_produce(lst.bootstrap, topic, codec))
        got = asyncio.run(_consume_and_commit(lst.bootstrap, topic))
        assert len(got) == N
        for i, (key, value, ts) in enumerate(got):
            assert key == b"k%d" % (i % 7)
            assert value == (None if i % 50 == 49 else b"%s value %d " % (topic.encode(), i) * 5)
            assert ts == 1_700_000_000_000 + i
        assert lst.wal.engine.committed(f"aio-{topic}", topic, 0) == (N, "aiokafka was here")
        recs = lst.wal.read_records(topic, 0, max_records=N)
        assert [r.value is None for r in recs] == [i % 50 == 49 for i in range(N)]


async def _admin(bootstrap: str) -> dict[str, object]:
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    out: dict[str, object] = {}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        res = ConfigResource(ConfigResourceType.TOPIC, "aio-admin", {"retention.bytes": "1048576"})
        await admin.alter_configs([res])
        [described] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-admin")])
        entries = described.resources[0][4]
        out["configs"] = {e[0]: e[1] for e in entries if e[0] in ("retention.bytes", "cleanup.policy")}
        bad = ConfigResource(ConfigResourceType.TOPIC, "aio-admin", {"cleanup.policy": "compact"})
        [answer] = await admin.alter_configs([bad])
        out["compact_error"] = answer.resources[0][0]
        await admin.create_partitions({"aio-admin": NewPartitions(total_count=4)})
        out["partitions"] = len((await admin.describe_topics(["aio-admin"]))[0]["partitions"])
        out["deleted"] = await admin.delete_records({TopicPartition("aio-admin", 0): RecordsToDelete(30)})
    finally:
        await admin.close()
    return out


def test_aiokafka_admin_configs_partitions_and_record_deletion(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("aio-admin", [b"r%d" % i for i in range(50)])
        out = asyncio.run(_admin(lst.bootstrap))
        assert out["configs"] == {"retention.bytes": "1048576", "cleanup.policy": "delete"}
        assert out["compact_error"] == 40  # INVALID_CONFIG
        assert out["partitions"] == 4 and [p for _, p in lst.wal.streams("aio-admin")] == [0, 1, 2, 3]
        assert lst.wal.info("aio-admin").low_watermark == 30
        assert lst.wal.retention("aio-admin").bytes == 1_048_576
