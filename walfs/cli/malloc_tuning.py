"""glibc malloc settings for a server process that allocates and frees buffers of about
1 MiB per request: `walfs serve` (a Kafka produce request is received into a buffer of
its own and split into another, walfs/kafka/framing.py and walfs/wire/record_batch.py).

With glibc's defaults, buffers of that size either come from mmap (each one a fresh
mapping, every page faulted in and zeroed by the kernel) or, once its threshold has
adapted, from the heap, whose top is given back to the kernel (trimmed) as soon as more
than twice that threshold is free there, so the next request faults the same pages in
again. Measured in the Kafka listener under Kafka's ProducerPerformance at 1 KiB records:
300-400 page faults per 1 MiB produce request, a quarter of the server's CPU
(docs/notes/2026-11-24-kafka-produce-path.md, "The produce path at 1 KiB and 16 KiB, per request").
Here the mmap
threshold is fixed at 32 MiB (glibc's own ceiling for its adaptive threshold) and up to
64 MiB of freed heap is kept for reuse, as a JVM keeps its heap: the process's resident
size may stay up to that much above what it uses. Another C library (or none): nothing
changes."""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("walfs")

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20


def keep_freed_buffers() -> bool:
    """Sets the thresholds above in this process; True when the C library took them."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not done:
        log.info("malloc thresholds not set (not glibc?): large request buffers may page-fault")
    return done
