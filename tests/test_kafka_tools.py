"""Kafka's own command-line tools (4.1.1, by class name, from the jars `make kafka` fetches)
against `walfs serve --allow-delete` and, as the reference, against a real single-node
Kafka 4.1.1 started once for the module: every operator's step of issue 18, with its
output checked (partition counts, lag figures, the low watermark after delete-records).
Then a group made only through the mount's `.consumers` files, seen and reset by
kafka-consumer-groups.

The JVM tools start in one or two seconds each; the module runs about forty of them.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_mount import Mount
from kafka_harness import SMALL_WAL_ARGS, ServeProcess, wait_until
from real_kafka import KafkaBroker, free_port, run_tool

TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CLUSTER = "org.apache.kafka.tools.ClusterTool"


@pytest.fixture(scope="module")
def real_kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker() as k:
        yield k


@pytest.fixture(scope="module")
def walfs_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    data = tmp_path_factory.mktemp("tools") / "data"
    serve = ServeProcess(data, "--allow-delete", *SMALL_WAL_ARGS)
    try:
        yield serve
    finally:
        serve.stop()


def tool(main_class: str, bootstrap: str, *args: str, check: bool = True) -> str:
    cp = run_tool(main_class, "--bootstrap-server", bootstrap, *args, check=check)
    return cp.stdout + cp.stderr if not check else cp.stdout


def describe_rows(out: str) -> dict[tuple[str, int], tuple[str, str, str]]:
    """kafka-consumer-groups --describe's table: (topic, partition) -> (current, end, lag)."""
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[2].isdigit():
            rows[(f[1], int(f[2]))] = (f[3], f[4], f[5])
    return rows


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, f"p{part}-r{i}".encode(), partition=part)
    assert p.flush(30) == 0


