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


def find_in_segments(data: object, needle: bytes) -> tuple[str, int]:
    """(segment file, position) of the one place `needle` is stored in the data directory
    (a record's value: choose one that occurs once)."""
    hits = []
    for e in sorted(os.scandir(str(data)), key=lambda e: e.name):
        if e.name.startswith("seg-"):
            with open(e.path, "rb") as f:
                at = f.read().find(needle)
            if at >= 0:
                hits.append((e.path, at))
    assert len(hits) == 1, hits
    return hits[0]


def flip_byte(path: str, pos: int, mask: int = 0x40) -> None:
    """Damages one byte of a file in place (a bit flip on disk)."""
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ mask]))
