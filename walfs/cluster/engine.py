"""KafkaEngine: walfs on an Apache Kafka cluster, behind the engine interface (issue 16).

    kafka://HOST:PORT[,HOST:PORT...]/NAMESPACE[?regions=N]

The local C core stays the embedded default; this engine is where walfs goes when one
machine is not enough. Kafka replicates; walfs adds no replication of its own.

Layout in the cluster, for namespace NS (after HoraeDB's WAL on Kafka, seeds/003):

- `walfs.NS.log`, R partitions ("regions", default 8). A stream (org, topic, partition)
  lives in region blake3(stream) mod R; many streams share a region, because walfs streams
  are cheap and Kafka partitions are not (each costs file handles, replication traffic and
  controller work on every broker). Every change to a stream is ONE Kafka record in its
  region, keyed by the stream: a batch of appended records, a create, a trim, a delete. A
  partition has one order, so every engine instance that replays a region (several mounts
  on several machines) applies the same changes in the same order: a record's walfs offset
  is assigned by that replay (its rank in its stream), never by the writer. An append
  returns once Kafka acknowledged it (acks=all, idempotent producer, the topic's
  min.insync.replicas) and this engine's replay has passed it.
- `walfs.NS.meta`, one partition, compacted: consumer cursors, consumer groups, per-topic
  settings, and region snapshots (the per-stream offset maps at a region position, so that
  opening replays only the log after the newest snapshot).

Record formats (little-endian; every length checked against the record before use; a
record that does not parse is reported with WalCorruptError naming region and offset):

    log key    u64 org | u32 partition | topic (UTF-8)
    log value  u8 op | u8 version (1) | u16 zero | body
               op "D" data:   u32 count | count x (u32 meta_len, u32 value_len) | bodies
               op "C" create, "X" delete: no body
               op "T" trim:   u64 before_offset
    meta key   b"c" group \\0 stream-key  -> u64 offset | u8 advance_only | metadata (a cursor)
               b"G" u64 org | group        -> b""                            (a group of an org)
               b"g" group                  -> b""          (a group of every org: older releases)
               b"s" u64 org | topic        -> JSON overrides                (settings)
               b"n" u32 region             -> zlib(JSON snapshot)           (a snapshot)

Trims mark first; a cleaner (the background thread) later writes a snapshot of the region
and only then deletes the region's records below the first one any stream still holds
(Kafka DeleteRecords). Deletion of a topic is a mark ("X") the same way. Where this engine
differs from the local one is listed in docs/cluster.md.
"""

from __future__ import annotations

import bisect
import copy
import json
import logging
import struct
import sys
import threading
import time
import uuid
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any
from urllib.parse import parse_qs, urlparse

import blake3

from walfs.common.metrics import WalStats
from walfs.engine.names import check_partition, topic_bytes, topic_hash
from walfs.engine.rules import committed_offset
from walfs.engine.settings import Policy, policy_of, updated
from walfs.engine.settings import now_ms as retention_now_ms
from walfs.engine.types import (
    MAX_METADATA_BYTES,
    NO_GID,
    REC_SIZE,
    Change,
    StreamInfo,
    VerifyProgress,
)
from walfs.engine.watchers import Watchers
from walfs.errors import (
    BufferTooSmallError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    RecordTooLargeError,
    WalClosedError,
    WalCorruptError,
    WalError,
    WalIOError,
)

log = logging.getLogger("walfs")

DEFAULT_REGIONS = 8
VERSION = 1
MAX_CHUNK_BYTES = 8 << 20  # one Kafka record; larger appends are split (see append)
_HEAD = struct.Struct("<BBH")
_DATA = struct.Struct("<I")
_LENS = struct.Struct("<II")
_U64 = struct.Struct("<Q")


# Errors a just-made topic gives until the client's metadata shows it (librdkafka codes:
# _UNKNOWN_PARTITION, _UNKNOWN_TOPIC, UNKNOWN_TOPIC_OR_PART).
_NOT_SEEN_YET = frozenset({-190, -188, 3})


@dataclass
class _Shared:
    """The engine's scalars that change after open, in one object shared by its for_org
    views (everything else a view shares by reference)."""

    closed: bool = False
    failed: BaseException | None = None
    meta_pos: int = 0  # the next meta topic offset the replay applies


_KEY = struct.Struct("<QI")
_MASK64 = 2**64 - 1
CACHE_BYTES = 64 << 20
# The cleaner snapshots a region once its replay has passed this many Kafka records since
# the region's newest snapshot, so opening replays at most about this many per region
# (plus what came in since the last cleaner run); a snapshot costs O(chunks the region
# holds), so not after every record (docs/cluster.md, "Snapshots and the cleaner").
SNAPSHOT_EVERY = 10_000


@dataclass(frozen=True)
class Target:
    bootstrap: str
    namespace: str
    regions: int

    @property
    def log_topic(self) -> str:
        return f"walfs.{self.namespace}.log"

    @property
    def meta_topic(self) -> str:
        return f"walfs.{self.namespace}.meta"


def parse_target(target: str) -> Target:
    """kafka://host:port[,host:port]/NAMESPACE[?regions=N] -> Target (ValueError if not)."""
    u = urlparse(target)
    ns = u.path.strip("/")
    if u.scheme != "kafka" or not u.netloc or not ns:
        raise ValueError(f"{target!r}: expected kafka://HOST:PORT[,HOST:PORT...]/NAMESPACE")
    if not all(c.isalnum() or c in "-_" for c in ns) or len(ns) > 100:
        raise ValueError(f"{target!r}: the namespace may hold letters, digits, '-' and '_' only")
    q = parse_qs(u.query)
    regions = int(q.get("regions", [str(DEFAULT_REGIONS)])[0])
    if not 1 <= regions <= 1024:
        raise ValueError(f"{target!r}: regions must be in 1..1024")
    return Target(u.netloc, ns, regions)


def stream_key_bytes(org: int, topic: str, partition: int) -> bytes:
    return _KEY.pack(org, partition) + topic_bytes(topic)


def region_of(key: bytes, regions: int) -> int:
    return int.from_bytes(blake3.blake3(key).digest(length=8), "little") % regions