def commit(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        c.close()


def offsets(bootstrap: str, topic: str, time: str) -> dict[int, int]:
    out = tool(GET_OFFSETS, bootstrap, "--topic", topic, "--time", time)
    return {int(p): int(o) for t, p, o in (line.split(":") for line in out.split()) if t == topic}


@pytest.fixture(params=["walfs", "kafka"])
def server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(name, bootstrap) of the server under test; the real broker is the reference."""
    if request.param == "walfs":
        return "walfs", request.getfixturevalue("walfs_serve").bootstrap
    return "kafka", request.getfixturevalue("real_kafka").bootstrap


def test_operator_steps(server: tuple[str, str]) -> None:
    name, b = server
    topic, group = "orders", "billing"

    # kafka-topics --create / --list / --alter --partitions / --describe
    assert f"Created topic {topic}." in tool(TOPICS, b, "--create", "--topic", topic, "--partitions", "2")
    assert topic in tool(TOPICS, b, "--list").split()
    tool(TOPICS, b, "--alter", "--topic", topic, "--partitions", "3")
    assert "PartitionCount: 3" in tool(TOPICS, b, "--describe", "--topic", topic)
    shrink = tool(TOPICS, b, "--alter", "--topic", topic, "--partitions", "2", check=False)
    assert f"The topic {topic} currently has 3 partition(s); 2 would not be an increase." in shrink, shrink
    assert "PartitionCount: 3" in tool(TOPICS, b, "--describe", "--topic", topic)

    produce(b, topic, per_partition=10, partitions=3)
    assert offsets(b, topic, "-1") == {0: 10, 1: 10, 2: 10}

    # kafka-consumer-groups --list / --describe (lag) / --reset-offsets
    commit(b, group, topic, 0, 4)
    assert group in tool(GROUPS, b, "--list").split()
    rows = describe_rows(tool(GROUPS, b, "--describe", "--group", group))
    assert rows[(topic, 0)] == ("4", "10", "6")
    out = tool(
        GROUPS,
        b,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:0",
        "--to-offset",
        "2",
        "--execute",
    )
    assert re.search(rf"{group}\s+{topic}\s+0\s+2\b", out), out
    rows = describe_rows(tool(GROUPS, b, "--describe", "--group", group))
    assert rows[(topic, 0)] == ("2", "10", "8")

    # kafka-configs --alter / --describe, and the config in kafka-topics --describe
    assert "Completed updating config" in tool(
        CONFIGS,
        b,
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--alter",
        "--add-config",
        "retention.ms=86400000,max.message.bytes=200000",
    )
    described = tool(CONFIGS, b, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert "retention.ms=86400000" in described and "max.message.bytes=200000" in described
    topic_desc = tool(TOPICS, b, "--describe", "--topic", topic)
    assert "retention.ms=86400000" in topic_desc and "max.message.bytes=200000" in topic_desc
    tool(
        CONFIGS,
        b,
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--alter",
        "--delete-config",
        "retention.ms",
    )
    described = tool(CONFIGS, b, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert "retention.ms=" not in described and "max.message.bytes=200000" in described
    unknown = tool(
        CONFIGS,
        b,
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--alter",
        "--add-config",
        "no.such.config=1",
        check=False,
    )
    assert "InvalidConfigurationException" in unknown or "Unknown topic config" in unknown, unknown
    broker_configs = tool(
        CONFIGS, b, "--entity-type", "brokers", "--entity-name", _node(name), "--describe", "--all"
    )
    assert "num.partitions=1" in broker_configs

    # kafka-delete-records, then the new low watermark in kafka-get-offsets
    plan = json.dumps({"partitions": [{"topic": topic, "partition": 1, "offset": 7}], "version": 1})
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(plan)
        f.flush()
        out = tool(DELETE_RECORDS, b, "--offset-json-file", f.name)
    assert re.search(rf"partition: {topic}-1\s+low_watermark: 7", out), out
    assert offsets(b, topic, "-2") == {0: 0, 1: 7, 2: 0}
    assert offsets(b, topic, "-1") == {0: 10, 1: 10, 2: 10}

    # kafka-log-dirs --describe: one directory holding the three partitions
    out = tool(LOG_DIRS, b, "--describe", "--topic-list", topic)
    doc = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    [brk] = doc["brokers"]
    [log_dir] = brk["logDirs"]
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1", f"{topic}-2"}
    if name == "walfs":
        # The bytes each partition keeps: values plus newlines, from its low watermark on.
        assert sizes[f"{topic}-0"] == sum(len(f"p0-r{i}") + 1 for i in range(10))
        assert sizes[f"{topic}-1"] == sum(len(f"p1-r{i}") + 1 for i in range(7, 10))

    # kafka-configs --alter cleanup.policy=compact
    compact = tool(
        CONFIGS,
        b,
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--alter",
        "--add-config",
        "cleanup.policy=compact",
        check=False,
    )
    # The one difference: walfs does not compact, and says so. (After delete-records:
    # Kafka refuses DeleteRecords on a compacted topic.)
    if name == "walfs":
        assert "InvalidConfigurationException" in compact and "does not compact" in compact, compact
    else:
        assert "Completed updating config" in compact

    # kafka-cluster cluster-id
    out = run_tool(CLUSTER, "cluster-id", "--bootstrap-server", b).stdout
    assert re.search(r"Cluster ID: \S+", out), out

    # kafka-consumer-groups --delete-offsets, --delete; kafka-topics --delete
    out = tool(GROUPS, b, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert re.search(rf"{topic}\s+0\s+Successful", out), out
    assert (topic, 0) not in describe_rows(tool(GROUPS, b, "--describe", "--group", group))
    assert "successful" in tool(GROUPS, b, "--delete", "--group", group)
    assert group not in tool(GROUPS, b, "--list").split()
    tool(TOPICS, b, "--delete", "--topic", topic)
    wait_until(lambda: topic not in tool(TOPICS, b, "--list").split(), timeout=60, what="topic deletion")


def _node(name: str) -> str:
    """The broker id kafka-configs names: walfs is node 0, the reference broker node 1."""
    return "0" if name == "walfs" else "1"


def test_mount_group_in_consumer_groups(tmp_path: Path) -> None:
    """A group that only ever read through `cat .consumers/billing/orders` is a Kafka group:
    kafka-consumer-groups lists it, shows its lag, and a reset moves what the file shows."""
    m = Mount(tmp_path)
    port = free_port()
    try:
        m.start("--kafka-listen", f"127.0.0.1:{port}")
        b = f"127.0.0.1:{port}"
        m.sh("for i in 0 1 2 3 4; do echo line$i >> orders; done; mkdir .consumers/billing")
        assert m.out("cat .consumers/billing/orders") == "".join(f"line{i}\n" for i in range(5))
        m.sh("echo line5 >> orders; echo line6 >> orders")
        assert "billing" in tool(GROUPS, b, "--list").split()
        out = tool(GROUPS, b, "--describe", "--group", "billing")
        assert describe_rows(out)[("orders", 0)] == ("5", "7", "2"), out
        tool(
            GROUPS,
            b,
            "--reset-offsets",
            "--group",
            "billing",
            "--topic",
            "orders",
            "--to-offset",
            "3",
            "--execute",
        )
        assert m.out("cat .consumers/billing/orders") == "line3\nline4\nline5\nline6\n"
        out = tool(GROUPS, b, "--describe", "--group", "billing")
        assert describe_rows(out)[("orders", 0)] == ("7", "7", "0"), out
        assert "successful" in tool(GROUPS, b, "--delete", "--group", "billing")
        assert "billing" not in m.out("ls .consumers").split()
        m.stop()
    finally:
        m.cleanup()
