"""Page-cache state for benchmarks on a virtual machine that hands free memory back.

The machines these benchmarks run on are Firecracker guests booted with free page
reporting (`page_reporting.page_reporting_order` on the kernel command line): memory the
guest has not touched lately belongs to the host again, and the guest's next write into
it faults on the host inside whatever instruction touched it. A page-cache write into
such memory costs 1.4-2.2 ms of system time per MiB, one into a page the kernel freed
lately 0.09-0.16 ms (docs/benchmarks.md, "The produce path per byte"). Which writer of a
benchmark meets such memory depends on what ran before it, so a run's figures would say
more about the order of its writes than about the writers.

`recycle(where, mib)` writes `mib` MiB into a file under `where` and deletes it: the
next writes of up to that size take pages the kernel has just freed, as on a machine
whose page cache is full and recycles. `state()` is what the JSON records: the reporting
parameters, when the kernel has them, and the cost per MiB the recycling write met.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

REPORTING = Path("/sys/module/page_reporting/parameters")
BLOCK = 1 << 20


def recycle(where: Path, mib: int) -> float:
    """Write `mib` MiB under `where`, delete it; the system ms per MiB the write cost."""
    if mib <= 0:
        return 0.0
    junk = Path(where) / ".recycle"
    block = os.urandom(BLOCK)
    fd = os.open(junk, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        r0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        for k in range(mib):
            os.pwrite(fd, block, k * BLOCK)
        spent = resource.getrusage(resource.RUSAGE_SELF).ru_stime - r0
    finally:
        os.close(fd)
        junk.unlink()
    return round(spent / mib * 1e3, 3)


def state() -> dict[str, Any]:
    """The kernel's page-reporting parameters (empty without the module)."""
    out: dict[str, Any] = {}
    if REPORTING.is_dir():
        for p in sorted(REPORTING.iterdir()):
            try:
                out[p.name] = p.read_text().strip()
            except OSError:
                continue
    return out
