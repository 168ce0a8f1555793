"""What a topic costs: many topics of few records (issue 35). Prints JSON.

    python bench/engine/bench_topics.py [--quick] [--counts 1000,10000,100000] [--records 1,1000]
        [--block-size B] [--segment-size B] [--faces api,mount,kafka] [--kafka-max N]
        [--dir DIR] [--out FILE]

For each count of topics (one partition each) and each count of records per topic (16-byte
records), in a fresh data directory:

- api: a child process creates the topics through walfs.Wal (one append of the topic's
  records per topic: its create rate), closes; then `du` of the data directory (st_blocks
  of every file, and the apparent size), per topic; a child times the open after that clean
  close and reads its RSS before and after the open (the engine's memory per stream, the
  import excluded); a child appends one record to every topic and SIGKILLs itself, and a
  child times the open after that crash.
- mount: the daemon (`walfs mount -f --kafka-listen`) on an empty directory; every topic is
  made by os.open(O_APPEND|O_CREAT) + one write of its records' lines + close (what
  `echo >>` does, without a shell per topic); the daemon's RSS before and after (per
  stream), `ls` of the mount root (a child `ls`, and os.listdir), one Kafka Metadata
  request for every topic (confluent-kafka's AdminClient.list_topics) and one ListOffsets
  of every partition (AdminClient.list_offsets, latest; and kafka-python's end_offsets);
  `walfs groups describe` of a group with 10 cursors; the daemon restarted after a
  clean unmount and after SIGKILL: the time until the mount answers; `du` per topic.
- kafka: the baseline in the same run: a single-node KRaft Apache Kafka 4.1.1
  (tests/real_kafka.py), the same topics made with the admin API (batches of 1,000), the
  same records produced, `du` of its log directory per topic (after a flush: the JVM's page
  cache pages count once they are allocated), and the same Metadata and ListOffsets.
  Only up to --kafka-max topics (default 10,000). A broker here holds at most 12,500
  partitions (one open file each, and the hard RLIMIT_NOFILE is 20,000): past that the
  baseline is a cluster of brokers (one of them the KRaft controller), each topic with one
  replica. Records go out as one batch per topic, many topics per Produce request.

--block-size/--segment-size: the geometry of the new WALs (default: the engine's). On a
layout with one 10 MiB block per stream, 10,000 topics take 100 GB: run the larger counts
with a small --block-size to see what else scales. --quick (`make bench-quick-topics`): 1,000
and 10,000 topics of one record, Apache Kafka at 1,000 only, 64 KiB blocks unless
--block-size is given (a few minutes; the full run takes an hour and more).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchkit  # noqa: E402

sys.path.insert(0, str(benchkit.REPO / "tests"))
RECORD = b"0123456789abcde"  # 15 bytes + the mount's newline: 16
# Children run here (main sets it to the run's temporary directory): `python -c` and `-m` put
# their working directory first on sys.path, and the walfs under test is PYTHONPATH's.
CWD: dict[str, Path] = {}
KAFKA_PER_BROKER: dict[str, int] = {}  # --kafka-per-broker
MOUNT_MADE = 10_000  # topics made through the mount at most (mount())


def name(i: int) -> str:
    return f"t{i:06d}"


def du(d: Path) -> dict[str, int]:
    """st_blocks bytes and apparent bytes of every file under d, and their count."""
    blocks = size = files = 0
    for root, _, names in os.walk(d):
        for n in names:
            try:
                st = os.lstat(os.path.join(root, n))
            except FileNotFoundError:
                continue
            blocks += st.st_blocks * 512
            size += st.st_size
            files += 1
    return {"du_bytes": blocks, "apparent_bytes": size, "files": files}


def rss(pid: int) -> int:
    """VmRSS of pid, bytes: its private memory and the pages of files it maps (the
    segment files' pages the open or the appends touched: page cache, reclaimable)."""
    return memory(pid)["VmRSS"]


def anon(pid: int) -> int:
    """RssAnon of pid, bytes: its private memory alone (the heap: the streams' C and
    Python structures)."""
    return memory(pid)["RssAnon"]


def memory(pid: int) -> dict[str, int]:
    got = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "RssAnon:", "RssFile:")):
            got[line.split(":")[0]] = int(line.split()[1]) * 1024
    return got


