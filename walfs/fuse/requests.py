"""What happens around every FUSE request handler, in one wrapper (one coroutine frame per
request: on small requests each frame is a measurable share of the daemon's time):

- the guard: pyfuse3 answers FUSEError with its errno, but any other exception escapes
  its worker task, ends pyfuse3.main() and takes the whole mount down with the request
  unanswered. A bug or an unexpected WAL error must cost one request (EIO, logged with
  its traceback), never the mount;
- the timing: when the handlers' owner has a `request_latency` histogram
  (walfs.metrics.Latency, set by the daemon), each request is observed there by op, and
  counted as an error when it raised.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyfuse3

from walfs.fuse.errnos import fuse_error_for

log = logging.getLogger("walfs.fuse")


def wrap_handlers(cls: type, names: Iterable[str]) -> None:
    """Guards and times each named request handler of `cls`."""
    for name in names:
        setattr(cls, name, _wrap(name, getattr(cls, name)))


def _wrap(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter

    @functools.wraps(fn)
    async def handler(self: Any, *args: Any) -> Any:
        latency = self.request_latency
        t0 = clock()
        failed = True
        try:
            out = await fn(self, *args)
            failed = False
            return out
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:
            log.exception("%s%r failed", op, args[:2])
            raise fuse_error_for(exc) from exc
        finally:
            if latency is not None:
                latency.observe(op, clock() - t0, failed)

    return handler
