"""A consumer group over many topics (issue 35): the commits of one group at once
(CommitMany.commit_many, a Kafka OffsetCommit of every partition a consumer holds) write
the cursor files side by side and list the new ones in one change of the manifest; one by
one, the first commit of a group over N streams rewrote the manifest N times, each listing
every file (quadratic: 12 ms a commit at 3,000 streams, measured). Each entry keeps the
commit rule and its own error; SIGKILL in the middle loses nothing committed before and
leaves no damage; real Kafka clients commit and read back."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from conftest import PYTHON, REPO
from kafka_harness import listener

import walfs
from walfs.engine.capabilities import CommitMany, has
from walfs.engine.types import MAX_METADATA_BYTES
from walfs.errors import OffsetOutOfRangeError
from walfs.local.cursor_manifest import CursorManifest
from walfs.local.recovery_log import Heals

N = 2_000


def made(d: str, n: int) -> walfs.Wal:
    w = walfs.Wal(d, fsync="never")
    for i in range(n):
        w.append(f"t{i}", [b"a", b"b", b"c"])
    return w


def manifest_seq(d: str) -> int:
    """The manifest's sequence as a reader finds it: every change increments it (a journal
    frame, or a new base)."""
    m = CursorManifest(d, True, Heals(True))
    assert m.read() is not None
    return m.seq


def test_commit_many_keeps_the_rule_per_entry_and_lists_every_file_once(wal_dir):
    w = made(wal_dir, N)
    e = w.engine
    assert has(e, CommitMany)
    entries = [(f"t{i}", 0, 1 + i % 3, f"m{i}" if i % 2 else "") for i in range(N)]
    entries[7] = ("t7", 0, 4, "")  # past the end (3)
    entries[8] = ("t8", 0, 1, "x" * (MAX_METADATA_BYTES + 1))  # metadata too long
    entries[9] = ("t9", 3, 1, "")  # no such partition: the range check of an empty stream
    e.commit("g", "t0", 0, 0)  # the group's first cursor, one by one: the manifest exists
    seq = manifest_seq(wal_dir)
    out = e.commit_many("g", entries)
    assert manifest_seq(wal_dir) == seq + 1  # N - 4 new cursors, one manifest change
    assert isinstance(out[7], OffsetOutOfRangeError)
    assert isinstance(out[8], ValueError)
    assert isinstance(out[9], OffsetOutOfRangeError)
    assert all(r is True for k, r in enumerate(out) if k not in (7, 8, 9)), out[:12]
    assert e.info("t0").durable_watermark == 3  # a commit past the durable mark synced first
    for k, (topic, part, offset, metadata) in enumerate(entries):
        want = None if k in (7, 8, 9) else (offset, metadata)
        assert e.committed("g", topic, part) == want, (k, topic)
    listed = e.cursors.read_manifest()
    assert listed is not None and len(listed["g"]) == N - 3
    # advance_only: only the entries that move forward change.
    again = e.commit_many("g", [("t0", 0, 0, ""), ("t1", 0, 3, "")], advance_only=True)
    assert again == [False, True]
    assert e.committed("g", "t0") == (1, "") and e.committed("g", "t1") == (3, "")
    w.close()
    w = walfs.Wal(wal_dir, read_only=True)
    assert w.engine.committed("g", "t1") == (3, "")
    assert w.engine.committed("g", f"t{N - 1}") == entries[N - 1][2:]
    assert w.engine.check_cursors() == [] and w.engine.healed_copies() == []
    w.close()
    fsck = subprocess.run([PYTHON, "-m", "walfs", "fsck", wal_dir], capture_output=True, text=True, cwd=REPO)
    assert fsck.returncode == 0 and fsck.stdout.rstrip().endswith("clean"), fsck.stdout


CHILD = """
import sys, walfs
w = walfs.Wal(sys.argv[1], fsync="never")
e = w.engine
n = int(sys.argv[2])
print("ready", flush=True)
for rnd in range(1, 1000):
    e.commit_many("g", [(f"t{i}", 0, rnd % 3 + 1, f"r{rnd}") for i in range(n)])
    print(rnd, flush=True)
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_in_the_middle_of_commit_many_loses_nothing_committed(wal_dir, seed):
    n = 1_500
    made(wal_dir, n).close()
    rng = random.Random(seed)
    p = subprocess.Popen([PYTHON, "-c", CHILD, wal_dir, str(n)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(0.05, 1.5))
    p.send_signal(signal.SIGKILL)
    done = [int(x) for x in p.stdout.read().split()]
    p.wait()
    last = max(done, default=0)  # every cursor holds this round's commit, or the next one's
    w = walfs.Wal(wal_dir)
    e = w.engine
    for i in range(n):
        got = e.committed("g", f"t{i}")
        allowed = {None} if last == 0 else set()
        allowed |= {(r % 3 + 1, f"r{r}") for r in (last, last + 1) if r >= 1}
        assert got in allowed, (i, got, last)
    assert e.check_cursors() == []
    w.close()


def test_a_kafka_consumer_commits_every_partition_in_one_request(tmp_path: Path) -> None:
    """confluent-kafka (librdkafka) commits 600 partitions of 3 topics in one OffsetCommit,
    with one partition the broker does not have: that one alone answers
    UNKNOWN_TOPIC_OR_PARTITION; the group's committed offsets read back through the client
    and through the engine."""
    with listener(tmp_path) as lst:
        for t in ("a", "b", "c"):
            for p in range(200):
                lst.wal.append(t, [b"x"] * 3, partition=p)
        c = Consumer({"bootstrap.servers": lst.bootstrap, "group.id": "many", "enable.auto.commit": False})
        try:
            tps = [TopicPartition(t, p, 1 + (p % 3)) for t in ("a", "b", "c") for p in range(200)]
            with pytest.raises(KafkaException) as exc:  # librdkafka raises for the one bad partition
                c.commit(offsets=tps + [TopicPartition("a", 999, 1)], asynchronous=False)
            assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            got = c.committed([TopicPartition(tp.topic, tp.partition) for tp in tps], timeout=30)
            assert [g.offset for g in got] == [tp.offset for tp in tps]
        finally:
            c.close()
        for tp in tps[::37]:
            assert lst.wal.committed("many", tp.topic, tp.partition) == tp.offset
