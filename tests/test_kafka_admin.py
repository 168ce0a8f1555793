"""confluent-kafka's AdminClient (librdkafka) against the listener: topic configs (validated,
honoured, persisted), CreatePartitions, DeleteRecords, consumer groups from every face,
DescribeCluster; the broker settings (num.partitions, auto.create.topics.enable,
message.max.bytes); OffsetDelete over the raw protocol (no Python client has it)."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from kafka_harness import SMALL_WAL, Listener, encode_request, listener, raw_connect, recv_frame

import walfs
from walfs.kafka.broker_config import BrokerConfig, parse_broker_config


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def kafka_error(fut: Any) -> KafkaError:
    with pytest.raises(KafkaException) as ei:
        fut.result(15)
    err = ei.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def topic_configs(a: AdminClient, topic: str) -> dict[str, tuple[str, ConfigSource]]:
    [fut] = a.describe_configs([ConfigResource("topic", topic)]).values()
    return {n: (e.value, ConfigSource(e.source)) for n, e in fut.result(15).items()}


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, **kw: Any) -> list[Any]:
    """Delivery reports (errors or messages) of the values, in order."""
    reports: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=lambda e, m: reports.append(e or m), **kw)
    assert p.flush(30) == 0
    return reports


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_topic_configs_validated_stored_and_kept_across_restarts(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        a = admin(lst.bootstrap)
        futs = a.create_topics(
            [
                NewTopic("kept", 1, 1, config={"retention.ms": "3600000", "max.message.bytes": "5000"}),
                NewTopic("unknown-config", 1, 1, config={"segment.bytes": "1000"}),
                NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
                NewTopic("bad-value", 1, 1, config={"retention.ms": "soon"}),
            ]
        )
        futs["kept"].result(15)
        for name in ("unknown-config", "compacted", "bad-value"):
            assert kafka_error(futs[name]).code() == KafkaError.INVALID_CONFIG, name
            assert [p for _, p in lst.wal.streams(name)] == []  # refused topics are not created
        assert (
            "does not compact"
            in kafka_error(
                a.create_topics([NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"})])[
                    "compacted"
                ]
            ).str()
        )

        got = topic_configs(a, "kept")
        assert got["retention.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert got["max.message.bytes"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert got["retention.bytes"] == ("-1", ConfigSource.DEFAULT_CONFIG)
        assert got["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)
        assert lst.wal.retention("kept").ms == 3600000  # the policy the WAL enforces

        # IncrementalAlterConfigs: SET and DELETE; an invalid entry refuses the resource whole.
        res = ConfigResource(
            "topic",
            "kept",
            incremental_configs=[
                ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ],
        )
        [fut] = a.incremental_alter_configs([res]).values()
        fut.result(15)
        bad = ConfigResource(
            "topic",
            "kept",
            incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
            ],
        )
        [fut] = a.incremental_alter_configs([bad]).values()
        assert kafka_error(fut).code() == KafkaError.INVALID_CONFIG
        assert lst.wal.retention("kept").bytes == 1048576 and lst.wal.retention("kept").ms is None

    # A restart: the settings are in the data directory.
    with walfs.Wal(str(tmp_path / "data"), **SMALL_WAL) as wal, Listener(wal) as lst:
        a = admin(lst.bootstrap)
        got = topic_configs(a, "kept")
        assert got["retention.bytes"] == ("1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert got["max.message.bytes"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert got["retention.ms"] == ("-1", ConfigSource.DEFAULT_CONFIG)
        # AlterConfigs replaces the whole set: what it does not name goes back to the default.
        [fut] = a.alter_configs(
            [ConfigResource("topic", "kept", set_config={"message.timestamp.type": "LogAppendTime"})]
        ).values()
        fut.result(15)
        got = topic_configs(a, "kept")
        assert got["message.timestamp.type"] == ("LogAppendTime", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert got["max.message.bytes"] == ("1048588", ConfigSource.DEFAULT_CONFIG)
        assert got["retention.bytes"] == ("-1", ConfigSource.DEFAULT_CONFIG)
        # An unknown topic: UNKNOWN_TOPIC_OR_PARTITION, as on Kafka.
        [fut] = a.describe_configs([ConfigResource("topic", "nope")]).values()
        assert kafka_error(fut).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_max_message_bytes_refuses_larger_batches(tmp_path: Path) -> None:
    with listener(tmp_path, config=BrokerConfig(message_max_bytes=4000)) as lst:
        a = admin(lst.bootstrap)
        a.create_topics([NewTopic("small", 1, 1, config={"max.message.bytes": "300"})])["small"].result(15)
        a.create_topics([NewTopic("broker-default", 1, 1)])["broker-default"].result(15)
        [ok] = produce(lst.bootstrap, "small", [b"x" * 100])
        assert ok.error() is None
        [big] = produce(lst.bootstrap, "small", [b"y" * 1000])
        assert isinstance(big, KafkaError) and big.code() == KafkaError.MSG_SIZE_TOO_LARGE
        [ok2] = produce(lst.bootstrap, "broker-default", [b"z" * 3000])
        assert ok2.error() is None
        [big2] = produce(lst.bootstrap, "broker-default", [b"z" * 5000])
        assert isinstance(big2, KafkaError) and big2.code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert [r.value for r in lst.wal.read_records("small", 0)] == [b"x" * 100]
        assert lst.wal.info("broker-default").high_watermark == 1


def test_log_append_time_stamps_records(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        a = admin(lst.bootstrap)
        cfg = {"message.timestamp.type": "LogAppendTime"}
        a.create_topics([NewTopic("stamped", 1, 1, config=cfg), NewTopic("created", 1, 1)])["stamped"].result(
            15
        )
        before = int(time.time() * 1000)
        for topic in ("stamped", "created"):
            produce(lst.bootstrap, topic, [b"old"], timestamp=1_000_000)
        [stamped] = lst.wal.read_records("stamped", 0)
        [created] = lst.wal.read_records("created", 0)
        assert created.timestamp_ms == 1_000_000  # CreateTime keeps the producer's
        assert stamped.timestamp_ms >= before


def test_create_partitions(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        a = admin(lst.bootstrap)
        a.create_topics([NewTopic("grows", 1, 1)])["grows"].result(15)
        a.create_partitions([NewPartitions("grows", 3)])["grows"].result(15)
        assert [p for _, p in lst.wal.streams("grows")] == [0, 1, 2]
        err = kafka_error(a.create_partitions([NewPartitions("grows", 2)])["grows"])
        assert err.code() == KafkaError.INVALID_PARTITIONS and "would not be an increase" in err.str()
        err = kafka_error(a.create_partitions([NewPartitions("nope", 2)])["nope"])
        assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        [m] = produce(lst.bootstrap, "grows", [b"in two"], partition=2)
        assert m.error() is None and m.partition() == 2
        md = a.list_topics("grows", timeout=15)
        assert sorted(md.topics["grows"].partitions) == [0, 1, 2]


def test_delete_records_moves_the_log_start(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        produce(lst.bootstrap, "trimmed", [b"r%d" % i for i in range(10)])
        a = admin(lst.bootstrap)
        [fut] = a.delete_records([TopicPartition("trimmed", 0, 6)]).values()
        assert fut.result(15).low_watermark == 6
        assert lst.wal.info("trimmed").low_watermark == 6
        [fut] = a.list_offsets({TopicPartition("trimmed", 0): OffsetSpec.earliest()}).values()
        assert fut.result(15).offset == 6
        # Beyond the end: OFFSET_OUT_OF_RANGE, nothing trimmed.
        [fut] = a.delete_records([TopicPartition("trimmed", 0, 11)]).values()
        assert kafka_error(fut).code() == KafkaError.OFFSET_OUT_OF_RANGE
        # A consumer at a trimmed offset gets OFFSET_OUT_OF_RANGE, and resets to the new start.
        c = Consumer(
            {"bootstrap.servers": lst.bootstrap, "group.id": "late", "auto.offset.reset": "earliest"}
        )
        try:
            c.assign([TopicPartition("trimmed", 0, 2)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 4 and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got.append((m.offset(), m.value()))
            assert got == [(i, b"r%d" % i) for i in range(6, 10)]
            strict = Consumer(
                {"bootstrap.servers": lst.bootstrap, "group.id": "strict", "auto.offset.reset": "error"}
            )
            try:
                strict.assign([TopicPartition("trimmed", 0, 2)])
                err = None
                deadline = time.monotonic() + 30
                while err is None and time.monotonic() < deadline:
                    m = strict.poll(0.5)
                    if m is not None and m.error() is not None:
                        err = m.error()
                assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET
            finally:
                strict.close()
        finally:
            c.close()


def test_groups_from_every_face_are_one_set(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        wal = lst.wal
        produce(lst.bootstrap, "events", [b"e%d" % i for i in range(8)])
        wal.commit("python-face", "events", 5)  # a walfs consumer of the Python API
        wal.engine.create_group("made-by-mkdir")  # `mkdir .consumers/made-by-mkdir`
        live = Consumer(
            {
                "bootstrap.servers": lst.bootstrap,
                "group.id": "kafka-face",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        a = admin(lst.bootstrap)
        try:
            live.subscribe(["events"])
            deadline = time.monotonic() + 30
            while not live.assignment() and time.monotonic() < deadline:
                live.poll(0.2)
            assert live.assignment()
            listed = {g.group_id: g for g in a.list_consumer_groups().result(15).valid}
            assert {"python-face", "made-by-mkdir", "kafka-face"} <= set(listed)
            descs = a.describe_consumer_groups(["kafka-face", "python-face"])
            kd = descs["kafka-face"].result(15)
            assert str(kd.state).endswith("STABLE") and len(kd.members) == 1
            assert [tp.topic for tp in kd.members[0].assignment.topic_partitions] == ["events"]
            pd = descs["python-face"].result(15)
            assert str(pd.state).endswith("EMPTY") and pd.members == []
            # Every offset a group committed (OffsetFetch with no topics named).
            [fut] = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("python-face")]).values()
            got = fut.result(15)
            assert [(tp.topic, tp.partition, tp.offset) for tp in got.topic_partitions] == [("events", 0, 5)]
            # A name no group can have (the walfs name rule): INVALID_GROUP_ID (docs/kafka.md).
            [fut] = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("..")]).values()
            with pytest.raises(KafkaException, match="INVALID_GROUP_ID"):
                fut.result(15)
            # Deleting: a group with members is refused, an empty one goes with its offsets.
            dels = a.delete_consumer_groups(["kafka-face", "python-face", "never-was"])
            assert kafka_error(dels["kafka-face"]).code() == KafkaError.NON_EMPTY_GROUP
            dels["python-face"].result(15)
            assert kafka_error(dels["never-was"]).code() == KafkaError.GROUP_ID_NOT_FOUND
            assert "python-face" not in wal.groups()
            assert wal.committed("python-face", "events") is None
        finally:
            live.close()
        assert a.describe_cluster().result(15).cluster_id == "walfs"


def _offset_delete(port: int, group: str, topic: str, partitions: list[int]) -> tuple[int, dict[int, int]]:
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
    from kio.serial import entity_reader

    req = OffsetDeleteRequest(
        group_id=group,
        topics=(
            OffsetDeleteRequestTopic(
                name=topic,
                partitions=tuple(OffsetDeleteRequestPartition(partition_index=p) for p in partitions),
            ),
        ),
    )
    with raw_connect(port) as s:
        s.sendall(encode_request(47, 0, 9, req))
        resp = recv_frame(s)
    assert struct.unpack(">i", resp[:4])[0] == 9
    body, _ = entity_reader(OffsetDeleteResponse)(resp, 4)
    parts = {p.partition_index: int(p.error_code.value) for t in body.topics for p in t.partitions}
    return int(body.error_code.value), parts


def test_offset_delete(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        wal = lst.wal
        wal.append("t", b"a")
        wal.commit("g", "t", 1)
        code, parts = _offset_delete(lst.port, "g", "t", [0, 7])
        assert code == 0 and parts == {0: 0, 7: KafkaError.UNKNOWN_TOPIC_OR_PART}
        assert wal.committed("g", "t") is None
        code, _ = _offset_delete(lst.port, "no-such-group", "t", [0])
        assert code == KafkaError.GROUP_ID_NOT_FOUND


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_broker_settings_num_partitions_and_auto_create(tmp_path: Path) -> None:
    cfg = parse_broker_config(["num.partitions=3", "log.message.timestamp.type=LogAppendTime"])
    with listener(tmp_path / "a", config=cfg) as lst:
        a = admin(lst.bootstrap)
        [m] = produce(lst.bootstrap, "auto", [b"v"], partition=0)  # the producer's Metadata creates it
        assert m.error() is None
        assert [p for _, p in lst.wal.streams("auto")] == [0, 1, 2]
        a.create_topics([NewTopic("defaulted", num_partitions=-1)])["defaulted"].result(15)
        assert [p for _, p in lst.wal.streams("defaulted")] == [0, 1, 2]
        assert topic_configs(a, "auto")["message.timestamp.type"] == (
            "LogAppendTime",
            ConfigSource.STATIC_BROKER_CONFIG,
        )
        [fut] = a.describe_configs([ConfigResource("broker", "0")]).values()
        got = fut.result(15)
        assert got["num.partitions"].value == "3"
        assert ConfigSource(got["num.partitions"].source) == ConfigSource.STATIC_BROKER_CONFIG
        assert got["auto.create.topics.enable"].value == "true"
        # Broker settings are taken at start, not altered over the wire.
        [fut] = a.alter_configs([ConfigResource("broker", "0", set_config={"num.partitions": "5"})]).values()
        assert kafka_error(fut).code() == KafkaError.INVALID_REQUEST

    with listener(tmp_path / "b", config=parse_broker_config(["auto.create.topics.enable=false"])) as lst:
        [err] = produce(lst.bootstrap, "not-made", [b"v"], partition=0)
        assert isinstance(err, KafkaError)
        assert [p for _, p in lst.wal.streams("not-made")] == []


@pytest.mark.parametrize(
    "item",
    [
        "num.partitions=0",
        "num.partitions=x",
        "auto.create.topics.enable=yes",
        "log.retention.ms=soon",
        "log.message.timestamp.type=Now",
        "segment.bytes=1",
        "num.partitions",
    ],
)
def test_broker_settings_refused(item: str) -> None:
    with pytest.raises(ValueError):
        parse_broker_config([item])


def test_retention_set_through_kafka_is_enforced(tmp_path: Path) -> None:
    """retention.ms / retention.bytes from IncrementalAlterConfigs are the WAL's policy: a
    retention pass trims by them, and ListOffsets earliest shows the new log start.
    retention.bytes counts whole segment files (walfs.engine.settings.file_budget): a limit of
    one segment keeps the partition's newest file."""
    seg = 1 << 20
    with listener(tmp_path, wal_kwargs={"segment_size": seg, "block_size": 64 << 10}) as lst:
        produce(lst.bootstrap, "aged", [b"a%d" % i for i in range(5)])
        produce(lst.bootstrap, "sized", [b"%04d" % i + b"s" * 996 for i in range(2500)])  # 2.5 MB
        core = lst.wal.engine.core
        files, firsts = core.stream_files(lst.wal.engine._stream("sized", 0, False).stream_no, 64)
        assert files >= 3
        a = admin(lst.bootstrap)
        for topic, name, value in (("aged", "retention.ms", "1000"), ("sized", "retention.bytes", str(seg))):
            res = ConfigResource(
                "topic",
                topic,
                incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
            )
            [fut] = a.incremental_alter_configs([res]).values()
            fut.result(15)
        trimmed = lst.wal.engine.apply_retention(now_ms=int(time.time() * 1000) + 60_000)
        # (the background pass, woken by the new limits, may have trimmed first: same result)
        org = lst.wal.engine.org_id
        assert trimmed.get((org, "aged", 0), lst.wal.info("aged").low_watermark) == 5
        assert trimmed.get((org, "sized", 0), lst.wal.info("sized").low_watermark) == firsts[-1]
        futs = a.list_offsets(
            {
                TopicPartition("aged", 0): OffsetSpec.earliest(),
                TopicPartition("sized", 0): OffsetSpec.earliest(),
            }
        )
        assert {tp.topic: f.result(15).offset for tp, f in futs.items()} == {"aged": 5, "sized": firsts[-1]}
