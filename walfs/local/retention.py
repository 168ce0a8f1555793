"""The retention pass of the local engine: every stream (of every org) trimmed to what its
policy keeps (walfs.engine.settings.Policy: age, size in whole segment files, and the
consumer groups whose committed cursors it must not pass). The background thread runs it
(walfs/local/background.py), and LocalEngine.apply_retention on demand."""

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from walfs.engine import settings as retention
from walfs.engine.names import stream_key
from walfs.engine.settings import Policy
from walfs.engine.types import Change
from walfs.errors import OffsetOutOfRangeError
from walfs.local.core import Engine
from walfs.local.topic_index import Stream, TopicIndex

log = logging.getLogger("walfs")


class Policies(Protocol):
    """What the pass (and backpressure.py) read of the per-topic settings (LocalEngine.topics_conf)."""

    def policy(self, org_id: int, topic: str, default: Policy) -> Policy: ...


class Committed(Protocol):
    """What the pass reads of the cursor store (LocalEngine.cursors)."""

    def get(self, group: str, key: str) -> int | None: ...


class RetentionPass:
    def __init__(
        self,
        core: Engine,
        index: TopicIndex,
        policies: Policies,
        default: Policy,
        cursors: Committed,
        notify: Callable[[Change], None],
    ) -> None:
        self._core = core
        self._index = index
        self._policies = policies
        self._default = default
        self._cursors = cursors
        self._notify = notify
        self._segment_size = core.segment_size
        self._lock = threading.Lock()  # one pass at a time (the background one and callers')

    def apply(self, now_ms: int | None = None) -> dict[tuple[int, str, int], int]:
        """Trims every stream (of every org) to what its policy keeps; returns the new low
        watermarks of the streams it trimmed."""
        if self._core.read_only:
            return {}
        now = retention.now_ms() if now_ms is None else now_ms
        out = {}
        with self._lock:
            for s in self._index.org_streams_all():
                policy = self._policies.policy(s.org_id, s.name, self._default)
                if policy.unlimited:
                    continue
                try:
                    target = self.target(s, policy, now)
                except OffsetOutOfRangeError:
                    # A trim from another face (setfattr, DeleteRecords) moved the low
                    # watermark past what this pass had read: the next pass looks again.
                    continue
                if target is not None:
                    self._core.trim(s.stream_no, target)
                    out[(s.org_id, s.name, s.partition)] = target
                    self._notify(Change("trim", s.name, s.partition, s.org_id))
        return out

    def target(self, s: Stream, policy: Policy, now: int) -> int | None:
        """The offset the stream is trimmed to under `policy` at `now` (ms), or None."""
        core = self._core
        low, high = core.marks(s.stream_no)[:2]
        if high == low:
            return None
        target = low
        if policy.ms is not None:
            target = max(target, core.offset_for_time(s.stream_no, now - policy.ms))
        cap = low  # what the size limit alone demands
        if policy.bytes is not None:
            # Whole segment files (retention.file_budget): the stream keeps its newest `keep`
            # files, from the first record of the oldest of them.
            keep = retention.file_budget(policy.bytes, self._segment_size)[0]
            files, firsts = core.stream_files(s.stream_no, 64)
            if files > keep:
                cap = max(low, firsts[files - keep])
            target = max(target, cap)
        if policy.groups and target > low:
            key = stream_key(s.org_id, s.topic_hash, s.partition)
            safe = min(self._cursors.get(g, key) or 0 for g in policy.groups)
            if target > safe:
                target = max(safe, cap)
                if cap > safe:
                    log.warning(
                        "retention of %r[%d]: the size limit (%d bytes) trims to %d, past what "
                        "consumer groups %s have committed (%d)",
                        s.name,
                        s.partition,
                        policy.bytes,
                        cap,
                        ",".join(policy.groups),
                        safe,
                    )
        target = min(target, high)
        return target if target > low else None