# -- the API, in child processes (the import and each phase's memory apart) ----------------
CHILD = r"""
import json, os, signal, sys, time
def mem():
    got = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS:", "RssAnon:")):
            got[line.split(":")[0]] = int(line.split()[1]) * 1024
    return got["VmRSS"], got["RssAnon"]
import walfs
what, d, n, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
geometry = json.loads(sys.argv[5])
rec = sys.argv[6].encode()
names = [f"t{i:06d}" for i in range(n)]
out = {}
if what == "create":
    w = walfs.Wal(d, **geometry)
    batch = [rec] * r
    t0 = time.perf_counter()
    for t in names:
        w.append(t, rec if r == 1 else batch)
    w.sync()
    out["create_s"] = time.perf_counter() - t0
    w.close()
elif what == "open":
    import gc
    gc.collect()
    r0, a0 = mem()
    t0 = time.perf_counter()
    w = walfs.Wal(d)
    out["open_s"] = time.perf_counter() - t0
    out["core_open_s"] = w.engine.stats.open_seconds  # the C core's recovery, within open_s
    gc.collect()
    r1, a1 = mem()
    out["rss_open_bytes"], out["anon_open_bytes"] = r1 - r0, a1 - a0
    t0 = time.perf_counter()
    topics = w.topics()
    out["topics_s"] = time.perf_counter() - t0
    out["topics"] = len(topics)
    t0 = time.perf_counter()
    info = w.info(names[-1])
    out["info_one_s"] = time.perf_counter() - t0
    out["high_watermark_last"] = info.high_watermark
    t0 = time.perf_counter()
    w.close()
    out["close_s"] = time.perf_counter() - t0
elif what == "crash":
    w = walfs.Wal(d)
    for t in names:
        w.append(t, rec)
    w.sync()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
print(json.dumps(out))
"""


def child(what: str, d: Path, n: int, r: int, geometry: dict[str, int]) -> dict[str, Any]:
    got = subprocess.run(
        [sys.executable, "-c", CHILD, what, str(d), str(n), str(r), json.dumps(geometry), RECORD.decode()],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=CWD["cwd"],
    )
    if what == "crash":
        if got.returncode != -signal.SIGKILL:
            raise RuntimeError(f"crash child: rc {got.returncode}: {got.stderr[-2000:]}")
        return {}
    if got.returncode != 0:
        raise RuntimeError(f"{what} child failed: {got.stderr[-2000:]}")
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def api(base: Path, n: int, r: int, geometry: dict[str, int]) -> dict[str, Any]:
    d = base / f"api-{n}-{r}"
    shutil.rmtree(d, ignore_errors=True)
    out: dict[str, Any] = {}
    made = child("create", d, n, r, geometry)
    out["create_s"] = made["create_s"]
    out["creates_per_s"] = n / made["create_s"]
    out["disk"] = du(d)
    out["du_per_topic_bytes"] = out["disk"]["du_bytes"] / n
    out["du_per_topic_beyond_records_bytes"] = (out["disk"]["du_bytes"] - n * r * len(RECORD)) / n
    clean = child("open", d, n, r, geometry)
    if clean["topics"] != n:
        raise RuntimeError(f"{clean['topics']} topics after the open, not {n}")
    out["open_clean"] = clean
    out["rss_per_stream_bytes"] = clean["rss_open_bytes"] / n
    out["anon_per_stream_bytes"] = clean["anon_open_bytes"] / n
    child("crash", d, n, r, geometry)
    out["open_after_sigkill"] = child("open", d, n, r, geometry)
    shutil.rmtree(d, ignore_errors=True)
    return out


