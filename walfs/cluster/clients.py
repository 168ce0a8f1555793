"""The Kafka clients one engine holds, and the calls that go to the cluster: making the
namespace's two topics (their configs), reading a partition's ends, producing one record
acknowledged by the cluster, and taking what a consumer has.

Every other module of walfs/cluster reaches Kafka through a `Clients`; confluent_kafka is
imported when an engine opens, not when walfs is imported.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from walfs.cluster.layout import MAX_CHUNK_BYTES, MAX_META_BYTES, Target
from walfs.errors import RecordTooLargeError, WalError, WalIOError

# Errors a just-made topic gives until the client's metadata shows it (librdkafka codes:
# _UNKNOWN_PARTITION, _UNKNOWN_TOPIC, UNKNOWN_TOPIC_OR_PART).
_NOT_SEEN_YET = frozenset({-190, -188, 3})


def take(consumer: Any, timeout: float, most: int = 1000) -> list[Any]:
    """What the consumer has, without waiting for `most` messages: librdkafka's batch
    consume waits out its whole timeout unless the batch fills, which would add the
    timeout to every append's replay. Waits for the first message only."""
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)]


@dataclass
class Clients:
    """An engine's handles on the cluster: the admin client, the producer (None when
    read-only), the replay's consumer (`tail`), the consumer that fetches older chunks
    (`reader`), and one for watermark queries (`query`: on the replay's consumer, a query
    from another thread while it consumes can block past its own timeout)."""

    path: str  # the target as given, for messages
    timeout: float
    admin: Any
    producer: Any
    tail: Any
    reader: Any
    query: Any
    query_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def connect(cls, path: str, t: Target, read_only: bool, timeout: float) -> tuple[Clients, Target]:
        """The clients, once the namespace's topics exist (made when missing, unless
        read-only), and the target with the namespace's real region count."""
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        common: dict[str, Any] = {
            "bootstrap.servers": t.bootstrap,
            "client.id": f"walfs-{t.namespace}",
            "logger": logging.getLogger("walfs.kafka_client"),  # librdkafka's log, not stderr
        }
        admin = AdminClient(common)
        t = ensure_topics(admin, t, path, read_only, timeout)
        producer = None
        if not read_only:
            producer = Producer(
                {
                    **common,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    # The meta topic's limit: a region snapshot can be larger than a log
                    # record (which append keeps to MAX_CHUNK_BYTES; the broker enforces it).
                    "message.max.bytes": MAX_META_BYTES + (1 << 20),
                    "delivery.timeout.ms": int(timeout * 1000),
                }
            )
        cons = {
            **common,
            "group.id": f"walfs-replay-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 5,
            "fetch.message.max.bytes": MAX_CHUNK_BYTES + (1 << 20),
            "isolation.level": "read_uncommitted",
        }
        tail = Consumer(cons)
        reader = Consumer({**cons, "group.id": f"walfs-read-{uuid.uuid4().hex}"})
        query = Consumer({**cons, "group.id": f"walfs-query-{uuid.uuid4().hex}"})
        return cls(path, timeout, admin, producer, tail, reader, query), t

    def ends(self, topic: str, parts: range) -> dict[int, tuple[int, int]]:
        """(low, high) watermark of each partition, retried while a leader moves."""
        from confluent_kafka import KafkaException, TopicPartition

        out = {}
        deadline = time.monotonic() + self.timeout
        for p in parts:
            while True:
                try:
                    with self.query_lock:
                        out[p] = self.query.get_watermark_offsets(
                            TopicPartition(topic, p), timeout=self.timeout
                        )
                    break
                except KafkaException as e:
                    # A leader moving (a new topic, a lost broker), or a topic that another
                    # engine has just made and this client's metadata does not show yet.
                    err = e.args[0]
                    passing = err.retriable() or "LEADER" in str(e) or err.code() in _NOT_SEEN_YET
                    if not passing or time.monotonic() > deadline:
                        raise WalIOError(5, f"{topic}[{p}]: cannot read its ends: {e}") from None
                    time.sleep(0.2)
        return out

    def produce(self, topic: str, partition: int, key: bytes, value: bytes | None) -> int:
        """One record, acknowledged by the cluster (acks=all); returns its Kafka offset."""
        assert self.producer is not None
        done = threading.Event()
        out: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            out.append(err if err is not None else msg.offset())
            done.set()

        while True:
            try:
                self.producer.produce(topic, value, key, partition=partition, on_delivery=delivered)
                break
            except BufferError:  # the producer's queue is full: let it drain
                time.sleep(0.005)
        if not done.wait(self.timeout + 5):
            raise WalIOError(5, f"{topic}[{partition}]: no acknowledgement within {self.timeout} s")
        if not isinstance(out[0], int):
            err = out[0]
            if "MSG_SIZE_TOO_LARGE" in str(err):
                raise RecordTooLargeError(f"{topic}: {err}")
            raise WalIOError(5, f"{topic}[{partition}]: not acknowledged: {err}")
        return int(out[0])

    def poll_loop(self, stop: threading.Event) -> None:
        """The producer's delivery callbacks (a thread of its own until `stop`)."""
        assert self.producer is not None
        while not stop.is_set():
            self.producer.poll(0.05)

    def delete_below(self, topic: str, partition: int, offset: int) -> None:
        """Kafka DeleteRecords: the partition's records below `offset`."""
        from confluent_kafka import TopicPartition

        fut = self.admin.delete_records([TopicPartition(topic, partition, offset)])
        for f in fut.values():
            f.result(self.timeout)

    def close(self) -> None:
        """The consumers (the producer is flushed by the engine's close first)."""
        self.tail.close()
        self.reader.close()
        self.query.close()


