"""walfs/cli/malloc_tuning.py: in a process that took the settings, a produce request's two
large buffers (the frame, ~1 MiB, and its split records, a little more) are allocated and
freed request after request without faulting their pages in again; with glibc's defaults
each cycle faults hundreds of pages (counted by the kernel: ru_minflt)."""

from __future__ import annotations

import subprocess
import sys

CYCLE = """
import resource, sys
from walfs.cli.malloc_tuning import keep_freed_buffers
took = keep_freed_buffers() if sys.argv[1] == "tuned" else None
def cycles(n):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        frame = bytearray(1 << 20)
        records = bytearray((1 << 20) + 70000)
        del frame
        del records
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / n
cycles(3)
print(took, cycles(50))
"""


def faults_per_cycle(mode: str) -> tuple[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CYCLE, mode], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    return out[0], float(out[1])


def test_large_buffers_are_reused_without_page_faults() -> None:
    took, tuned = faults_per_cycle("tuned")
    assert took == "True"
    assert tuned < 10
    _, plain = faults_per_cycle("plain")
    assert plain > 100  # what the settings remove (2 MiB a cycle: ~500 pages)