# -- the mount and its Kafka face ------------------------------------------------------------
def start_daemon(
    data: Path, mnt: Path, port: int, geometry: dict[str, int]
) -> tuple[subprocess.Popen[bytes], float]:
    cmd = [sys.executable, "-m", "walfs.cli.mount", str(data), str(mnt), "-f", "--allow-delete"]
    cmd += ["--kafka-listen", f"127.0.0.1:{port}", "--kafka-insecure-listen"]
    if "block_size" in geometry:
        cmd += ["--block-size", str(geometry["block_size"])]
    if "segment_size" in geometry:
        cmd += ["--segment-size", str(geometry["segment_size"])]
    t0 = time.perf_counter()
    log = data.parent / f"{data.name}.log"
    with open(log, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=CWD["cwd"])
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the mount exited: {log.read_text()[-2000:]}")
        if os.path.ismount(mnt):
            return proc, time.perf_counter() - t0
        time.sleep(0.01)
    raise RuntimeError("the mount did not come up")


def stop_daemon(proc: subprocess.Popen[bytes], mnt: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "walfs.cli.umount", str(mnt)], check=False, capture_output=True, cwd=CWD["cwd"]
    )
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def kafka_requests(bootstrap: str, n: int) -> dict[str, Any]:
    """One Metadata request for every topic, one ListOffsets of every partition (latest)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=60)  # the connection made
    t0 = time.perf_counter()
    md = admin.list_topics(timeout=600)
    meta_s = time.perf_counter() - t0
    ours = [t for t in md.topics if t.startswith("t")]
    if len(ours) != n:
        raise RuntimeError(f"Metadata listed {len(ours)} topics, not {n}")
    req = {TopicPartition(t, 0): OffsetSpec.latest() for t in ours}
    t0 = time.perf_counter()
    futs = admin.list_offsets(req, request_timeout=600)
    offsets = [f.result().offset for f in futs.values()]
    lo_s = time.perf_counter() - t0
    out: dict[str, Any] = {"metadata_s": meta_s, "list_offsets_s": lo_s, "offsets_sum": sum(offsets)}
    # The same ListOffsets by another client: librdkafka matches each partition of the
    # answer to its request by a linear search (its time grows with the square of the
    # count, against Apache Kafka too); kafka-python's end_offsets does not.
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, request_timeout_ms=600_000, connections_max_idle_ms=1_200_000
    )
    try:
        t0 = time.perf_counter()
        ends = consumer.end_offsets([KTopicPartition(t, 0) for t in ours], timeout_ms=600_000)
        out["list_offsets_kafka_python_s"] = time.perf_counter() - t0
        out["kafka_python_offsets_sum"] = sum(ends.values())
    except Exception as e:  # e.g. Apache Kafka not yet leading every partition
        out["list_offsets_kafka_python_error"] = f"{type(e).__name__}: {e}"
    finally:
        consumer.close()
    return out


def describe_group(mnt: Path, n: int) -> dict[str, Any]:
    """`walfs groups describe` through the mount of a group with cursors on 10 topics (made
    through the consumer files' xattr): what it costs is the group's, not the count's."""
    group = mnt / ".consumers" / "bench"
    group.mkdir()
    for i in range(0, n, max(1, n // 10)):
        os.setxattr(group / name(i), "user.walfs.committed_offset", b"1")
    t0 = time.perf_counter()
    got = subprocess.run(
        [sys.executable, "-m", "walfs.cli.groups", "describe", str(mnt), "bench", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=CWD["cwd"],
    )
    return {"describe_s": time.perf_counter() - t0, "describe_rows": len(got.stdout.splitlines())}


def free_port() -> int:
    from real_kafka import free_port as fp

    return fp()


def mount(base: Path, n: int, r: int, geometry: dict[str, int]) -> dict[str, Any]:
    """Past MOUNT_MADE topics, all but the last MOUNT_MADE are made through the API first (a
    mount makes a topic at ~100/s here: 100,000 would take 20 min and more); the daemon
    starts on them, and the last MOUNT_MADE are made through it (the create rate is
    theirs); memory per stream counts every stream the daemon holds."""
    data, mnt = base / f"mount-{n}-{r}", base / f"mnt-{n}-{r}"
    shutil.rmtree(data, ignore_errors=True)
    mnt.mkdir(exist_ok=True)
    port = free_port()
    out: dict[str, Any] = {}
    first = max(0, n - MOUNT_MADE)
    if first:
        out["made_through_api"] = first
        made = child("create", data, first, r, geometry)
        out["api_create_s"] = made["create_s"]
    started = "start_on_api_topics_s" if first else "start_empty_s"
    proc, out[started] = start_daemon(data, mnt, port, geometry)
    try:
        time.sleep(0.5)
        rss0, anon0 = rss(proc.pid), anon(proc.pid)
        payload = (RECORD + b"\n") * r
        t0 = time.perf_counter()
        for i in range(first, n):
            fd = os.open(mnt / name(i), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(fd, payload)
            os.close(fd)
        out["create_s"] = time.perf_counter() - t0
        out["creates_per_s"] = (n - first) / out["create_s"]
        if first:  # the daemon's memory with no stream: a daemon on an empty directory
            empty_dir, empty_mnt = base / "mount-empty", base / "mnt-empty"
            shutil.rmtree(empty_dir, ignore_errors=True)
            empty_mnt.mkdir(exist_ok=True)
            empty, _ = start_daemon(empty_dir, empty_mnt, free_port(), geometry)
            time.sleep(0.5)
            rss0, anon0 = rss(empty.pid), anon(empty.pid)
            stop_daemon(empty, empty_mnt)
            shutil.rmtree(empty_dir, ignore_errors=True)
        time.sleep(0.5)
        out["rss_empty_bytes"] = rss0
        out["rss_bytes"] = rss(proc.pid)
        out["rss_per_stream_bytes"] = (out["rss_bytes"] - rss0) / n
        out["anon_empty_bytes"], out["anon_bytes"] = anon0, anon(proc.pid)
        out["anon_per_stream_bytes"] = (out["anon_bytes"] - anon0) / n
        for k in ("first", "second"):
            t0 = time.perf_counter()
            subprocess.run(["ls", str(mnt)], check=True, stdout=subprocess.DEVNULL)
            out[f"ls_{k}_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        listed = os.listdir(mnt)
        out["listdir_s"] = time.perf_counter() - t0
        out["listdir_entries"] = len(listed)
        out["kafka"] = kafka_requests(f"127.0.0.1:{port}", n)
        out["groups"] = describe_group(mnt, n)
        out["rss_after_kafka_bytes"], out["anon_after_kafka_bytes"] = rss(proc.pid), anon(proc.pid)
        stop_daemon(proc, mnt)
        out["disk"] = du(data)
        out["du_per_topic_bytes"] = out["disk"]["du_bytes"] / n
        proc, out["start_after_clean_s"] = start_daemon(data, mnt, port, geometry)
        time.sleep(0.5)
        out["rss_restarted_bytes"], out["anon_restarted_bytes"] = rss(proc.pid), anon(proc.pid)
        fd = os.open(mnt / name(0), os.O_WRONLY | os.O_APPEND)
        os.write(fd, RECORD + b"\n")
        os.close(fd)
        proc.kill()
        proc.wait()
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=False, capture_output=True)
        proc, out["start_after_sigkill_s"] = start_daemon(data, mnt, port, geometry)
    finally:
        stop_daemon(proc, mnt)
        shutil.rmtree(data, ignore_errors=True)
    return out


# -- Apache Kafka, the baseline -------------------------------------------------------------
def kafka_nodes(n: int) -> int:
    """How many brokers hold `n` partitions here: a Kafka broker keeps a file open for every
    partition's active segment, and a process here may open at most the hard RLIMIT_NOFILE
    (20,000; no CAP_SYS_RESOURCE to raise it). So at most 5/8 of it per broker, the rest for
    the JVM, sockets and the files a broker opens at a time: 12,500 partitions."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:  # the JVM raises its soft limit to the hard one itself; so does this
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return -(-n // (KAFKA_PER_BROKER.get("most") or hard * 5 // 8))


def kafka_produce(admin: Any, n: int, r: int) -> None:
    """Every topic's r records as one batch, many topics per Produce request (acks=all), sent
    with kio (tests/kafka_wire.py) to each topic's leader: librdkafka looks a topic up in a
    list, so its producer's cost grows with the square of the topic count (156 s for 10,000
    topics of one record; 100,000 would take hours), and the broker's work is the same."""
    from kafka_wire import Wire

    from walfs.wire.record_batch import WireRecord, encode_records_for_test

    md = admin.list_topics(timeout=600)
    by_leader: dict[int, list[str]] = {}
    for i in range(n):
        by_leader.setdefault(md.topics[name(i)].partitions[0].leader, []).append(name(i))
    now = int(time.time() * 1000)
    batch = encode_records_for_test([WireRecord(None, RECORD, [], now) for _ in range(r)])
    per = max(1, min(1000, (4 << 20) // len(batch)))  # topics per request: at most ~4 MiB
    # A broker lists a topic a little before it leads it (NOT_LEADER_OR_FOLLOWER): those
    # are sent again, until every record is acknowledged or 10 minutes passed.
    deadline = time.monotonic() + 600
    for leader, names in by_leader.items():
        b = md.brokers[leader]
        with Wire(f"{b.host}:{b.port}") as w:
            todo = names
            while todo:
                again: list[str] = []
                for lo in range(0, len(todo), per):
                    again += produce_once(w, todo[lo : lo + per], batch)
                if again and time.monotonic() > deadline:
                    raise RuntimeError(f"Produce: {len(again)} topics still not led, e.g. {again[:3]}")
                if again:
                    time.sleep(0.5)
                todo = again


def produce_once(w: Any, names: list[str], batch: bytes) -> list[str]:
    """One Produce of `batch` to partition 0 of each topic; returns the topics whose leader
    was not ready; raises on any other error."""
    import datetime

    from kafka_wire import make

    topics = tuple(
        make(
            0,
            9,
            "TopicProduceData",
            name=t,
            partition_data=(make(0, 9, "PartitionProduceData", index=0, records=batch),),
        )
        for t in names
    )
    req = make(
        0,
        9,
        "ProduceRequest",
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=120),
        topic_data=topics,
    )
    resp = w.call(0, 9, req)
    answered = [(t.name, p.error_code) for t in resp.responses for p in t.partition_responses]
    if len(answered) != len(names):
        raise RuntimeError(f"Produce: {len(answered)} answers to {len(names)}")
    retry = [t for t, e in answered if e in (6, 3)]  # NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION
    bad = [(t, e) for t, e in answered if e not in (0, 6, 3)]
    if bad:
        raise RuntimeError(f"Produce answered errors: {bad[:3]}")
    return retry


def kafka(_base: Path, n: int, r: int, _geometry: dict[str, int]) -> dict[str, Any]:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    from real_kafka import KafkaCluster

    out: dict[str, Any] = {"brokers": kafka_nodes(n)}
    # One broker, or a cluster of brokers-only behind up to 3 KRaft controllers; every topic
    # has one replica, as a walfs topic has one copy.
    extra = {"auto.create.topics.enable": "false", "min.insync.replicas": "1"}
    nodes = out["brokers"]
    if nodes > 1:
        # One KRaft controller (a quorum of one never elects), and a broker's session outlives
        # the seconds a JVM waits for a core here: eight of them on two cores missed their
        # heartbeats, were fenced, and the quorum of three lost its leader (a first run).
        extra |= {"broker.session.timeout.ms": "120000", "broker.heartbeat.interval.ms": "5000"}
    with KafkaCluster(nodes, extra, heap="1g" if nodes == 1 else "2g", controllers=1) as k:
        admin = AdminClient({"bootstrap.servers": k.bootstrap, "socket.timeout.ms": 300_000})

        def logs() -> dict[str, int]:  # every node's log directory (not its console log)
            each = [du(k.dir / f"node{i + 1}") for i in range(nodes)]
            return {key: sum(d[key] for d in each) for key in each[0]}

        before = logs()
        t0 = time.perf_counter()
        for lo in range(0, n, 1000):
            futs = admin.create_topics(
                [NewTopic(name(i), 1, 1) for i in range(lo, min(n, lo + 1000))], request_timeout=600
            )
            for f in futs.values():
                try:
                    f.result()
                except KafkaException as e:  # librdkafka sent it again after a timeout
                    if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
            if lo % 10_000 == 0:
                print(f"  kafka: {lo + 1000} topics made, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        out["create_topics_s"] = time.perf_counter() - t0
        # The broker lists a topic once its metadata reached it, a little after the
        # controller answered CreateTopics.
        deadline = time.monotonic() + 3600
        while len([t for t in admin.list_topics(timeout=600).topics if t.startswith("t")]) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("Kafka does not list every topic made")
            time.sleep(0.5)
        out["topics_listed_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        kafka_produce(admin, n, r)
        out["produce_s"] = time.perf_counter() - t0
        out["creates_per_s"] = n / (out["create_topics_s"] + out["produce_s"])
        out["kafka"] = kafka_requests(k.bootstrap, n)
        subprocess.run(["sync"], check=False)
        out["rss_bytes"] = sum(rss(k.pid(i)) for i in range(nodes))
        out["anon_bytes"] = sum(anon(k.pid(i)) for i in range(nodes))
        out["disk"] = logs()
        out["disk_before_topics"] = before
        out["du_per_topic_bytes"] = (out["disk"]["du_bytes"] - before["du_bytes"]) / n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1000,10000,100000")
    ap.add_argument("--records", default="1,1000")
    ap.add_argument("--block-size", type=int, default=None)
    ap.add_argument("--segment-size", type=int, default=None)
    ap.add_argument("--faces", default="api,mount,kafka")
    ap.add_argument("--kafka-max", type=int, default=10_000)
    ap.add_argument(
        "--kafka-per-broker",
        type=int,
        default=0,
        help="partitions per broker (default: 5/8 of RLIMIT_NOFILE)",
    )
    ap.add_argument("--max-records", type=int, default=10_000_000, help="skip runs of more records in all")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--label", default=None, help="what tree this is (kept in the JSON)")
    ap.add_argument("--quick", action="store_true", help="1,000 and 10,000 topics")
    a = ap.parse_args()
    if a.quick:
        a.counts, a.records, a.kafka_max = "1000,10000", "1", 1000
        a.block_size = a.block_size or 64 << 10
    KAFKA_PER_BROKER["most"] = a.kafka_per_broker
    counts = [int(x) for x in a.counts.split(",")]
    records = [int(x) for x in a.records.split(",")]
    faces = a.faces.split(",")
    geometry = {k: v for k, v in (("block_size", a.block_size), ("segment_size", a.segment_size)) if v}
    base = Path(tempfile.mkdtemp(prefix="walfs-topics-", dir=a.dir))
    CWD["cwd"] = base
    runs: list[dict[str, Any]] = []
    result = {"bench": "topics", "run": benchkit.run_info(base), "label": a.label, "geometry": geometry}
    result["runs"] = runs
    try:
        for r in records:
            for n in counts:
                if n * r > a.max_records:
                    runs.append(
                        {"topics": n, "records_per_topic": r, "skipped": f"more than {a.max_records} records"}
                    )
                    continue
                row: dict[str, Any] = {"topics": n, "records_per_topic": r, "record_bytes": len(RECORD)}
                runs.append(row)
                todo: list[tuple[str, Callable[..., dict[str, Any]]]] = [("api", api), ("mount", mount)]
                if n <= a.kafka_max:
                    todo.append(("apache_kafka", kafka))
                for face, fn in todo:
                    if face.removeprefix("apache_") not in faces:
                        continue
                    print(f"{face} {n} x {r}", file=sys.stderr, flush=True)
                    try:
                        row[face] = fn(base, n, r, geometry)
                    except Exception as e:  # one face failing leaves the others' figures
                        row[face] = {"error": f"{type(e).__name__}: {e}"}
                        print(f"{face} {n} x {r}: {e}", file=sys.stderr, flush=True)
                    benchkit.write_json(result, a.out, stdout=False)  # what is done so far
    finally:
        shutil.rmtree(base, ignore_errors=True)
    benchkit.write_json(result, a.out)


if __name__ == "__main__":
    main()
