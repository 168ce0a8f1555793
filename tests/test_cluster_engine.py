"""The Kafka cluster engine on a real 3-node Apache Kafka 4.1.1 cluster (KRaft, replication
factor 3, min.insync.replicas=2), started by the fixture from Maven Central's jars: lost
brokers, lost walfs processes, several writers on one log, snapshots and the cleaner, and
foreign records in walfs's topics. The engine-neutral contract is checked by
tests/test_engine_conformance.py (its "kafka" kind)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_kafka import KafkaCluster

import walfs
from walfs.cluster.engine import KafkaEngine
from walfs.cluster.layout import region_of, stream_key_bytes
from walfs.engine.rules import appender, committed_offset
from walfs.errors import WalCorruptError

REPO = Path(__file__).resolve().parent.parent
BOUND_S = 120


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(3) as c:
        yield c


def target(c: KafkaCluster, regions: int = 4) -> str:
    return f"kafka://{c.bootstrap}/c{uuid.uuid4().hex[:10]}?regions={regions}"


_WRITER = """
import sys, walfs
w = walfs.Wal(sys.argv[1])
name, n = sys.argv[2], int(sys.argv[3])
for k in range(n):
    off = w.append("shared", b"%s %d" % (name.encode(), k))
    print(k, off, flush=True)  # acknowledged by the cluster before this line
w.close()
"""


def spawn_writer(t: str, name: str, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, t, name, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def collect(proc: subprocess.Popen[str], acked: list[tuple[int, int]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        k, off = line.split()
        acked.append((int(k), int(off)))


def test_a_killed_broker_loses_no_acknowledged_append(cluster: KafkaCluster) -> None:
    """Three writer processes append to one stream; the leader of its region is SIGKILLed
    meanwhile. Appends go on; afterwards every acknowledged record is there once, at the
    offset its writer was told, and each writer's records are in its order."""
    t = target(cluster)
    w = walfs.Wal(t)
    w.append("shared", b"first")
    region = region_of(stream_key_bytes(1, "shared", 0), w.engine.t.regions)  # type: ignore[attr-defined]
    md = w.engine.admin.list_topics(timeout=30)  # type: ignore[attr-defined]
    leader = md.topics[w.engine.t.log_topic].partitions[region].leader  # type: ignore[attr-defined]
    w.close()
    procs = {name: spawn_writer(t, name, 300) for name in ("a", "b", "c")}
    acked: dict[str, list[tuple[int, int]]] = {name: [] for name in procs}
    readers = [threading.Thread(target=collect, args=(p, acked[n])) for n, p in procs.items()]
    for r in readers:
        r.start()
    deadline = time.monotonic() + BOUND_S
    while sum(len(v) for v in acked.values()) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    cluster.kill(leader - 1)
    try:
        for p in procs.values():
            p.wait(timeout=BOUND_S * 2)
        for r in readers:
            r.join(BOUND_S)
        for name, p in procs.items():
            assert p.returncode == 0, p.stderr.read() if p.stderr else name
        w = walfs.Wal(t)
        got = w.read("shared", 0, max_records=10_000)
        assert got[0] == b"first" and len(got) == 1 + 3 * 300
        for name, pairs in acked.items():
            assert [k for k, _ in pairs] == list(range(300))
            for k, off in pairs:
                assert got[off] == b"%s %d" % (name.encode(), k)
        assert len(set(got)) == len(got)  # once each
        w.close()
    finally:
        cluster.restart(leader - 1)


def test_a_killed_walfs_process_continues_from_the_cluster(cluster: KafkaCluster) -> None:
    t = target(cluster)
    proc = spawn_writer(t, "k", 100_000)
    acked: list[tuple[int, int]] = []
    reader = threading.Thread(target=collect, args=(proc, acked))
    reader.start()
    deadline = time.monotonic() + BOUND_S
    while len(acked) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait(BOUND_S)
    reader.join(BOUND_S)
    assert len(acked) >= 200
    with walfs.Wal(t) as w:
        got = w.read("shared", 0, max_records=100_000)
        assert len(got) >= len(acked)  # the last append may have landed unacknowledged
        assert got == [b"k %d" % k for k in range(len(got))]
        assert w.append("shared", b"after") == len(got)


