"""Backpressure: the disk a stream with a size limit (retention_bytes) may take.

The core charges such a stream for at most its file cap of segment files
(walfs.engine.settings.file_budget; csrc/budget.c) and refuses an append past it with
EDQUOT, appending nothing. Such an append waits for the background pass to trim and
reclaim, then fails with ENOSPC: appends wait for retention rather than take the disk past
the bound. Between passes, a size-limited stream's growth is counted so that the pass runs
as soon as the stream is charged for more files than a pass keeps."""

import errno
import time
from collections.abc import Callable, Iterable
from typing import Any

from walfs.common.metrics import WalStats
from walfs.engine import settings as retention
from walfs.engine.settings import Policy
from walfs.errors import WalIOError
from walfs.local.background import Background
from walfs.local.core import MAX_U32, Engine
from walfs.local.retention import Policies
from walfs.local.topic_index import Stream


class Room:
    """Size limits (a cache, with each stream's file cap set in the core), the growth
    count that wakes the pass, and the wait for room. Shared by an engine's org views."""

    def __init__(
        self,
        core: Engine,
        policies: Policies,
        default: Policy,
        background: Background,
        stats: WalStats,
        backpressure_s: float,
    ) -> None:
        self._core = core
        self._policies = policies
        self._default = default
        self._background = background
        self._stats = stats
        self._segment_size = core.segment_size
        # How long an append past its stream's size limit + one segment waits for a
        # retention pass to make room before it fails with ENOSPC.
        self._backpressure_s = backpressure_s
        self.limits: dict[int, int | None] = {}  # stream_no -> retention bytes (a cache)
        self._grown: dict[int, int] = {}  # stream_no -> bytes appended since the last look
        # A size-limited stream's files are counted after every this many appended bytes.
        self._growth_step = max(self._segment_size // 16, 4096)

    def limit_of(self, s: Stream) -> int | None:
        """The stream's size limit (cached), with its file cap set in the core."""
        limit = self.limits.get(s.stream_no, -1)
        if limit == -1:
            limit = self._policies.policy(s.org_id, s.name, self._default).bytes
            cap = 0 if limit is None else retention.file_budget(limit, self._segment_size)[1]
            self._core.set_file_cap(s.stream_no, min(cap, MAX_U32))
            self.limits[s.stream_no] = limit
        return limit

    def caps_at_open(self, streams: Iterable[Stream]) -> None:
        """At open, before any append: the file cap of every size-limited stream among
        `streams` (every stream when the WAL's default has a size limit, else those of the
        topics whose settings set one). The core opens with no cap (0) on every stream,
        which is already right for the others: their limit is cached by their first
        append (limit_of), so that an open of 100,000 streams without limits makes no
        call and no entry per stream."""
        policies, default = self._policies, self._default
        for s in streams:
            if policies.policy(s.org_id, s.name, default).bytes is not None:
                self.limit_of(s)

    def note_growth(self, s: Stream, nbytes: int) -> None:
        """Wakes the background pass as soon as a size-limited stream is charged for more
        segment files than a pass keeps (counted every _growth_step appended bytes)."""
        limit = self.limit_of(s)
        if limit is not None:
            grown = self._grown.get(s.stream_no, 0) + nbytes
            if grown >= self._growth_step:
                grown = 0
                files = self._core.stream_files(s.stream_no)[0]
                if files > retention.file_budget(limit, self._segment_size)[0]:
                    self._background.wake()
            self._grown[s.stream_no] = grown

    def with_room(self, s: Stream, attempt: Callable[[], Any]) -> Any:
        """Runs an append; while the core refuses it because its stream is at its file cap
        (EDQUOT: nothing was appended; retention.file_budget), wakes the background pass and
        waits for it to trim and reclaim, then tries again, for up to backpressure_s. Past
        that the append fails with WalIOError(ENOSPC) naming the last pass's error:
        appends wait for retention rather than take the disk past the bound."""
        deadline = None
        while True:
            try:
                return attempt()
            except WalIOError as e:
                if e.errno != errno.EDQUOT:
                    raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + self._backpressure_s
                self._stats.backpressure_waits += 1
            if now >= deadline or not self._background.running:
                limit = self.limits.get(s.stream_no)
                last_error = self._background.last_error
                why = f": the last pass failed: {last_error}" if last_error else ""
                raise WalIOError(
                    errno.ENOSPC,
                    f"append to {s.name!r}[{s.partition}]: the stream is at its size limit "
                    f"({limit} bytes) plus one segment ({self._segment_size} bytes) and "
                    f"retention made no room within {self._backpressure_s} s{why}",
                )
            self._background.wait_for_pass(deadline - now)
