"""Retention: how long a topic keeps its records, and the per-topic settings file.

A policy has three optional parts (Kafka's names in brackets):
- `ms` [retention.ms]: records appended more than this many ms ago go;
- `bytes` [retention.bytes]: the disk a stream's segment files may take, counted in whole
  segment files (file_budget below; docs/operations.md "How much disk a size limit uses");
- `groups`: never delete what these consumer groups have not committed (HoraeDB's safe
  offset), except that `bytes` is a hard cap that still wins (logged when it does).
None means "no limit". `Wal.apply_retention` turns policies into trims (offsets are
never renumbered; readers of a trimmed range get OffsetOutOfRangeError, OFFSET_OUT_OF_RANGE
on Kafka; the mount's files start at the first kept record, docs/mount.md), and
reclamation then deletes the segment files that hold only trimmed records. The daemons
run it in the background.

Besides the retention policy a topic may carry the other Kafka topic configs walfs
honours (walfs/kafka/topic_configs.py maps Kafka's names onto these keys):
- `max_message_bytes` [max.message.bytes]: the largest record batch a produce may send;
- `message_timestamp_type` [message.timestamp.type]: "CreateTime" or "LogAppendTime";
- `cleanup_policy` [cleanup.policy]: "delete" (the only policy walfs has; no compaction).

On disk (`topics.conf` in the data directory, the one home of per-topic settings; this
module writes it): b"WALFSTOP" | u32 version (2) | u32 length N | N bytes of UTF-8 JSON
{"topics": {"<org_id>/<topic>": {"retention_ms": int|null, "retention_bytes": int|null,
"retention_groups": [str, ...], "max_message_bytes": int, "message_timestamp_type": str,
"cleanup_policy": str}}} (every key optional) | the first 16 bytes of blake3 of
everything before. Version 1 files (written before the last three keys existed, same
layout) are read as they are and rewritten as version 2 at the next change; walfs
releases that read only version 1 refuse a version 2 file instead of ignoring settings.
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
import time
from dataclasses import dataclass, field, replace
from typing import Any

import blake3

from walfs.errors import WalCorruptError

FILE_NAME = "topics.conf"
# TEST ONLY: names a file holding the retention clock (ms since the epoch) for the daemon
# tests, which cannot pass now_ms to the background pass. Never set in production.
CLOCK_FILE_ENV = "WALFS_TEST_CLOCK_FILE"
_MAGIC = b"WALFSTOP"
_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_RETENTION_KEYS = ("retention_ms", "retention_bytes", "retention_groups")
# The other per-topic settings and their validators (value -> error text, or None when valid).
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _check_max_message_bytes(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
    return None if ok else f"max_message_bytes must be an int in 0..2**31-1, not {v!r}"


def _check_timestamp_type(v: Any) -> str | None:
    return None if v in _TIMESTAMP_TYPES else f"message_timestamp_type must be one of {_TIMESTAMP_TYPES}"


def _check_cleanup_policy(v: Any) -> str | None:
    return None if v == "delete" else f"cleanup_policy must be 'delete' (walfs does not compact), not {v!r}"


_OTHER_KEYS = {
    "max_message_bytes": _check_max_message_bytes,
    "message_timestamp_type": _check_timestamp_type,
    "cleanup_policy": _check_cleanup_policy,
}
SETTING_KEYS = (*_RETENTION_KEYS, *_OTHER_KEYS)
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


def now_ms() -> int:
    """The clock retention by age reads (ms since the epoch, like the append times the
    core stamps): the wall clock, unless $WALFS_TEST_CLOCK_FILE names a file holding an
    integer (tests move time forward by rewriting it; an empty or missing file means the
    wall clock, anything else is an error)."""
    path = os.environ.get(CLOCK_FILE_ENV)
    if path:
        try:
            with open(path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return int(text)
    return int(time.time() * 1000)


def file_budget(limit: int, segment_size: int) -> tuple[int, int]:
    """The one rule that turns a size limit into segment files (whole files: the unit the
    core allocates, at full size, and the unit reclamation deletes; csrc/budget.c says
    which files a stream is charged for): (keep, cap).

    - keep: a retention pass trims a stream charged for more files than this to the first
      record of its oldest kept file: floor(limit / segment), at least 1 (the file being
      filled is never reclaimed, so a stream always has one).
    - cap: keep + 1. Appends may take the stream to this many files, so its disk is at
      most limit + one segment at any moment (max(limit, segment) + one segment for a
      limit under one segment). An append that needs one more file waits for a pass
      (backpressure)."""
    keep = max(1, limit // segment_size)
    return keep, keep + 1


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


def policy_of(entry: dict[str, Any] | None, default: Policy) -> Policy:
    """The policy in force for a topic with these overrides (the one merge rule)."""
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


def updated(entry: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A topic's overrides after setting `values` (the value "default" removes one),
    checked (ValueError): what every engine then stores."""
    check_settings(values)
    out = dict(entry)
    for k, v in values.items():
        if v == "default":
            out.pop(k, None)
        else:
            out[k] = list(v) if k == "retention_groups" else v
    Policy(ms=out.get("retention_ms"), bytes=out.get("retention_bytes"))  # validates
    return out


def check_settings(values: dict[str, Any]) -> None:
    """The one check of per-topic setting names and values (every engine stores what it
    passes): ValueError naming the first problem."""
    if not set(values) <= set(SETTING_KEYS):
        raise ValueError(f"unknown settings {sorted(set(values) - set(SETTING_KEYS))}")
    for k, v in values.items():
        problem = _OTHER_KEYS[k](v) if k in _OTHER_KEYS and v != "default" else None
        if problem:
            raise ValueError(problem)


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
        if version not in _READABLE_VERSIONS:
            raise WalCorruptError(
                f"{self.path}: version {version}, this walfs reads versions {_READABLE_VERSIONS}"
            )
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
        return policy_of(self._topics.get(self._key(org_id, topic)), default)

    def overrides(self, org_id: int, topic: str) -> dict[str, Any]:
        return dict(self._topics.get(self._key(org_id, topic), {}))

    def value(self, org_id: int, topic: str, key: str, default: Any = None) -> Any:
        """One setting of a topic (``default`` when the topic has no override)."""
        entry = self._topics.get(self._key(org_id, topic))
        return entry.get(key, default) if entry else default

    def forget(self, org_id: int, topic: str) -> None:
        """Removes every override of a topic (it was deleted), durably."""
        if self._topics.get(self._key(org_id, topic)):
            self.set(org_id, topic, **{k: "default" for k in SETTING_KEYS})

    def set(self, org_id: int, topic: str, **values: Any) -> None:
        """Sets (or, with the value "default", removes) per-topic overrides, durably."""
        if self.read_only:
            raise OSError(30, "read-only WAL")
        with self._lock:
            entry = updated(self._topics.get(self._key(org_id, topic), {}), values)
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
