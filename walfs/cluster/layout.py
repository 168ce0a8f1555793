"""Where a namespace lives in the cluster, and the byte formats of its two topics: the target
URL, the topic names, stream keys and regions, and every record's key and header.

    kafka://HOST:PORT[,HOST:PORT...]/NAMESPACE[?regions=N]

For namespace NS (after HoraeDB's WAL on Kafka, seeds/003):

- `walfs.NS.log`, R partitions ("regions", default 8). A stream (org, topic, partition)
  lives in region blake3(stream) mod R; many streams share a region, because walfs streams
  are cheap and Kafka partitions are not (each costs file handles, replication traffic and
  controller work on every broker). Every change to a stream is ONE Kafka record in its
  region, keyed by the stream: a batch of appended records, a create, a trim, a delete. A
  partition has one order, so every engine instance that replays a region (several mounts
  on several machines) applies the same changes in the same order: a record's walfs offset
  is assigned by that replay (its rank in its stream), never by the writer.
- `walfs.NS.meta`, one partition, compacted: consumer cursors, consumer groups, per-topic
  settings, and region snapshots (the per-stream offset maps at a region position, so that
  opening replays only the log after the newest snapshot).

Record formats (little-endian; every length checked against the record before use; a
record that does not parse is reported with WalCorruptError naming topic, partition and
offset). On the right, the module that writes and reads each kind's value:

    log key    u64 org | u32 partition | topic (UTF-8)                        (stream_key_bytes)
    log value  u8 op | u8 version (1) | u16 zero | body                       (HEAD, VERSION)
               op "D" data:   u32 count | count x (u32 meta_len, u32 value_len) | bodies
                                                                              (chunks.py)
               op "C" create, "X" delete: no body; op "T" trim: u64 before
                                                   (written by engine.py, read by replay.py)
    meta key   b"c" group \\0 stream-key  -> u64 offset | u8 advance_only | metadata
                                                               (a cursor:       cursors.py)
               b"G" u64 org | group        -> b""              (a group of an org: cursors.py)
               b"g" group                  -> b""  (a group of every org, older releases)
               b"s" u64 org | topic        -> JSON overrides   (settings:       settings.py)
               b"n" u32 region             -> zlib(JSON)       (a snapshot:     snapshots.py)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

import blake3

from walfs.engine.names import topic_bytes

DEFAULT_REGIONS = 8
VERSION = 1  # of the log value's header
MAX_CHUNK_BYTES = 8 << 20  # one Kafka record of the log; larger appends are split (producing.py)
MAX_META_BYTES = 64 << 20  # one record of the meta topic (a region snapshot can be large)
HEAD = struct.Struct("<BBH")  # a log value's header: op, version, zero
U64 = struct.Struct("<Q")
KEY = struct.Struct("<QI")  # a log key's fixed part: org, partition


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
    """A stream's key: the key of its log records, and the tail of its cursors' keys."""
    return KEY.pack(org, partition) + topic_bytes(topic)


def key_org(key: bytes) -> int:
    """The org of a stream key."""
    return int(KEY.unpack_from(key)[0])


def region_of(key: bytes, regions: int) -> int:
    return int.from_bytes(blake3.blake3(key).digest(length=8), "little") % regions


def log_value(op: bytes, body: bytes = b"") -> bytes:
    """A log record's value: the header of `op`, then its body."""
    return HEAD.pack(op[0], VERSION, 0) + body


def org_bytes(org: int) -> bytes:
    """An org as it stands in the meta topic's keys."""
    return org.to_bytes(8, "little")
