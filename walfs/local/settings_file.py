"""The local engine's per-topic settings file, topics.conf (the settings' rules are
walfs/engine/settings.py's, shared by every engine; this module only stores them).

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
from typing import Any

import blake3

from walfs.common.durable_file import write_durable
from walfs.engine.settings import SETTING_KEYS, Policy, policy_of, updated
from walfs.errors import WalCorruptError

FILE_NAME = "topics.conf"
_MAGIC = b"WALFSTOP"
_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_HEAD = struct.Struct("<8sII")


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
        write_durable(self.path, head + blake3.blake3(head).digest(length=16), tmp=self.path + ".tmp")

    @staticmethod
    def _key(org_id: int, topic: str) -> str:
        return f"{org_id}/{topic}"

    def policy(self, org_id: int, topic: str, default: Policy) -> Policy:
        return policy_of(self._topics.get(self._key(org_id, topic)), default)

    def topics_setting(self, key: str) -> list[tuple[int, str]]:
        """(org_id, topic) of every topic whose overrides set `key` (to anything but null):
        the open looks at those, not at every stream."""
        with self._lock:
            keys = [k for k, v in self._topics.items() if v.get(key) is not None]
        out = []
        for k in keys:
            org, topic = k.split("/", 1)
            out.append((int(org), topic))
        return out

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