def take(consumer: Any, timeout: float, most: int = 1000) -> list[Any]:
    """What the consumer has, without waiting for `most` messages: librdkafka's batch
    consume waits out its whole timeout unless the batch fills, which would add the
    timeout to every append's replay. Waits for the first message only."""
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)]


@dataclass
class Chunk:
    """One data record of the log, parsed: its records' lengths and bodies."""

    lens: list[tuple[int, int]]  # (meta_len, value_len) per record
    starts: list[int]  # where each body starts in data, then where the last one ends
    data: memoryview
    ts: int
    words: array  # meta_len | value_len << 32 per record (read()'s descriptor word)

    @property
    def nbytes(self) -> int:
        return len(self.data)


def parse_data(value: bytes, where: str) -> tuple[array, int]:
    """(the u32 (meta_len, value_len) pairs, where the bodies start) of an op "D" value;
    WalCorruptError if it lies."""
    if len(value) < _HEAD.size + _DATA.size:
        raise WalCorruptError(f"{where}: data record of {len(value)} bytes is too short")
    (count,) = _DATA.unpack_from(value, _HEAD.size)
    table = _HEAD.size + _DATA.size
    first = table + count * _LENS.size
    if count == 0 or first > len(value):
        raise WalCorruptError(f"{where}: data record claims {count} records in {len(value)} bytes")
    pairs = array("I")
    pairs.frombytes(value[table:first])
    if sys.byteorder == "big":
        pairs.byteswap()
    if first + sum(pairs) != len(value):
        raise WalCorruptError(f"{where}: data record lengths do not add up to its {len(value)} bytes")
    return pairs, first


def to_chunk(value: bytes, ts: int, where: str) -> Chunk:
    pairs, pos = parse_data(value, where)
    metas, values = pairs[0::2], pairs[1::2]
    starts = list(accumulate((m + v for m, v in zip(metas, values, strict=True)), initial=pos))
    if sys.byteorder == "little":  # the (meta_len, value_len) u32 pairs read as u64 words
        words = array("Q")
        words.frombytes(pairs.tobytes())
    else:
        words = array("Q", (m | v << 32 for m, v in zip(metas, values, strict=True)))
    return Chunk(list(zip(metas, values, strict=True)), starts, memoryview(value), ts, words)


@dataclass
class StreamState:
    """One stream as replayed: its marks, and one entry per data record (chunk) of the log
    that holds records at or after the low watermark."""

    org: int
    topic: str
    partition: int
    region: int
    low: int = 0
    next: int = 0
    low_byte: int = 0
    next_byte: int = 0
    first: array = field(default_factory=lambda: array("q"))  # stream offset of the chunk's 1st record
    koff: array = field(default_factory=lambda: array("q"))  # the chunk's Kafka offset
    byte: array = field(default_factory=lambda: array("q"))  # view position of its 1st record
    ts: array = field(default_factory=lambda: array("q"))  # its append time (LogAppendTime)

    def chunk_index(self, offset: int) -> int:
        return bisect.bisect_right(self.first, offset) - 1

    def to_json(self) -> dict[str, Any]:
        return {
            "org": self.org,
            "topic": self.topic,
            "partition": self.partition,
            "marks": [self.low, self.next, self.low_byte, self.next_byte],
            "chunks": [list(self.first), list(self.koff), list(self.byte), list(self.ts)],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], region: int) -> StreamState:
        s = cls(int(d["org"]), str(d["topic"]), int(d["partition"]), region)
        s.low, s.next, s.low_byte, s.next_byte = (int(x) for x in d["marks"])
        f, k, b, t = d["chunks"]
        s.first, s.koff, s.byte, s.ts = array("q", f), array("q", k), array("q", b), array("q", t)
        if not (len(s.first) == len(s.koff) == len(s.byte) == len(s.ts)) or not (
            0 <= s.low <= s.next and 0 <= s.low_byte <= s.next_byte
        ):
            raise ValueError("inconsistent marks or chunk lists")
        return s