def test_two_engines_on_one_log_see_one_order(cluster: KafkaCluster) -> None:
    """Several mounts over one cluster: appends from both, one order per stream, and each
    sees the other's appends and consumer commits."""
    t = target(cluster)
    a, b = KafkaEngine(t), KafkaEngine(t)
    try:
        errors: list[BaseException] = []

        def write(e: KafkaEngine, name: bytes) -> None:
            try:
                app = appender(e, "log")
                for k in range(200):
                    app.append(b"%s%d" % (name, k))
            except BaseException as exc:
                errors.append(exc)

        ths = [threading.Thread(target=write, args=(a, b"a")), threading.Thread(target=write, args=(b, b"b"))]
        for th in ths:
            th.start()
        for th in ths:
            th.join(BOUND_S)
        assert not errors
        # Each engine waited for its own appends' replay; the other's last ones arrive
        # through its replay a moment later (bounded wait, not a timing check).
        deadline = time.monotonic() + BOUND_S
        while (a.info("log").high_watermark, b.info("log").high_watermark) != (400, 400):
            assert time.monotonic() < deadline, "the engines did not converge"
            time.sleep(0.05)
        buf, recs = bytearray(1 << 20), bytearray(40 * 400)
        va = [bytes(x) for x in _values(a, buf, recs)]
        vb = [bytes(x) for x in _values(b, buf, recs)]
        assert va == vb and sorted(va) == sorted(
            [b"a%d" % k for k in range(200)] + [b"b%d" % k for k in range(200)]
        )
        assert a.commit("billing", "log", 0, 123)
        deadline = time.monotonic() + 30
        while committed_offset(b, "billing", "log") != 123 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert committed_offset(b, "billing", "log") == 123 and "billing" in b.groups()
    finally:
        a.close()
        b.close()


def _values(e: KafkaEngine, buf: bytearray, recs: bytearray) -> list[memoryview]:
    n = e.read("log", 0, 0, buf, recs)
    words = memoryview(recs)[: n * 40].cast("Q").tolist()
    out = []
    for k in range(n):
        lens, pos = words[5 * k + 3], words[5 * k + 4]
        out.append(memoryview(buf)[pos + (lens & 0xFFFFFFFF) : pos + (lens & 0xFFFFFFFF) + (lens >> 32)])
    return out


def test_trims_reach_kafka_through_a_snapshot_and_opening_uses_it(cluster: KafkaCluster) -> None:
    t = target(cluster, regions=1)
    with walfs.Wal(t) as w:
        for k in range(20):
            w.append("t", [b"t%d-%d" % (k, i) for i in range(50)])
            w.append("u", [b"u%d" % k])
        w.trim("t", 500)
        w.trim("u", 20)
        eng = w.engine
        assert eng.reclaim() == 1  # type: ignore[attr-defined]
        from confluent_kafka import TopicPartition

        lo, _hi = eng._clients.query.get_watermark_offsets(TopicPartition(eng.t.log_topic, 0), timeout=30)  # type: ignore[attr-defined]
        assert lo > 0  # DeleteRecords ran below the first record still held
        before = (w.info("t").low_watermark, w.info("t").high_watermark, eng.info("t").low_byte)
    with walfs.Wal(t) as w:
        assert (w.info("t").low_watermark, w.info("t").high_watermark, w.engine.info("t").low_byte) == before
        assert w.read("t", 500, max_records=2) == [b"t10-0", b"t10-1"]
        assert w.engine.report()["snapshots"] == 1
        assert w.append("t", b"more") == 1000


def test_records_deleted_outside_walfs_are_reported(cluster: KafkaCluster) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    t = target(cluster, regions=1)
    with walfs.Wal(t) as w:
        w.append("t", [b"x"] * 10)
        w.append("t", [b"y"] * 10)
        log_topic = w.engine.t.log_topic  # type: ignore[attr-defined]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.delete_records([TopicPartition(log_topic, 0, 1)]).values():
        f.result(30)
    with pytest.raises(WalCorruptError, match="deleted outside walfs"):
        walfs.Wal(t)


def test_a_foreign_record_in_the_log_is_reported_not_applied(cluster: KafkaCluster) -> None:
    from confluent_kafka import Producer

    t = target(cluster, regions=1)
    with walfs.Wal(t) as w:
        w.append("t", b"ok")
        log_topic = w.engine.t.log_topic  # type: ignore[attr-defined]
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    bad = stream_key_bytes(1, "t", 0)
    p.produce(log_topic, b"D\x01\x00\x00\xff\xff\xff\xff", bad, partition=0)  # claims 2**32-1 records
    p.flush(30)
    with pytest.raises(WalCorruptError, match=r"claims 4294967295 records"):
        walfs.Wal(t)
