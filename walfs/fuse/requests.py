"""What happens around every FUSE request handler, in one wrapper (one coroutine frame per
request: on small requests each frame is a measurable share of the daemon's time):

- the guard: pyfuse3 answers FUSEError with its errno, but any other exception escapes
  its worker task, ends pyfuse3.main() and takes the whole mount down with the request
  unanswered. A bug or an unexpected WAL error must cost one request (EIO, logged with
  its traceback), never the mount;
- the timing: each request is counted in the handlers' owner's `request_latency`
  (walfs.common.metrics.LoopLatency, which the daemon exposes) by op, and as an error when it
  raised. A request that succeeds updates the op's slot inline (no method call, no
  lock): with five requests per `echo >> t`, a locked observe() per request was a
  measurable share of the daemon's time.
"""

from __future__ import annotations

import bisect
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyfuse3

from walfs.common.metrics import BUCKETS, LoopLatency
from walfs.fuse.errnos import fuse_error_for

log = logging.getLogger("walfs.fuse")


def wrap_handlers(cls: type, names: Iterable[str]) -> None:
    """Guards and times each named request handler of `cls` (whose instances have a
    `request_latency`, a walfs.common.metrics.LoopLatency with a slot for each name)."""
    for name in names:
        setattr(cls, name, _wrap(name, getattr(cls, name)))


def _wrap(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter
    where = bisect.bisect_left
    bounds = BUCKETS
    total = LoopLatency.SUM

    @functools.wraps(fn)
    async def handler(self: Any, *args: Any) -> Any:
        t0 = clock()
        try:
            out = await fn(self, *args)
        except BaseException as exc:
            # Refusals (FUSEError), failures and cancellation alike count as errors.
            self.request_latency.observe(op, clock() - t0, True)
            if isinstance(exc, pyfuse3.FUSEError) or not isinstance(exc, Exception):
                raise
            log.exception("%s%r failed", op, args[:2])
            raise fuse_error_for(exc) from exc
        seconds = clock() - t0
        slot = self.request_latency.slots[op]
        slot[where(bounds, seconds)] += 1
        slot[total] += seconds
        return out

    return handler
