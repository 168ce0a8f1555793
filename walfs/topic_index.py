"""The virtual topic index (Rafka's idea): per stream a 64-bit roaring bitmap of the
global ids of its records from the low watermark on. A record's offset is the low
watermark plus its rank; the high watermark is the low watermark plus the cardinality.

Snapshots (HoraeDB's idea) let a restart read the bitmaps instead of the C core's index
slots: index.snap holds every stream's bitmap restricted to gids below G, where every
record with gid < G was durable when the snapshot was taken. A restart loads it and asks
the core only for gids >= G. Format (little-endian):
  "WALFSIDX" | u32 version=1 | u64 G | u32 n_streams
  | n x (u64 org_id | u32 partition | 16-byte topic hash | u64 low_offset | u32 len | bitmap)
  | 16-byte blake3 of everything before it
"""

import logging
import os
import struct
import threading
from dataclasses import dataclass, field

import blake3
from pyroaring import BitMap64

from walfs.engine import NO_GID, Engine

log = logging.getLogger(__name__)

SNAPSHOT_NAME = "index.snap"
_MAGIC = b"WALFSIDX"
_VERSION = 1


@dataclass
class StreamIndex:
    stream_no: int
    org_id: int
    partition: int
    topic_hash: bytes
    name: str
    low: int = 0
    gids: BitMap64 = field(default_factory=BitMap64)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def high(self) -> int:
        return self.low + len(self.gids)

    def gid_at(self, offset: int) -> int:
        return int(self.gids[offset - self.low])

    def add(self, first_gid: int, n: int) -> None:
        self.gids.add_range(first_gid, first_gid + n)

    def trim(self, low: int) -> None:
        if low <= self.low:
            return
        if low >= self.high:
            self.gids.clear()
        else:
            self.gids.remove_range(0, self.gid_at(low))
        self.low = low


def _key(org_id: int, partition: int, thash: bytes) -> tuple[int, int, bytes]:
    return (org_id, partition, thash)


def read_snapshot(path: str) -> tuple[int, dict[tuple[int, int, bytes], tuple[int, BitMap64]]]:
    """Returns (G, {stream key: (low, bitmap)}); (0, {}) when there is no usable snapshot."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0, {}
    if len(data) < 40 or data[:8] != _MAGIC or blake3.blake3(data[:-16]).digest(length=16) != data[-16:]:
        log.warning("ignoring damaged index snapshot %s: rebuilding from the segments", path)
        return 0, {}
    version, gid, n = struct.unpack_from("<IQI", data, 8)
    if version != _VERSION:
        log.warning("ignoring index snapshot version %d", version)
        return 0, {}
    pos = 24
    out: dict[tuple[int, int, bytes], tuple[int, BitMap64]] = {}
    for _ in range(n):
        org, part = struct.unpack_from("<QI", data, pos)
        pos += 12
        thash = data[pos : pos + 16]
        pos += 16
        low, blen = struct.unpack_from("<QI", data, pos)
        pos += 12
        out[_key(org, part, thash)] = (low, BitMap64.deserialize(data[pos : pos + blen]))
        pos += blen
    return gid, out


def write_snapshot(dir_path: str, gid: int, streams: list[StreamIndex]) -> None:
    parts = [_MAGIC, struct.pack("<IQI", _VERSION, gid, len(streams))]
    for s in streams:
        with s.lock:
            bm = s.gids.copy()
            low = s.low
        bm.remove_range(gid, NO_GID)
        raw = bm.serialize()
        parts.append(struct.pack("<QI", s.org_id, s.partition))
        parts.append(s.topic_hash)
        parts.append(struct.pack("<QI", low, len(raw)))
        parts.append(raw)
    body = b"".join(parts)
    data = body + blake3.blake3(body).digest(length=16)
    tmp = os.path.join(dir_path, SNAPSHOT_NAME + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(dir_path, SNAPSHOT_NAME))
    dfd = os.open(dir_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def load_stream(engine: Engine, stream_no: int, snap_gid: int, snap: dict) -> StreamIndex:
    """Rebuilds one stream's index from the snapshot plus the core's gids >= snap_gid, and
    falls back to the core alone if the two disagree."""
    info = engine.stream_info(stream_no)
    s = StreamIndex(stream_no, info.org_id, info.partition, info.topic_hash, info.name, low=info.low_offset)
    entry = snap.get(_key(info.org_id, info.partition, info.topic_hash))
    since = 0
    if entry is not None:
        bm = entry[1]
        if info.first_gid == NO_GID:
            bm.clear()
        else:
            bm.remove_range(0, info.first_gid)
        s.gids = bm
        since = snap_gid
    for start, end in engine.gid_runs(stream_no, since):
        s.gids.add_range(start, end)
    if s.high != info.next_offset:
        if entry is not None:
            log.warning("snapshot disagrees with the segments for %s: rebuilding it", info.name)
            return load_stream(engine, stream_no, 0, {})
        raise RuntimeError(
            f"index of {info.name!r} has {len(s.gids)} records past {s.low}, core says {info.next_offset}"
        )
    return s
