"""Retention: how long a topic keeps its records, and the per-topic settings file.

A policy has three optional parts (Kafka's names in brackets):
- `ms` [retention.ms]: records appended more than this many ms ago go;
- `bytes` [retention.bytes]: a stream keeps at most this many bytes of its byte view
  (values plus their newlines), counted from its end;
- `groups`: never delete what these consumer groups have not committed (HoraeDB's safe
  offset), except that `bytes` is a hard cap that still wins (logged when it does).
None means "no limit". `Wal.apply_retention` turns policies into trims (offsets are
never renumbered; readers of a trimmed range get OffsetOutOfRangeError, ENODATA on the
mount, OFFSET_OUT_OF_RANGE on Kafka), and reclamation then deletes the segment files
that hold only trimmed records. The daemons run it in the background.

On disk (`topics.conf` in the data directory, the one home of per-topic settings; this
module writes it): b"WALFSTOP" | u32 version (1) | u32 length N | N bytes of UTF-8 JSON
{"topics": {"<org_id>/<topic>": {"retention_ms": int|null, "retention_bytes": int|null,
"retention_groups": [str, ...]}}} | the first 16 bytes of blake3 of everything before.
It is replaced atomically (write topics.conf.tmp, fsync, rename, fsync the directory): a
crash leaves the old or the new file. Any other content is damage: opening the WAL fails
with WalCorruptError naming the file (settings are never silently reset to defaults). A
missing file means no per-topic settings.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import blake3

from walfs.errors import WalCorruptError

FILE_NAME = "topics.conf"
_MAGIC = b"WALFSTOP"
_VERSION = 1
_HEAD = struct.Struct("<8sII")


@dataclass(frozen=True)
class Policy:
    ms: int | None = None
    bytes: int | None = None
    groups: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for name in ("ms", "bytes"):
            v = getattr(self, name)
            # At most a Kafka long: the engine computes with 64-bit times and positions
            # (a larger limit made every background retention pass fail).
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**63):
                raise ValueError(f"retention {name} must be an int in 0..2**63-1 or None, not {v!r}")

    @property
    def unlimited(self) -> bool:
        return self.ms is None and self.bytes is None


_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_limit(text: str) -> int | None:
    """An xattr or CLI value: a non-negative integer, optionally with K/M/G/T (powers of
    1024), or -1 / "none" for no limit (Kafka spells "no limit" -1). ValueError otherwise."""
    t = text.strip().lower()
    if t in ("-1", "none"):
        return None
    unit = _UNITS.get(t[-1:], 1)
    digits = t[:-1] if unit > 1 else t
    if not digits.isdigit() or len(digits) > 19 or int(digits) * unit >= 2**63:
        raise ValueError(f"not a retention limit: {text!r}")
    return int(digits) * unit


def show_limit(v: int | None) -> str:
    return "-1" if v is None else str(v)


class TopicSettings:
    """Per-topic overrides of the WAL's default policy, persisted in topics.conf."""

    def __init__(self, dir_path: str, read_only: bool = False) -> None:
        self.path = os.path.join(dir_path, FILE_NAME)
        self.read_only = read_only
        self._lock = threading.Lock()
        self._topics: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        if len(data) < _HEAD.size + 16:
            raise WalCorruptError(f"{self.path}: {len(data)} bytes, too short for a settings file")
        magic, version, n = _HEAD.unpack_from(data)
        if magic != _MAGIC:
            raise WalCorruptError(f"{self.path}: bad magic {magic!r}")
        if version != _VERSION:
            raise WalCorruptError(f"{self.path}: version {version}, this walfs reads {_VERSION}")
        if _HEAD.size + n + 16 != len(data):
            raise WalCorruptError(f"{self.path}: length {n} does not match the file ({len(data)} bytes)")
        body = data[: _HEAD.size + n]
        if blake3.blake3(body).digest(length=16) != data[-16:]:
            raise WalCorruptError(f"{self.path}: checksum mismatch")
        try:
            doc = json.loads(body[_HEAD.size :].decode("utf-8"))
            topics = doc["topics"]
            if not isinstance(topics, dict):
                raise TypeError("topics is not an object")
            return {str(k): dict(v) for k, v in topics.items()}
        except (ValueError, KeyError, TypeError) as e:
            raise WalCorruptError(f"{self.path}: unreadable settings ({e})") from None

    def _save(self) -> None:
        body = json.dumps({"topics": self._topics}, sort_keys=True).encode()
        head = _HEAD.pack(_MAGIC, _VERSION, len(body)) + body
        data = head + blake3.blake3(head).digest(length=16)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _key(org_id: int, topic: str) -> str:
        return f"{org_id}/{topic}"

    def policy(self, org_id: int, topic: str, default: Policy) -> Policy:
        entry = self._topics.get(self._key(org_id, topic))
        if not entry:
            return default
        p = default
        if "retention_ms" in entry:
            p = replace(p, ms=entry["retention_ms"])
        if "retention_bytes" in entry:
            p = replace(p, bytes=entry["retention_bytes"])
        if "retention_groups" in entry:
            p = replace(p, groups=tuple(entry["retention_groups"]))
        return p

    def overrides(self, org_id: int, topic: str) -> dict[str, Any]:
        return dict(self._topics.get(self._key(org_id, topic), {}))

    def set(self, org_id: int, topic: str, **values: Any) -> None:
        """Sets (or, with the value "default", removes) per-topic overrides, durably."""
        if self.read_only:
            raise OSError(30, "read-only WAL")
        allowed = {"retention_ms", "retention_bytes", "retention_groups"}
        if not set(values) <= allowed:
            raise ValueError(f"unknown settings {sorted(set(values) - allowed)}")
        with self._lock:
            entry = dict(self._topics.get(self._key(org_id, topic), {}))
            for k, v in values.items():
                if v == "default":
                    entry.pop(k, None)
                else:
                    entry[k] = list(v) if k == "retention_groups" else v
            Policy(ms=entry.get("retention_ms"), bytes=entry.get("retention_bytes"))  # validates
            old = self._topics.get(self._key(org_id, topic))
            if entry:
                self._topics[self._key(org_id, topic)] = entry
            else:
                self._topics.pop(self._key(org_id, topic), None)
            try:
                self._save()
            except BaseException:
                if old is None:
                    self._topics.pop(self._key(org_id, topic), None)
                else:
                    self._topics[self._key(org_id, topic)] = old
                raise
