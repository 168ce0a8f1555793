"""The local engine's per-topic settings file, topics.conf (the settings' rules are
walfs/engine/settings.py's, shared by every engine; this module only stores them).

On disk (`topics.conf` and its copy `topics.conf.mirror` in the data directory, the one home
of per-topic settings; this module writes them): b"WALFSTOP" | u32 version (3) | u64 sequence
| u32 length N | N bytes of UTF-8 JSON {"topics": {"<org_id>/<topic>": {"retention_ms":
int|null, "retention_bytes": int|null, "retention_groups": [str, ...], "max_message_bytes":
int, "message_timestamp_type": str, "cleanup_policy": str}}} (every key optional) | the
first 16 bytes of blake3 of everything before. The two files hold the same bytes: every
change increments the sequence and replaces both in one durable step
(walfs.common.durable_file.write_mirrored: topics.conf, then the mirror, each tmp + fsync +
rename, then the directory fsync) before set() returns. Reading takes the copy with the
higher sequence among those that prove themselves; a missing, damaged or older copy beside
a good one is healed by a writer's open (rewritten from the good one, reported: Heals in
walfs/local/recovery_log.py) and served around by a read-only open; both bad fails the open
with WalCorruptError naming both files (settings are never silently reset to defaults).
Neither file: no per-topic settings.

Why an older copy is safe: the two copies differ only while a change is being written,
before set() returns, so the older one holds the settings as they were before a change
that was never acknowledged (a crash there leaves the old settings or the new, as one
atomically replaced file did); it is used only if the newer one is also damaged.

Versions 1 and 2 (one file, no sequence: b"WALFSTOP" | u32 version | u32 N | JSON | blake3;
version 1 without the last three keys) are read as they are, as sequence 0, and rewritten as
version 3 with the mirror at a writer's open; releases that read only versions 1 and 2
refuse a version 3 file (and the version 3 catalog beside it) instead of ignoring settings.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from typing import Any

import blake3

from walfs.common.durable_file import read_mirrored, write_mirrored
from walfs.engine.settings import SETTING_KEYS, Policy, policy_of, updated
from walfs.local.recovery_log import Heals

FILE_NAME = "topics.conf"
_MAGIC = b"WALFSTOP"
_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)
_HEAD = struct.Struct("<8sII")  # versions 1 and 2
_HEAD3 = struct.Struct("<8sIQI")  # version 3: the sequence


def _parse(data: bytes) -> tuple[int, dict[str, dict[str, Any]]]:
    """(sequence, topics) of one copy; ValueError saying what is wrong."""
    if len(data) < _HEAD.size + 16:
        raise ValueError(f"{len(data)} bytes, too short for a settings file")
    magic, version, n = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError(f"bad magic {magic!r}")
    if version not in _READABLE_VERSIONS:
        raise ValueError(f"version {version}, this walfs reads versions {_READABLE_VERSIONS}")
    seq = 0
    head = _HEAD.size
    if version >= 3:
        if len(data) < _HEAD3.size + 16:
            raise ValueError(f"{len(data)} bytes, too short for a settings file")
        _m, _v, seq, n = _HEAD3.unpack_from(data)
        head = _HEAD3.size
        if seq == 0:
            raise ValueError("sequence 0")
    if head + n + 16 != len(data):
        raise ValueError(f"length {n} does not match the file ({len(data)} bytes)")
    body = data[: head + n]
    if blake3.blake3(body).digest(length=16) != data[-16:]:
        raise ValueError("checksum mismatch")
    try:
        doc = json.loads(body[head:].decode("utf-8"))
        topics = doc["topics"]
        if not isinstance(topics, dict):
            raise TypeError("topics is not an object")
        return seq, {str(k): dict(v) for k, v in topics.items()}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"unreadable settings ({e})") from None


class TopicSettings:
    """Per-topic overrides of the WAL's default policy, persisted in topics.conf."""

    def __init__(self, dir_path: str, read_only: bool = False, heals: Heals | None = None) -> None:
        self.path = os.path.join(dir_path, FILE_NAME)
        self.read_only = read_only
        self.heals = Heals(read_only) if heals is None else heals
        self._lock = threading.Lock()
        self._seq = 0
        self._topics: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        got = read_mirrored(self.path, _parse)
        self._seq = got.seq
        if got.value is None:
            return {}
        got.heal(self.read_only, self.heals.note)
        if got.upgrade and not self.read_only:
            self._topics = got.value
            self._save()  # versions 1 and 2: rewritten as version 3, with the mirror
        return got.value

    def _save(self) -> None:
        body = json.dumps({"topics": self._topics}, sort_keys=True).encode()
        self._seq += 1  # also when the write fails: the next one must be newer than any copy
        head = _HEAD3.pack(_MAGIC, _VERSION, self._seq, len(body)) + body
        write_mirrored(self.path, head + blake3.blake3(head).digest(length=16))

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