def ensure_topics(admin: Any, t: Target, path: str, read_only: bool, timeout: float) -> Target:
    """Makes the namespace's topics when missing and waits until their leaders are known;
    returns the target with the log topic's real partition count (the region count is
    fixed when the namespace is made: a stream's region must never change)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    md = admin.list_topics(timeout=timeout)
    brokers = len(md.brokers)
    rf = min(3, brokers)
    isr = "2" if rf >= 3 else "1"
    want = []
    if t.log_topic not in md.topics:
        want.append(
            NewTopic(
                t.log_topic,
                t.regions,
                rf,
                config={
                    "min.insync.replicas": isr,
                    "retention.ms": "-1",
                    "retention.bytes": "-1",
                    "cleanup.policy": "delete",
                    "message.timestamp.type": "LogAppendTime",
                    "max.message.bytes": str(MAX_CHUNK_BYTES + (1 << 20)),
                },
            )
        )
    if t.meta_topic not in md.topics:
        want.append(
            NewTopic(
                t.meta_topic,
                1,
                rf,
                config={
                    "min.insync.replicas": isr,
                    "cleanup.policy": "compact",
                    "max.message.bytes": str(MAX_META_BYTES),
                },
            )
        )
    if want and read_only:
        raise WalError(f"{path}: no walfs log in this namespace (a read-only engine creates none)")
    for name, fut in admin.create_topics(want).items() if want else []:
        try:
            fut.result(timeout)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):  # another engine made it meanwhile
                raise WalError(f"{path}: cannot create {name}: {e}") from None
    deadline = time.monotonic() + timeout
    while True:  # the new topics' leaders are known to every broker
        md = admin.list_topics(timeout=timeout)
        lt, mt = md.topics.get(t.log_topic), md.topics.get(t.meta_topic)
        if lt and mt and not lt.error and not mt.error and len(lt.partitions) and mt.partitions:
            if all(p.leader >= 0 for p in lt.partitions.values()):
                break
        if time.monotonic() > deadline:
            raise WalError(f"{path}: the cluster did not make the topics ready in {timeout} s")
        time.sleep(0.2)
    n = len(lt.partitions)
    if n != t.regions:
        # An explicit different ?regions= is refused, not silently used.
        if f"regions={t.regions}" in path:
            raise WalError(f"{path}: this namespace has {n} regions, not {t.regions}")
        t = Target(t.bootstrap, t.namespace, n)
    return t