class KafkaEngine:
    """A walfs.engine.contract.LogEngine on a Kafka cluster (see that module for the contract of
    each call, and this module's docstring for the layout)."""

    def __init__(
        self,
        target: str,
        fsync: str = "interval",
        org_id: int = 1,
        *,
        read_only: bool = False,
        reclaim_interval_s: float = 10.0,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        retention_groups: Sequence[str] = (),
        timeout_s: float = 60.0,
        use_snapshots: bool = True,
        snapshot_every: int = SNAPSHOT_EVERY,
        **_local_only: Any,
    ) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        if not isinstance(org_id, int) or not 0 <= org_id < 2**63:
            raise ValueError(f"org_id must be an int in 0..2**63-1, not {org_id!r}")
        self.t = parse_target(target)
        self.path = target
        self.org_id = org_id
        self.read_only = read_only
        self.fsync = fsync  # durability is Kafka's acks=all + min.insync.replicas (docs/cluster.md)
        self.stats = WalStats()
        self.timeout = timeout_s
        self.retention_default = Policy(retention_ms, retention_bytes, tuple(retention_groups))
        # use_snapshots=False replays every region from its first record (to measure what
        # snapshots save, or to rebuild from the log alone); refused once the cleaner has
        # deleted records that only a snapshot still describes.
        self.use_snapshots = use_snapshots
        self.snapshot_every = snapshot_every
        self._live = _Shared()
        self._owner: KafkaEngine | None = None  # set on for_org views: the engine that closes
        self._lock = threading.Lock()
        self._applied = threading.Condition(self._lock)
        self._watchers = Watchers()
        self._streams: dict[bytes, StreamState] = {}
        self._by_name: dict[tuple[int, str], dict[int, bytes]] = {}
        self._pos: dict[int, int] = {}  # region -> next Kafka offset to apply
        self._cursors: dict[str, dict[bytes, int]] = {}
        self._group_orgs: dict[str, set[int]] = {}  # groups made by create_group (-1: every org)
        self._cursor_meta: dict[tuple[str, bytes], str] = {}
        self._settings: dict[tuple[int, str], dict[str, Any]] = {}
        # region -> its newest snapshot as stored (zlib(JSON)); decoded when used, so an
        # open that meets many older snapshots in the meta topic parses only the last.
        self._snapshots: dict[int, bytes] = {}
        self._snapshot_upto: dict[int, int] = {}  # region -> position of its newest snapshot
        self._open_replayed = 0
        self._assigned: OrderedDict[tuple[int, int], int] = OrderedDict()  # (region, koff) -> offset
        self._cache: OrderedDict[tuple[int, int], Chunk] = OrderedDict()
        self._cache_bytes = 0
        self._cache_lock = threading.Lock()
        self._read_lock = threading.Lock()
        common: dict[str, Any] = {
            "bootstrap.servers": self.t.bootstrap,
            "client.id": f"walfs-{self.t.namespace}",
            "logger": logging.getLogger("walfs.kafka_client"),  # librdkafka's log, not stderr
        }
        opened = time.monotonic()
        self.admin = AdminClient(common)
        self._ensure_topics()
        self.producer = None
        if not read_only:
            self.producer = Producer(
                {
                    **common,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    # The meta topic's limit (64 MiB): a region snapshot can be larger than a
                    # log record (which append keeps to MAX_CHUNK_BYTES; the broker enforces it).
                    "message.max.bytes": (64 << 20) + (1 << 20),
                    "delivery.timeout.ms": int(timeout_s * 1000),
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
        self._tail = Consumer(cons)
        self._reader = Consumer({**cons, "group.id": f"walfs-read-{uuid.uuid4().hex}"})
        # Watermark queries get their own handle: on the replay's consumer, a query from
        # another thread while it consumes can block past its own timeout.
        self._query = Consumer({**cons, "group.id": f"walfs-query-{uuid.uuid4().hex}"})
        self._query_lock = threading.Lock()
        self._stop = threading.Event()
        self._recover()
        self.stats.open_seconds = time.monotonic() - opened
        self._threads = [threading.Thread(target=self._tail_loop, name="walfs-kafka-tail", daemon=True)]
        if self.producer is not None:
            self._threads.append(
                threading.Thread(target=self._poll_loop, name="walfs-kafka-poll", daemon=True)
            )
            self._threads.append(
                threading.Thread(
                    target=self._background, args=(reclaim_interval_s,), name="walfs-kafka-bg", daemon=True
                )
            )
        for th in self._threads:
            th.start()

    # -- set-up and recovery ----------------------------------------------------------
    def _ensure_topics(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        md = self.admin.list_topics(timeout=self.timeout)
        brokers = len(md.brokers)
        rf = min(3, brokers)
        isr = "2" if rf >= 3 else "1"
        want = []
        if self.t.log_topic not in md.topics:
            want.append(
                NewTopic(
                    self.t.log_topic,
                    self.t.regions,
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
        if self.t.meta_topic not in md.topics:
            want.append(
                NewTopic(
                    self.t.meta_topic,
                    1,
                    rf,
                    config={
                        "min.insync.replicas": isr,
                        "cleanup.policy": "compact",
                        "max.message.bytes": str(64 << 20),
                    },
                )
            )
        if want and self.read_only:
            raise WalError(f"{self.path}: no walfs log in this namespace (a read-only engine creates none)")
        for t, fut in self.admin.create_topics(want).items() if want else []:
            try:
                fut.result(self.timeout)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):  # another engine made it meanwhile
                    raise WalError(f"{self.path}: cannot create {t}: {e}") from None
        deadline = time.monotonic() + self.timeout
        while True:  # the new topics' leaders are known to every broker
            md = self.admin.list_topics(timeout=self.timeout)
            lt, mt = md.topics.get(self.t.log_topic), md.topics.get(self.t.meta_topic)
            if lt and mt and not lt.error and not mt.error and len(lt.partitions) and mt.partitions:
                if all(p.leader >= 0 for p in lt.partitions.values()):
                    break
            if time.monotonic() > deadline:
                raise WalError(f"{self.path}: the cluster did not make the topics ready in {self.timeout} s")
            time.sleep(0.2)
        n = len(lt.partitions)
        if n != self.t.regions:
            # The region count is fixed when the namespace is made: a stream's region must
            # never change. An explicit different ?regions= is refused, not silently used.
            if f"regions={self.t.regions}" in self.path:
                raise WalError(f"{self.path}: this namespace has {n} regions, not {self.t.regions}")
            self.t = Target(self.t.bootstrap, self.t.namespace, n)

    def _ends(self, topic: str, parts: range) -> dict[int, tuple[int, int]]:
        from confluent_kafka import KafkaException, TopicPartition

        out = {}
        deadline = time.monotonic() + self.timeout
        for p in parts:
            while True:
                try:
                    with self._query_lock:
                        out[p] = self._query.get_watermark_offsets(
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

    def _recover(self) -> None:
        """Meta first (cursors, settings, snapshots), then each region from its newest
        snapshot on; returns when everything the cluster had acknowledged at open is
        applied."""
        from confluent_kafka import TopicPartition

        meta_lo, meta_hi = self._ends(self.t.meta_topic, range(1))[0]
        ends = self._ends(self.t.log_topic, range(self.t.regions))
        self._live.meta_pos = meta_lo
        self._tail.assign([TopicPartition(self.t.meta_topic, 0, meta_lo)])
        self._drain({("m", 0): meta_hi})
        assigns = [TopicPartition(self.t.meta_topic, 0, self._live.meta_pos)]
        for r in range(self.t.regions):
            lo, _hi = ends[r]
            blob = self._snapshots.get(r) if self.use_snapshots else None
            start = 0
            if blob is not None:
                try:
                    snap = json.loads(zlib.decompress(blob))
                    start = int(snap["upto"])
                    self._snapshot_upto[r] = start
                    for d in snap["streams"]:
                        s = StreamState.from_json(d, r)
                        key = stream_key_bytes(s.org, s.topic, s.partition)
                        self._add_stream(key, s)
                except (KeyError, TypeError, ValueError, zlib.error) as e:
                    raise WalCorruptError(
                        f"{self.t.meta_topic}: snapshot of region {r} unreadable: {e}"
                    ) from None
            if lo > start and not self.use_snapshots:
                raise WalError(
                    f"{self.t.log_topic}[{r}] starts at {lo}: the cleaner deleted records below it that "
                    f"only the region's snapshot describes; open with snapshots (use_snapshots=True)"
                )
            if lo > start:
                raise WalCorruptError(
                    f"{self.t.log_topic}[{r}] starts at {lo}, but the newest snapshot covers only up "
                    f"to {start}: records between were deleted outside walfs; nothing was repaired"
                )
            self._pos[r] = start
            assigns.append(TopicPartition(self.t.log_topic, r, start))
        self._tail.assign(assigns)
        self._open_replayed = sum(max(0, ends[r][1] - self._pos[r]) for r in range(self.t.regions))
        self._drain({("l", r): ends[r][1] for r in range(self.t.regions)})

    def _drain(self, until: dict[tuple[str, int], int]) -> None:
        deadline = time.monotonic() + max(self.timeout, 300)
        while True:
            pending = {k: v for k, v in until.items() if self._position(k) < v}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise WalError(f"{self.path}: replay did not reach the cluster's end in time ({pending})")
            self._apply_batch(take(self._tail, 0.5))

    def _position(self, k: tuple[str, int]) -> int:
        return self._live.meta_pos if k[0] == "m" else self._pos.get(k[1], 0)

    # -- the replay (one thread after open; the open itself before) -------------------------
    def _tail_loop(self) -> None:
        while not self._stop.is_set():
            try:
                msgs = take(self._tail, 0.1)
                if msgs:
                    self._apply_batch(msgs)
            except WalCorruptError as e:
                log.error("%s", e)
                self._live.failed = e
                with self._applied:
                    self._applied.notify_all()
                return
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("walfs kafka replay failed; retrying")
                time.sleep(0.5)

    def _apply_batch(self, msgs: list[Any]) -> None:
        changes: list[Change] = []
        with self._applied:
            for m in msgs:
                if m.error():
                    err = m.error()
                    if err.fatal():
                        raise WalError(f"{self.path}: {err}")
                    continue
                if m.topic() == self.t.meta_topic:
                    self._apply_meta(m)
                    self._live.meta_pos = m.offset() + 1
                else:
                    r = m.partition()
                    if m.offset() < self._pos.get(r, 0):
                        continue  # seen already (a snapshot covered it)
                    self._apply_log(r, m, changes)
                    self._pos[r] = m.offset() + 1
            self._applied.notify_all()
        for c in changes:
            self._notify(c)

    def _apply_meta(self, m: Any) -> None:
        key, value = m.key() or b"", m.value()
        kind, rest = key[:1], key[1:]
        where = f"{self.t.meta_topic}@{m.offset()}"
        if kind == b"c":
            group, _, skey = rest.partition(b"\0")
            g = group.decode("utf-8", "replace")
            if value is None:
                self._cursors.get(g, {}).pop(skey, None)
                return
            if not 9 <= len(value) <= 9 + MAX_METADATA_BYTES:
                raise WalCorruptError(f"{where}: cursor value of {len(value)} bytes")
            (offset,) = _U64.unpack_from(value)
            cur = self._cursors.setdefault(g, {})
            if value[8] and cur.get(skey, -1) >= offset:
                return
            cur[skey] = offset
            self._cursor_meta[(g, skey)] = value[9:].decode("utf-8", "replace")
        elif kind in (b"g", b"G"):
            if kind == b"G" and len(rest) < 8:
                raise WalCorruptError(f"{where}: group key too short")
            org = int.from_bytes(rest[:8], "little") if kind == b"G" else -1
            g = (rest[8:] if kind == b"G" else rest).decode("utf-8", "replace")
            if value is None:
                self._group_orgs.get(g, set()).discard(org)
                if not self._group_orgs.get(g, True):
                    del self._group_orgs[g]
            else:
                self._group_orgs.setdefault(g, set()).add(org)
        elif kind == b"s":
            if len(rest) < 8:
                raise WalCorruptError(f"{where}: settings key too short")
            org = int.from_bytes(rest[:8], "little")
            topic = rest[8:].decode("utf-8", "replace")
            if value is None:
                self._settings.pop((org, topic), None)
            else:
                try:
                    self._settings[(org, topic)] = dict(json.loads(value))
                except ValueError as e:
                    raise WalCorruptError(f"{where}: settings unreadable: {e}") from None
        elif kind == b"n":
            if len(rest) != 4 or value is None:
                return
            r = int.from_bytes(rest, "little")
            if r < self.t.regions:  # checked when the open decodes it (_recover)
                self._snapshots[r] = value
        else:
            raise WalCorruptError(f"{where}: unknown meta record {key[:16]!r}")

    def _apply_log(self, r: int, m: Any, changes: list[Change]) -> None:
        key, value = m.key(), m.value()
        where = f"{self.t.log_topic}[{r}]@{m.offset()}"
        if key is None or len(key) <= _KEY.size or value is None or len(value) < _HEAD.size:
            raise WalCorruptError(f"{where}: not a walfs record (key or value missing or short)")
        op, version, _zero = _HEAD.unpack_from(value)
        if version != VERSION:
            raise WalCorruptError(f"{where}: record version {version}, this walfs reads {VERSION}")
        org, partition = _KEY.unpack_from(key)
        try:
            topic = key[_KEY.size :].decode("utf-8")
        except UnicodeDecodeError:
            raise WalCorruptError(f"{where}: topic name is not UTF-8") from None
        s = self._streams.get(key)
        if op == ord("X"):
            if s is not None:
                self._drop_stream(key, s)
                for cur in self._cursors.values():
                    cur.pop(key, None)
                changes.append(Change("delete", topic, partition, org))
            return
        if s is None:
            s = StreamState(org, topic, partition, r)
            self._add_stream(key, s)
            changes.append(Change("create", topic, partition, org))
        if op == ord("C"):
            return
        if op == ord("T"):
            if len(value) != _HEAD.size + _U64.size:
                raise WalCorruptError(f"{where}: trim record of {len(value)} bytes")
            (before,) = _U64.unpack_from(value, _HEAD.size)
            self._trim_state(s, min(before, s.next))
            changes.append(Change("trim", topic, partition, org))
            return
        if op != ord("D"):
            raise WalCorruptError(f"{where}: unknown op {op}")
        ts = m.timestamp()[1]
        chunk = to_chunk(value, ts, where)
        s.first.append(s.next)
        s.koff.append(m.offset())
        s.byte.append(s.next_byte)
        s.ts.append(ts)
        self._assigned[(r, m.offset())] = s.next
        if len(self._assigned) > 65536:
            self._assigned.popitem(last=False)
        s.next += len(chunk.lens)
        s.next_byte += sum(v for _m, v in chunk.lens) + len(chunk.lens)
        self._cache_put((r, m.offset()), chunk)
        changes.append(Change("append", topic, partition, org))

    def _add_stream(self, key: bytes, s: StreamState) -> None:
        self._streams[key] = s
        self._by_name.setdefault((s.org, s.topic), {})[s.partition] = key

    def _drop_stream(self, key: bytes, s: StreamState) -> None:
        del self._streams[key]
        parts = self._by_name.get((s.org, s.topic), {})
        parts.pop(s.partition, None)
        if not parts:
            self._by_name.pop((s.org, s.topic), None)

    def _trim_state(self, s: StreamState, before: int) -> None:
        if before <= s.low:
            return
        if before == s.next:
            low_byte = s.next_byte
        else:
            i = s.chunk_index(before)
            chunk = self._chunk(s.region, s.koff[i])
            low_byte = s.byte[i] + sum(v + 1 for _m, v in chunk.lens[: before - s.first[i]])
        keep = max(0, s.chunk_index(before)) if before < s.next else len(s.first)
        del s.first[:keep], s.koff[:keep], s.byte[:keep], s.ts[:keep]
        s.low, s.low_byte = before, low_byte

    # -- chunk bodies: a cache of recent ones, a reader for older ones ------------------------
    def _cache_put(self, k: tuple[int, int], chunk: Chunk) -> None:
        with self._cache_lock:
            if k in self._cache:
                return
            self._cache[k] = chunk
            self._cache_bytes += chunk.nbytes
            while self._cache_bytes > CACHE_BYTES and len(self._cache) > 1:
                _k, old = self._cache.popitem(last=False)
                self._cache_bytes -= old.nbytes

    def _cache_get(self, k: tuple[int, int]) -> Chunk | None:
        with self._cache_lock:
            c = self._cache.get(k)
            if c is not None:
                self._cache.move_to_end(k)
            return c

    def _chunk(self, region: int, koff: int) -> Chunk:
        c = self._cache_get((region, koff))
        if c is not None:
            return c
        from confluent_kafka import TopicPartition

        with self._read_lock:
            c = self._cache_get((region, koff))
            if c is not None:
                return c
            self._reader.assign([TopicPartition(self.t.log_topic, region, koff)])
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                for m in take(self._reader, 0.5):
                    value, at = m.value(), m.offset()
                    if m.error() or value is None or at is None or len(value) < _HEAD.size:
                        continue
                    if value[0] == ord("D"):
                        got = to_chunk(value, m.timestamp()[1], f"{self.t.log_topic}[{region}]@{at}")
                        self._cache_put((region, at), got)
                        if at == koff:
                            c = got
                if c is not None:
                    return c
            raise WalIOError(5, f"{self.t.log_topic}[{region}]@{koff}: not fetched within {self.timeout} s")

    # -- lifetime -------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._live.closed

    @property
    def failed(self) -> bool:
        return self._live.failed is not None

    def close(self) -> None:
        if self._live.closed or self._owner is not None:  # a view is closed by its owner
            return
        try:
            if self.producer is not None:
                self.producer.flush(self.timeout)
        finally:
            self._live.closed = True
            self._stop.set()
            for th in self._threads:
                th.join(timeout=30)
            self._tail.close()
            self._reader.close()
            self._query.close()
            with self._applied:
                self._applied.notify_all()
            self._notify(Change("close", "", -1))

    def _check_open(self, write: bool = False) -> None:
        if self._live.closed:
            raise WalClosedError(f"{self.path} is closed")
        if self._live.failed is not None:
            raise WalError(f"{self.path}: the replay stopped: {self._live.failed}")
        if write and self.producer is None:
            raise ReadOnlyError(f"{self.path} is open read-only")

    # -- producing ------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        assert self.producer is not None
        while not self._stop.is_set():
            self.producer.poll(0.05)

    def _produce(self, topic: str, partition: int, key: bytes, value: bytes | None) -> int:
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

    def _wait_applied(self, region: int, koff: int) -> None:
        deadline = time.monotonic() + self.timeout
        with self._applied:
            while self._pos.get(region, 0) <= koff:
                if self._live.failed is not None:
                    raise WalError(f"{self.path}: the replay stopped: {self._live.failed}")
                left = deadline - time.monotonic()
                if left <= 0 or self._live.closed:
                    raise WalIOError(5, f"record {region}@{koff} was acknowledged but not replayed in time")
                self._applied.wait(left)

    def _wait_meta(self, moff: int) -> None:
        deadline = time.monotonic() + self.timeout
        with self._applied:
            while self._live.meta_pos <= moff:
                left = deadline - time.monotonic()
                if left <= 0 or self._live.closed:
                    raise WalIOError(5, f"meta record {moff} was acknowledged but not replayed in time")
                self._applied.wait(left)

    def _op(self, topic: str, partition: int, op: bytes, body: bytes = b"") -> tuple[bytes, int, int]:
        key = stream_key_bytes(self.org_id, topic, check_partition(partition))
        r = region_of(key, self.t.regions)
        koff = self._produce(self.t.log_topic, r, key, _HEAD.pack(op[0], VERSION, 0) + body)
        self._wait_applied(r, koff)
        return key, r, koff

    # -- streams ----------------------------------------------------------------------------
    def streams(self, topic: str | None = None) -> list[tuple[str, int]]:
        self._check_open()
        with self._lock:
            if topic is not None:
                return [(topic, p) for p in sorted(self._by_name.get((self.org_id, topic), {}))]
            return sorted((t, p) for (o, t), ps in self._by_name.items() if o == self.org_id for p in ps)

    def create(self, topic: str, partition: int = 0) -> None:
        self._check_open(True)
        key = stream_key_bytes(self.org_id, topic, check_partition(partition))
        if key not in self._streams:
            self._op(topic, partition, b"C")

    def _state(self, topic: str, partition: int) -> StreamState | None:
        return self._streams.get(stream_key_bytes(self.org_id, topic, check_partition(partition)))

    def info(self, topic: str, partition: int = 0) -> StreamInfo:
        self._check_open()
        s = self._state(topic, partition)
        h = topic_hash(self.org_id, topic).hex()
        if s is None:
            return StreamInfo(self.org_id, topic, h, partition, 0, 0, 0, 0, 0)
        with self._lock:
            return StreamInfo(
                self.org_id, topic, h, partition, s.low, s.next, s.low_byte, s.next_byte, s.next
            )

    def delete(self, topic: str, partition: int | None = None) -> list[int]:
        self._check_open(True)
        parts = [p for _t, p in self.streams(topic)] if partition is None else [check_partition(partition)]
        done = []
        for p in parts:
            key = stream_key_bytes(self.org_id, topic, p)
            if key not in self._streams:
                continue
            for g, cur in list(self._cursors.items()):
                if key in cur:
                    self._produce(self.t.meta_topic, 0, b"c" + g.encode() + b"\0" + key, None)
            self._op(topic, p, b"X")
            done.append(p)
        if done and not self.streams(topic) and (self.org_id, topic) in self._settings:
            self._produce(
                self.t.meta_topic, 0, b"s" + self.org_id.to_bytes(8, "little") + topic_bytes(topic), None
            )
        return done

    # -- appending --------------------------------------------------------------------------
    def append(
        self, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any, *, wait: bool = True
    ) -> int:
        # Kafka's acks=all is the only wait there is (docs/cluster.md): every append is
        # durable on return, which honours wait=False too.
        self._check_open(True)
        n = len(meta_lens)
        if n == 0 or len(value_lens) != n:
            raise ValueError("append needs one meta and one value length per record, at least one record")
        data = bytes(data)
        if sum(meta_lens) + sum(value_lens) != len(data):
            raise ValueError("the lengths do not add up to the data")
        key = stream_key_bytes(self.org_id, topic, check_partition(partition))
        first = None
        pos = i = 0
        # One Kafka record per MAX_CHUNK_BYTES: a batch that fits is atomic (all or none);
        # a larger one is split, each part atomic (docs/cluster.md).
        while i < n:
            if i == 0 and len(data) + 8 * n <= MAX_CHUNK_BYTES:
                j, size = n, len(data) + 8 * n  # the common case: the whole batch in one record
            else:
                j, size = i, 0
                while j < n and (j == i or size + meta_lens[j] + value_lens[j] + 8 <= MAX_CHUNK_BYTES):
                    size += meta_lens[j] + value_lens[j] + 8
                    j += 1
            if size > MAX_CHUNK_BYTES:
                raise RecordTooLargeError(f"a record of {size - 8} bytes is larger than {MAX_CHUNK_BYTES}")
            table = array("I", bytes(8 * (j - i)))  # (meta_len, value_len) per record, u32 LE
            table[0::2] = array("I", meta_lens[i:j])
            table[1::2] = array("I", value_lens[i:j])
            if sys.byteorder == "big":
                table.byteswap()
            nbytes = size - 8 * (j - i)
            body = b"".join(
                (
                    _HEAD.pack(ord("D"), VERSION, 0),
                    _DATA.pack(j - i),
                    table.tobytes(),
                    data[pos : pos + nbytes],
                )
            )
            r = region_of(key, self.t.regions)
            koff = self._produce(self.t.log_topic, r, key, body)
            self._wait_applied(r, koff)
            off = self._assigned.get((r, koff))
            if off is None:  # evicted by a flood of other appends: look it up in the stream
                s = self._streams[key]
                off = s.first[bisect.bisect_left(s.koff, koff)]
            first = off if first is None else first
            self.stats.appended(topic, partition, j - i, nbytes)
            pos += nbytes
            i = j
        assert first is not None
        return first

    def sync(self) -> None:
        """Every append already returned acknowledged by the cluster (acks=all)."""
        self._check_open()
        if self.producer is not None:
            self.producer.flush(self.timeout)

    # -- change notification ----------------------------------------------------------------
    def watch(self, fn: Callable[[Change], None]) -> Callable[[], None]:
        return self._watchers.add(fn, self.org_id)

    def _notify(self, change: Change) -> None:
        self._watchers.notify(change)

    # -- reading ----------------------------------------------------------------------------
    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        buf: Any,
        recs: Any,
        max_records: int = 1 << 20,
        max_bytes: int = 16 << 20,
    ) -> int:
        self._check_open()
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
        s = self._state(topic, partition)
        low, high = (s.low, s.next) if s else (0, 0)
        if not low <= offset <= high:
            raise OffsetOutOfRangeError(f"offset {offset} is outside {low}..{high} of {topic!r}[{partition}]")
        if s is None or offset == high:
            return 0
        out = memoryview(buf).cast("B")
        rv = memoryview(recs).cast("B")
        limit = min(max_records, len(rv) // REC_SIZE)
        n = used = 0
        while n < limit and offset < high:
            with self._lock:
                if offset < s.low:
                    raise OffsetOutOfRangeError(
                        f"offset {offset} of {topic!r}[{partition}] was trimmed meanwhile"
                    )
                i = s.chunk_index(offset)
                koff, first, ts = s.koff[i], s.first[i], s.ts[i]
            chunk = self._chunk(s.region, koff)
            k = offset - first
            m, v = chunk.lens[k]
            if used + m + v > len(out) or (n and used + m + v > max_bytes):
                if n == 0:
                    raise BufferTooSmallError(m + v)
                return n
            # Records k..e-1 of the chunk at once: their bodies are contiguous, and as many
            # as fit the buffer, max_bytes (past the first record) and max_records.
            st = chunk.starts[k]
            cap = st + min(len(out), max_bytes) - used
            e = max(k + 1, bisect.bisect_right(chunk.starts, cap, k + 1) - 1)
            e = min(e, k + limit - n, len(chunk.lens))
            cnt, nb = e - k, chunk.starts[e] - st
            out[used : used + nb] = chunk.data[st : st + nb]
            words = array("Q", [NO_GID, 0, ts & _MASK64, 0, 0]) * cnt  # engine_api.REC_LAYOUT
            words[1::5] = array("Q", range(offset, offset + cnt))
            words[3::5] = chunk.words[k:e]
            words[4::5] = array("Q", [x + used - st for x in chunk.starts[k:e]])
            if sys.byteorder == "big":
                words.byteswap()
            rv[n * REC_SIZE : (n + cnt) * REC_SIZE] = memoryview(words).cast("B")
            used += nb
            n += cnt
            offset += cnt
        return n

    def read_bytes(self, topic: str, partition: int, position: int, buf: Any) -> int:
        self._check_open()
        if position < 0:
            raise OffsetOutOfRangeError("position must not be negative")
        s = self._state(topic, partition)
        if s is None or position >= s.next_byte:
            return 0
        if position < s.low_byte:
            raise OffsetOutOfRangeError(
                f"position {position} of {topic!r} was trimmed (low byte {s.low_byte})"
            )
        out = memoryview(buf).cast("B")
        got = 0
        while got < len(out) and position < s.next_byte:
            with self._lock:
                i = bisect.bisect_right(s.byte, position) - 1
                if i < 0:
                    raise OffsetOutOfRangeError(f"position {position} of {topic!r} was trimmed meanwhile")
                koff, at = s.koff[i], s.byte[i]
            chunk = self._chunk(s.region, koff)
            for k, (m, v) in enumerate(chunk.lens):
                if at + v + 1 <= position:
                    at += v + 1
                    continue
                st = chunk.starts[k] + m
                line = bytes(chunk.data[st : st + v]) + b"\n"
                piece = line[position - at : position - at + len(out) - got]
                out[got : got + len(piece)] = piece
                got += len(piece)
                position += len(piece)
                at += v + 1
                if got == len(out):
                    break
        return got

    def locate(
        self,
        topic: str,
        partition: int = 0,
        *,
        offset: int | None = None,
        byte: int | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        self._check_open()
        if (offset is None) + (byte is None) + (timestamp_ms is None) != 2:
            raise ValueError("locate takes exactly one of offset=, byte=, timestamp_ms=")
        s = self._state(topic, partition)
        if offset is not None:
            if not isinstance(offset, int) or offset < 0:
                raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
            low, high = (s.low, s.next) if s else (0, 0)
            if not low <= offset <= high:
                raise OffsetOutOfRangeError(f"offset {offset} is outside {low}..{high} of {topic!r}")
            if s is None or offset == high:
                return s.next_byte if s else 0
            if offset == s.low:
                return s.low_byte
            i = s.chunk_index(offset)
            chunk = self._chunk(s.region, s.koff[i])
            return s.byte[i] + sum(v + 1 for _m, v in chunk.lens[: offset - s.first[i]])
        if byte is not None:
            if byte < 0:
                raise OffsetOutOfRangeError("position must not be negative")
            if s is None or byte >= s.next_byte:
                return s.next if s else 0
            if byte < s.low_byte:
                return s.low
            i = bisect.bisect_right(s.byte, byte) - 1
            chunk = self._chunk(s.region, s.koff[i])
            at, off = s.byte[i], s.first[i]
            for _m, v in chunk.lens:
                if at + v + 1 > byte:
                    return off
                at += v + 1
                off += 1
            return off
        assert timestamp_ms is not None
        if s is None:
            return 0
        i = bisect.bisect_left(s.ts, timestamp_ms)  # LogAppendTime: non-decreasing per region
        return max(s.low, s.first[i]) if i < len(s.first) else s.next

    # -- trims --------------------------------------------------------------------------------
    def trim(self, topic: str, partition: int, before_offset: int) -> None:
        self._check_open(True)
        s = self._state(topic, partition)
        low, high = (s.low, s.next) if s else (0, 0)
        if not isinstance(before_offset, int) or before_offset < 0 or before_offset > high:
            raise OffsetOutOfRangeError(f"cannot trim {topic!r}[{partition}] to {before_offset} (0..{high})")
        if before_offset > low:
            self._op(topic, partition, b"T", _U64.pack(before_offset))

    # -- consumer cursors -------------------------------------------------------------------------
    def committed(self, group: str, topic: str, partition: int = 0) -> tuple[int, str] | None:
        self._check_open()
        topic_bytes(group)
        key = stream_key_bytes(self.org_id, topic, check_partition(partition))
        offset = self._cursors.get(group, {}).get(key)
        return None if offset is None else (offset, self._cursor_meta.get((group, key), ""))

    def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        *,
        advance_only: bool = False,
        metadata: str = "",
    ) -> bool:
        self._check_open(True)
        gb = topic_bytes(group)
        raw_meta = metadata.encode("utf-8")
        if len(raw_meta) > MAX_METADATA_BYTES:
            raise ValueError(f"commit metadata of {len(raw_meta)} bytes (at most {MAX_METADATA_BYTES})")
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"cannot commit offset {offset!r} of {topic!r}[{partition}]")
        key = stream_key_bytes(self.org_id, topic, check_partition(partition))
        s = self._streams.get(key)
        high = s.next if s else 0
        if offset > high:
            raise OffsetOutOfRangeError(
                f"cannot commit offset {offset} of {topic!r}[{partition}]: the end is {high}"
            )
        before = self._cursors.get(group, {}).get(key)
        if advance_only and before is not None and before >= offset:
            return False
        moff = self._produce(
            self.t.meta_topic,
            0,
            b"c" + gb + b"\0" + key,
            _U64.pack(offset) + bytes([advance_only]) + raw_meta,
        )
        self._wait_meta(moff)
        return self._cursors.get(group, {}).get(key) == offset and before != offset

    def forget(self, group: str, topic: str | None = None, partition: int = 0) -> bool:
        return self._forget_group(group) if topic is None else self._forget_cursor(group, topic, partition)

    def _forget_cursor(self, group: str, topic: str, partition: int) -> bool:
        self._check_open(True)
        gb = topic_bytes(group)
        key = stream_key_bytes(self.org_id, topic, check_partition(partition))
        if key not in self._cursors.get(group, {}):
            return False
        self._wait_meta(self._produce(self.t.meta_topic, 0, b"c" + gb + b"\0" + key, None))
        return True

    def _orgs_of(self, group: str) -> set[int]:
        """The orgs a group belongs to: those of its cursors' streams and of its create_group
        records (-1: a group of every org, written by an older release)."""
        orgs = {_KEY.unpack_from(k)[0] for k in self._cursors.get(group, {})}
        return orgs | self._group_orgs.get(group, set())

    def _has_group(self, group: str) -> bool:
        orgs = self._orgs_of(group)
        return self.org_id in orgs or orgs == {-1}

    def _forget_group(self, group: str) -> bool:
        self._check_open(True)
        gb = topic_bytes(group)
        if not self._has_group(group):
            return False
        org = self.org_id.to_bytes(8, "little")
        for key in list(self._cursors.get(group, {})):
            if key[:8] == org:
                self._produce(self.t.meta_topic, 0, b"c" + gb + b"\0" + key, None)
        last = self._produce(self.t.meta_topic, 0, b"G" + org + gb, None)
        if self._orgs_of(group) <= {self.org_id, -1}:  # no other org's group of that name
            last = self._produce(self.t.meta_topic, 0, b"g" + gb, None)
        self._wait_meta(last)
        return True

    def groups(self) -> list[str]:
        self._check_open()
        with self._lock:
            names = set(self._cursors) | set(self._group_orgs)
        return sorted(g for g in names if self._has_group(g))

    def create_group(self, group: str) -> None:
        self._check_open(True)
        gb = topic_bytes(group)
        if self.org_id not in self._orgs_of(group):
            org = self.org_id.to_bytes(8, "little")
            self._wait_meta(self._produce(self.t.meta_topic, 0, b"G" + org + gb, b""))

    def for_org(self, org_id: int) -> KafkaEngine:
        if not isinstance(org_id, int) or isinstance(org_id, bool) or not 0 <= org_id < 2**63:
            raise ValueError(f"org_id must be an int in 0..2**63-1, not {org_id!r}")
        if org_id == self.org_id:
            return self
        view = copy.copy(self)  # every lock, map, client and thread shared; only the org differs
        view.org_id = org_id
        view._owner = self._owner or self
        return view

    # -- per-topic settings, retention and the cleaner -----------------------------------------------
    def settings(self, topic: str) -> dict[str, Any]:
        return dict(self._settings.get((self.org_id, topic), {}))

    def set_settings(self, topic: str, **values: Any) -> None:
        self._check_open(True)
        tb = topic_bytes(topic)
        entry = updated(self._settings.get((self.org_id, topic), {}), values)
        key = b"s" + self.org_id.to_bytes(8, "little") + tb
        self._wait_meta(
            self._produce(self.t.meta_topic, 0, key, json.dumps(entry).encode() if entry else None)
        )

    def apply_retention(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        if self.producer is None:
            return {}
        now = retention_now_ms() if now_ms is None else now_ms
        out = {}
        for (org, topic), parts in list(self._by_name.items()):
            if org != self.org_id:
                continue
            policy = policy_of(self._settings.get((self.org_id, topic)), self.retention_default)
            if policy.unlimited:
                continue
            for p in list(parts):
                info = self.info(topic, p)
                if info.high_watermark == info.low_watermark:
                    continue
                target = info.low_watermark
                if policy.ms is not None:
                    target = max(target, self.locate(topic, p, timestamp_ms=now - policy.ms))
                cap = info.low_watermark
                if policy.bytes is not None and info.byte_size - policy.bytes > info.low_byte:
                    keep_from = info.byte_size - policy.bytes
                    cap = self.locate(topic, p, byte=keep_from)
                    if cap < info.high_watermark and self.locate(topic, p, offset=cap) < keep_from:
                        cap += 1
                    target = max(target, cap)
                if policy.groups and target > info.low_watermark:
                    safe = min(committed_offset(self, g, topic, p) or 0 for g in policy.groups)
                    target = max(min(target, safe), cap)
                target = min(target, info.high_watermark)
                if target > info.low_watermark:
                    self.trim(topic, p, target)
                    out[(org, topic, p)] = target
        return out

    def reclaim(self) -> int:
        """The cleaner: for each region whose records below some offset are all trimmed or
        deleted, a snapshot first, then Kafka DeleteRecords below it. Returns how many
        regions it shortened."""
        if self.producer is None:
            return 0
        from confluent_kafka import TopicPartition

        ends = self._ends(self.t.log_topic, range(self.t.regions))
        done = 0
        for r in range(self.t.regions):
            snap = self.snapshot(r, write=False)
            safe = snap["upto"]
            for d in snap["streams"]:
                if d["chunks"][1]:
                    safe = min(safe, d["chunks"][1][0])
            if safe <= ends[r][0]:
                continue
            self.snapshot(r)
            fut = self.admin.delete_records([TopicPartition(self.t.log_topic, r, safe)])
            for f in fut.values():
                f.result(self.timeout)
            done += 1
        return done

    def snapshot(self, region: int, write: bool = True) -> dict[str, Any]:
        """The region's stream maps at its replay position; written to the meta topic."""
        with self._lock:
            upto = self._pos.get(region, 0)
            snap = {
                "upto": upto,
                "streams": [s.to_json() for s in self._streams.values() if s.region == region],
            }
        if write:
            blob = zlib.compress(json.dumps(snap, separators=(",", ":")).encode())
            self._wait_meta(self._produce(self.t.meta_topic, 0, b"n" + region.to_bytes(4, "little"), blob))
            self._snapshot_upto[region] = max(self._snapshot_upto.get(region, 0), upto)
        return snap

    def snapshot_due(self) -> int:
        """Snapshots every region whose replay passed `snapshot_every` Kafka records since
        its newest snapshot (the cleaner's periodic part); returns how many it wrote."""
        if self.producer is None:
            return 0
        done = 0
        for r in range(self.t.regions):
            if self._pos.get(r, 0) - self._snapshot_upto.get(r, 0) >= self.snapshot_every:
                self.snapshot(r)
                done += 1
        return done

    def _background(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.apply_retention()
                self.stats.reclaimed_segments += self.reclaim()
                self.snapshot_due()
            except WalClosedError:
                return
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("walfs kafka background work failed")

    # -- checks ----------------------------------------------------------------------------------
    def report(self) -> dict[str, int]:
        return {
            "streams": len(self._streams),
            "regions": self.t.regions,
            "snapshots": len(self._snapshots),
            "open_ms": int(self.stats.open_seconds * 1000),
            "open_replayed": self._open_replayed,  # log records the open replayed after snapshots
        }

    def verify(self, progress: VerifyProgress | None = None) -> list[tuple[str, int, int, str]]:
        out = []
        for s in list(self._streams.values()):
            if s.org != self.org_id:
                continue
            for koff in list(s.koff):
                try:
                    self._chunk(s.region, koff)
                except WalError as e:
                    out.append((s.topic, s.partition, -1, str(e)))
        return out
