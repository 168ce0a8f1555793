"""Many topics (issue 35): the topic index, the open's listing of every stream, `ls` of a
mount root of thousands of names (readdir pages through one listing), a consumer group's
directory over them, `walfs groups describe` of a group over thousands of topics (its
directory's cursor pages, against the engine's answer), and one Kafka Metadata and
ListOffsets request for all of them through real clients (confluent-kafka, kafka-python).
No timings: bench/engine/bench_topics.py measures."""

from __future__ import annotations

import json
import os
import socket
from array import array
from collections.abc import Callable
from pathlib import Path

from conftest_mount import Mount, cli

import walfs
from walfs.fuse.nodes import StreamSet
from walfs.local.topic_index import Stream, TopicIndex

pytest_plugins = ["conftest_mount"]

MANY = 3000  # several hundred readdir pages; small runs: 4 KiB blocks


def names(n: int) -> list[str]:
    return [f"t{i:05d}" for i in range(n)]


def make_topics(d: Path, n: int) -> None:
    with walfs.Wal(d, block_size=4096, segment_size=64 << 20) as w:
        for t in names(n):
            w.append(t, t.encode())


def test_topic_index_partitions_of_single_and_many_partition_topics() -> None:
    ix = TopicIndex()
    h = b"\0" * 16
    a0, b0, b2, c1 = (
        Stream(0, 1, 0, h, "a"),
        Stream(1, 1, 0, h, "b"),
        Stream(2, 1, 2, h, "b"),
        Stream(3, 1, 1, h, "c"),
    )
    other = Stream(5, 2, 0, h, "a")  # another org, a gap in the numbers
    for s in (a0, b0, b2, c1, other):
        ix.add(s)
    assert ix.partitions(1, "a") == [0]
    assert ix.partitions(1, "b") == [0, 2]
    assert ix.partitions(1, "c") == [1]
    assert ix.partitions(1, "nope") == [] and ix.partitions(3, "a") == []
    assert ix.partitions(2, "a") == [0]
    assert ix.by_no(2) is b2 and ix.by_no(4) is None and ix.by_no(99) is None
    assert ix.get(1, "b", 2) is b2 and ix.get(1, "b", 1) is None
    assert ix.topics(1) == ["a", "b", "c"] and ix.topics(2) == ["a"]
    assert ix.org_streams(1) == [a0, b0, b2, c1]
    assert ix.org_streams_all() == [a0, b0, b2, c1, other]
    bulk = TopicIndex()  # the open's add_all: the same index, whatever the order
    assert bulk.add_all([b2, other, c1, b0, a0]) == 5
    for org, name in ((1, "a"), (1, "b"), (1, "c"), (2, "a"), (1, "nope")):
        assert bulk.partitions(org, name) == ix.partitions(org, name)
    assert bulk.org_streams(1) == ix.org_streams(1) and bulk.by_no(4) is None
    ix.remove(b0)
    assert ix.partitions(1, "b") == [2]
    ix.remove(b2)
    assert ix.partitions(1, "b") == [] and ix.topics(1) == ["a", "c"]
    b0again = Stream(6, 1, 0, h, "b")  # made again: a new stream number
    ix.add(b0again)
    assert ix.partitions(1, "b") == [0] and ix.get(1, "b", 0) is b0again
    ix.remove(a0)
    assert ix.partitions(1, "a") == [] and ix.get(1, "a", 0) is None and ix.by_no(0) is None


def test_the_mounts_stream_set_is_a_set_of_topic_partition_pairs() -> None:
    ss = StreamSet()
    ss.update([("a", 0), ("b", 0), ("b", 2)])
    ss.add(("c", 1))
    ss.add(("a", 0))  # again: no second entry
    assert ("a", 0) in ss and ("b", 2) in ss and ("c", 1) in ss
    assert ("a", 1) not in ss and ("nope", 0) not in ss and "a" not in ss
    assert len(ss) == 4 and sorted(ss) == [("a", 0), ("b", 0), ("b", 2), ("c", 1)]
    assert ss.partitions() == {0, 1, 2} and ss.names(0) == ["a", "b"] and ss.names(7) == []
    walk = iter(ss)
    first = next(walk)
    ss.discard(("c", 1))  # during a walk (the watcher's pass): no error, and it is left out
    assert sorted([first, *walk]) == [("a", 0), ("b", 0), ("b", 2)]
    ss.discard(("c", 1))
    assert ss.partitions() == {0, 2} and len(ss) == 3


