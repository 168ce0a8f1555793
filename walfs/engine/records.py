"""Record: what reads return. Keys, headers and producer timestamps travel in a record's
meta section, which the C core stores opaquely before the value.

Meta encoding, all little-endian:
  u8 version (1 or 2) | u8 flags (1: has key, 2: has producer timestamp, 4: null value,
  8: producer section; 4 and 8 in version 2 only) | [i64 timestamp_ms] | [u32 key_len,
  key] | u32 n_headers | n x (u16 name_len, name utf-8, i32 value_len (-1 = null), value)
  | [producer section: i64 producer id | i16 epoch | i32 base sequence | i32 record count]
A record with no key, no headers and no producer timestamp and a non-null value has an
empty meta section. Version 2 is version 1 plus two flags: 4, a null value (a Kafka
tombstone), whose stored value is empty; 8, the producer section, carried by the first
record of each batch an idempotent Kafka producer appended (its id, epoch and the
sequence numbers the batch covers: the listener's duplicate detection is rebuilt from
them after a restart, walfs/kafka/producer_ids.py). Version 2 is written only when a flag
needs it, so other data is byte for byte what older releases wrote and read; an older
release refuses a version-2 meta section (unknown version) rather than misreading it.
"""

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

Header = tuple[str, bytes | None]

_HAS_KEY = 1
_HAS_TS = 2
_NULL_VALUE = 4
_PRODUCER = 8
_PRODUCER_SECTION = struct.Struct("<qhii")
# (producer id, epoch, base sequence, record count) of an idempotent producer's batch
Producer = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp_ms: int
    value: bytes | None  # None: a null value (a Kafka tombstone); the file view shows b""
    key: bytes | None = None
    headers: Sequence[Header] = field(default_factory=tuple)
    gid: int = -1


def encode_meta(
    key: bytes | None,
    headers: Sequence[Header] | None,
    timestamp_ms: int | None,
    null_value: bool = False,
) -> bytes:
    if key is None and not headers and timestamp_ms is None and not null_value:
        return b""
    flags = (_HAS_KEY if key is not None else 0) | (_HAS_TS if timestamp_ms is not None else 0)
    if null_value:
        flags |= _NULL_VALUE
    parts = [struct.pack("<BB", 2 if null_value else 1, flags)]
    if timestamp_ms is not None:
        parts.append(struct.pack("<q", timestamp_ms))
    if key is not None:
        parts.append(struct.pack("<I", len(key)))
        parts.append(bytes(key))
    hdrs = headers or ()
    parts.append(struct.pack("<I", len(hdrs)))
    for name, value in hdrs:
        raw = name.encode("utf-8")
        parts.append(struct.pack("<H", len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(struct.pack("<i", -1))
        else:
            parts.append(struct.pack("<i", len(value)))
            parts.append(bytes(value))
    return b"".join(parts)


def stamp_timestamps(
    data: bytearray | memoryview, meta_lens: Sequence[int], value_lens: Sequence[int], ts_ms: int
) -> None:
    """Sets the producer timestamp of every record in ``data`` (bodies back to back, as
    Wal.append_bodies takes them) to ``ts_ms``, in place: a topic with
    message.timestamp.type=LogAppendTime stamps records with their append time."""
    pos = 0
    stamp = struct.pack("<q", ts_ms)
    for m, v in zip(meta_lens, value_lens, strict=True):
        if m >= 10 and data[pos] in (1, 2) and data[pos + 1] & _HAS_TS:
            data[pos + 2 : pos + 10] = stamp
        pos += m + v


def decode_meta(meta: bytes) -> tuple[bytes | None, tuple[Header, ...], int | None]:
    """Returns (key, headers, producer timestamp)."""
    if not meta:
        return None, (), None
    version, flags = struct.unpack_from("<BB", meta, 0)
    if version not in (1, 2) or (flags & (_NULL_VALUE | _PRODUCER) and version < 2):
        raise ValueError(f"unknown record meta version {version} (flags {flags})")
    pos = 2
    ts = None
    key = None
    if flags & _HAS_TS:
        (ts,) = struct.unpack_from("<q", meta, pos)
        pos += 8
    if flags & _HAS_KEY:
        (klen,) = struct.unpack_from("<I", meta, pos)
        pos += 4
        key = bytes(meta[pos : pos + klen])
        pos += klen
    (n,) = struct.unpack_from("<I", meta, pos)
    pos += 4
    headers: list[Header] = []
    for _ in range(n):
        (nlen,) = struct.unpack_from("<H", meta, pos)
        pos += 2
        name = bytes(meta[pos : pos + nlen]).decode("utf-8")
        pos += nlen
        (vlen,) = struct.unpack_from("<i", meta, pos)
        pos += 4
        value = None
        if vlen >= 0:
            value = bytes(meta[pos : pos + vlen])
            pos += vlen
        headers.append((name, value))
    return key, tuple(headers), ts


def value_is_null(meta: bytes) -> bool:
    """Whether a record's meta section marks its (empty) value as null."""
    return len(meta) >= 2 and meta[0] == 2 and bool(meta[1] & _NULL_VALUE)


def producer_of(meta: bytes) -> Producer | None:
    """The producer section of a meta section, if it has one."""
    if len(meta) < 2 + 4 + _PRODUCER_SECTION.size or meta[0] != 2 or not meta[1] & _PRODUCER:
        return None
    return _PRODUCER_SECTION.unpack_from(meta, len(meta) - _PRODUCER_SECTION.size)


# The most with_producer makes a meta section grow by: an empty one becomes a version-1
# section without fields (6 bytes) plus the producer section.
PRODUCER_GROWTH = 6 + _PRODUCER_SECTION.size


def with_producer(meta: bytes, producer: Producer) -> bytes:
    """``meta`` (a section without a producer section) with ``producer`` added."""
    if not meta:
        meta = b"\x01\x00" + bytes(4)  # no key, no timestamp, no headers
    return bytes((2, meta[1] | _PRODUCER)) + meta[2:] + _PRODUCER_SECTION.pack(*producer)
