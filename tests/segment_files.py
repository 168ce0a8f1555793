"""What a data directory's segment files take (for the size-limit tests on every face)."""

from __future__ import annotations

import os


def segment_bytes(data: object) -> int:
    """The apparent size of the data directory's segment files (those deleted meanwhile
    skipped)."""
    total = 0
    for e in os.scandir(str(data)):
        if e.name.startswith("seg-"):
            try:
                total += e.stat().st_size
            except FileNotFoundError:
                pass
    return total