def test_open_lists_every_stream_of_thousands(tmp_path: Path) -> None:
    d = tmp_path / "wal"
    make_topics(d, MANY)
    with walfs.Wal(d) as w:
        for p in range(3):
            w.append("multi", b"x", partition=p)
        w.delete("t00007")
        w.commit("g", "t00009", 1)
    with walfs.Wal(d) as w:
        topics = w.topics()
        assert len(topics) == MANY and "t00007" not in topics and "multi" in topics
        assert w.engine.streams("multi") == [("multi", 0), ("multi", 1), ("multi", 2)]
        assert w.engine.streams("t00042") == [("t00042", 0)]
        assert w.engine.streams("t00007") == []
        assert w.info("t02999").high_watermark == 1
        assert w.read("t01234", 0) == [b"t01234"]
        assert w.committed("g", "t00009") == 1
        w.append("t00007", b"again")  # a deleted name is made anew
        assert w.info("t00007").high_watermark == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_mount_and_kafka_face_over_thousands_of_topics(make_mount: Callable[[], Mount]) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    m = make_mount()
    assert isinstance(m.data, Path)
    make_topics(m.data, MANY)
    with walfs.Wal(m.data) as w:  # a group over every topic, and one over two
        for i, t in enumerate(names(MANY)):
            w.commit("wide", t, i % 2)
        w.commit("narrow", "t00005", 1)
        w.commit("narrow", "t02000", 0)
    port = free_port()
    m.start("--kafka-listen", f"127.0.0.1:{port}")
    want = set(names(MANY))
    # `ls` of the root: every name once, through many readdir pages.
    listed = os.listdir(m.path)
    assert len(listed) == len(set(listed)) == MANY + 2
    assert set(listed) == want | {".consumers", "partition=0"}
    assert m.out("ls | wc -l").strip() == str(MANY + 1)  # ls hides .consumers
    # A name made while a listing is under way shows in the next one.
    with os.scandir(m.path) as it:
        first = [next(it).name for _ in range(10)]
        with open(m.path / "made-meanwhile", "ab") as f:
            f.write(b"x\n")
        rest = [e.name for e in it]
    assert want <= set(first + rest)
    assert len(first + rest) == len(set(first + rest))
    assert "made-meanwhile" in os.listdir(m.path)
    assert set(os.listdir(m.path / "partition=0")) == want | {"made-meanwhile"}
    # A consumer group over every topic: its directory lists them all.
    os.mkdir(m.path / ".consumers" / "g")
    in_group = set(os.listdir(m.path / ".consumers" / "g"))
    assert in_group == want | {"made-meanwhile", ".peek", "partition=0"}
    assert (m.path / ".consumers" / "g" / "t02999").read_bytes() == b"t02999\n"

    # `walfs groups describe` reads the group's cursors from its directory's xattr pages
    # (more than one page here: ~70 KiB of lines), not two xattrs of every topic.
    wide = m.path / ".consumers" / "wide"
    first = os.getxattr(wide, "user.walfs.cursors.0").splitlines()
    assert 0 < len(first) < MANY and json.loads(first[0]) == ["t00000", 0, 0, 0, 1]
    assert os.getxattr(wide, f"user.walfs.cursors.{MANY}") == b""
    out = cli("groups", "describe", str(m.path), "wide", "--json").stdout
    described = [json.loads(x) for x in out.splitlines()]
    assert [(r["topic"], r["committed_offset"], r["high_watermark"], r["lag"]) for r in described] == [
        (t, i % 2, 1, 1 - i % 2) for i, t in enumerate(names(MANY))
    ]
    narrow = cli("groups", "describe", str(m.path), "narrow", "--json").stdout.splitlines()
    got = [(r["topic"], r["committed_offset"]) for r in map(json.loads, narrow)]
    assert got == [("t00005", 1), ("t02000", 0)]
    # g's one cursor: the read of its consumer file above committed it.
    g = [json.loads(x) for x in cli("groups", "describe", str(m.path), "g", "--json").stdout.splitlines()]
    assert [(r["topic"], r["committed_offset"]) for r in g] == [("t02999", 1)]

    # One Metadata request for every topic, one ListOffsets of every partition.
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    md = admin.list_topics(timeout=120)
    assert {t for t in md.topics if t.startswith("t")} == want
    assert all(len(md.topics[t].partitions) == 1 for t in want)
    futs = admin.list_offsets({TopicPartition(t, 0): OffsetSpec.latest() for t in want}, request_timeout=120)
    assert {tp.topic: f.result().offset for tp, f in futs.items()} == dict.fromkeys(want, 1)
    # Another client's ListOffsets (kafka-python: v1+ by its own encoder).
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=120_000)
    try:
        ends = consumer.end_offsets([KTopicPartition(t, 0) for t in want])
        assert {tp.topic: off for tp, off in ends.items()} == dict.fromkeys(want, 1)
        starts = consumer.beginning_offsets([KTopicPartition(t, 0) for t in sorted(want)[:100]])
        assert set(starts.values()) == {0}
    finally:
        consumer.close()
    m.stop()


def test_group_cursors_are_the_committed_offsets_of_every_stream(tmp_path: Path) -> None:
    """capabilities.GroupCursors (the local engine lists a group's cursors from its store)
    answers what asking every stream does (rules.committed_offsets' fallback): org views
    apart, a deleted topic's cursor gone, partitions of one topic, an empty group."""
    from walfs.engine.capabilities import GroupCursors, has

    with walfs.Wal(tmp_path / "wal") as w:
        e = w.engine
        assert has(e, GroupCursors)
        for t in names(50):
            w.append(t, b"x")
        for p in range(3):
            w.append("multi", b"x", partition=p)
        for i, t in enumerate(names(50)):
            if i % 3 == 0:
                w.commit("g", t, 1)
        w.commit("g", "multi", 1, partition=2)
        w.delete("t00003")  # its cursor goes with it
        other = e.for_org(7)
        other.append("t00000", 0, b"y", array("I", [0]), array("I", [1]))
        other.commit("g", "t00000", 0, 1)  # the same group name in another org
        e.create_group("empty")

        def every_stream(engine: object, group: str) -> dict[tuple[str, int], int]:
            out = {}
            for t, p in engine.streams():  # type: ignore[attr-defined]
                got = engine.committed(group, t, p)  # type: ignore[attr-defined]
                if got is not None:
                    out[(t, p)] = got[0]
            return out

        want = {(t, 0): 1 for i, t in enumerate(names(50)) if i % 3 == 0 and t != "t00003"}
        assert e.group_cursors("g") == every_stream(e, "g") == {**want, ("multi", 2): 1}
        assert other.group_cursors("g") == every_stream(other, "g") == {("t00000", 0): 1}
        assert e.group_cursors("empty") == {} and e.group_cursors("nope") == {}
