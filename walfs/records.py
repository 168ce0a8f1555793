"""Record: what reads return. Keys, headers and producer timestamps travel in a record's
meta section, which the C core stores opaquely before the value.

Meta encoding (version 1), all little-endian:
  u8 version=1 | u8 flags (1: has key, 2: has producer timestamp) | [i64 timestamp_ms]
  | [u32 key_len, key] | u32 n_headers | n x (u16 name_len, name utf-8, i32 value_len
  (-1 = null), value)
A record with no key, no headers and no producer timestamp has an empty meta section.
"""

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

Header = tuple[str, bytes | None]

_HAS_KEY = 1
_HAS_TS = 2


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp_ms: int
    value: bytes
    key: bytes | None = None
    headers: Sequence[Header] = field(default_factory=tuple)
    gid: int = -1


def encode_meta(key: bytes | None, headers: Sequence[Header] | None, timestamp_ms: int | None) -> bytes:
    if key is None and not headers and timestamp_ms is None:
        return b""
    flags = (_HAS_KEY if key is not None else 0) | (_HAS_TS if timestamp_ms is not None else 0)
    parts = [struct.pack("<BB", 1, flags)]
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
    data: bytearray, meta_lens: Sequence[int], value_lens: Sequence[int], ts_ms: int
) -> None:
    """Sets the producer timestamp of every record in ``data`` (bodies back to back, as
    Wal.append_bodies takes them) to ``ts_ms``, in place: a topic with
    message.timestamp.type=LogAppendTime stamps records with their append time."""
    pos = 0
    stamp = struct.pack("<q", ts_ms)
    for m, v in zip(meta_lens, value_lens, strict=True):
        if m >= 10 and data[pos] == 1 and data[pos + 1] & _HAS_TS:
            data[pos + 2 : pos + 10] = stamp
        pos += m + v


def decode_meta(meta: bytes) -> tuple[bytes | None, tuple[Header, ...], int | None]:
    """Returns (key, headers, producer timestamp)."""
    if not meta:
        return None, (), None
    version, flags = struct.unpack_from("<BB", meta, 0)
    if version != 1:
        raise ValueError(f"unknown record meta version {version}")
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
