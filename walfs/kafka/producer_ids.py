"""Producer ids for idempotent producers (kafka-python enables idempotence by
default, and asks for an id before its first produce).

Ids are only handed out and a retried batch is recognised by its (producer id,
partition, base sequence): enough to drop the duplicate a producer creates when it
resends a batch whose response it lost. The state lives in memory; after a restart
producers get new ids (the first id is seeded from the clock so they do not repeat)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class ProducerIds:
    _next: int = field(default_factory=lambda: int(time.time() * 1000) & 0x3FFFFFFFFFFF)
    # (producer_id, topic, partition) -> (base_sequence, record count, base_offset)
    _last: dict[tuple[int, str, int], tuple[int, int, int]] = field(default_factory=dict)

    def allocate(self) -> int:
        pid = self._next
        self._next += 1
        return pid

    def duplicate_of(self, pid: int, topic: str, partition: int, seq: int, count: int) -> int | None:
        """The offset the same batch was written at before, if this is a resend."""
        if pid < 0 or seq < 0:
            return None
        last = self._last.get((pid, topic, partition))
        if last is not None and last[0] == seq and last[1] == count:
            return last[2]
        return None

    def remember(self, pid: int, topic: str, partition: int, seq: int, count: int, base_offset: int) -> None:
        if pid >= 0 and seq >= 0:
            self._last[(pid, topic, partition)] = (seq, count, base_offset)
