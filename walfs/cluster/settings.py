"""Per-topic settings on the meta topic: their record both ways, the map it replays into,
and the contract's settings/set_settings for the org a call names. Which values a topic
may hold, and what they mean for retention, is walfs/engine/settings.py's.

    b"s" u64 org | topic  -> JSON of the topic's overrides   (None: the defaults again)
"""

from __future__ import annotations

import json
from typing import Any

from walfs.cluster.layout import org_bytes
from walfs.cluster.producing import Writer
from walfs.engine.names import topic_bytes
from walfs.engine.settings import updated
from walfs.errors import WalCorruptError

KIND = b"s"  # the meta keys' first byte that is this module's


def settings_key(org: int, topic: str) -> bytes:
    return KIND + org_bytes(org) + topic_bytes(topic)


class Settings:
    """Every org's topic overrides, as replayed."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.by_topic: dict[tuple[int, str], dict[str, Any]] = {}

    def apply(self, rest: bytes, value: bytes | None, where: str) -> None:
        """One meta record of KIND (`rest`: the key after its first byte); under the
        state's lock, by the replay."""
        if len(rest) < 8:
            raise WalCorruptError(f"{where}: settings key too short")
        org = int.from_bytes(rest[:8], "little")
        topic = rest[8:].decode("utf-8", "replace")
        if value is None:
            self.by_topic.pop((org, topic), None)
        else:
            try:
                self.by_topic[(org, topic)] = dict(json.loads(value))
            except ValueError as e:
                raise WalCorruptError(f"{where}: settings unreadable: {e}") from None

    def get(self, org: int, topic: str) -> dict[str, Any]:
        return dict(self.by_topic.get((org, topic), {}))

    def overrides(self, org: int, topic: str) -> dict[str, Any] | None:
        """The topic's overrides as stored (None: none), not copied."""
        return self.by_topic.get((org, topic))

    def set(self, org: int, topic: str, values: dict[str, Any]) -> None:
        tb = topic_bytes(topic)
        entry = updated(self.by_topic.get((org, topic), {}), values)
        key = KIND + org_bytes(org) + tb
        self.writer.meta(key, json.dumps(entry).encode() if entry else None)

    def forget_topic(self, org: int, topic: str) -> None:
        """A tombstone for the settings of a topic whose last stream was deleted (not waited
        for)."""
        if (org, topic) in self.by_topic:
            self.writer.meta(settings_key(org, topic), None, wait=False)
