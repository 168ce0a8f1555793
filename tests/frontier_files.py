"""A run's durable frontier header on disk (docs/format.md "Block run"): its clean flag, and
the frontier an older writer left (no flag), which every open verifies record by record."""

from __future__ import annotations

from crc32c import crc32c

FRONTIER_AT = 256  # within the run
CLEAN = 1  # byte 72: no record below the frontier is known damaged


def seeded_crc(seed: int, data: bytes) -> int:
    """CRC-32C continuing from `seed`, as the core seals its headers (the crc32c package: a
    second implementation, not the core's)."""
    return int(crc32c(data, seed))


def read_frontier(path: str, run: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(run + FRONTIER_AT)
        h = f.read(128)
    assert h[:8] == b"WALFSBLK" and int.from_bytes(h[10:12], "little") == 3, "no frontier header"
    return h


def frontier_flags(path: str, run: int) -> int:
    return int.from_bytes(read_frontier(path, run)[72:76], "little")


def frontier_count(path: str, run: int) -> int:
    return int.from_bytes(read_frontier(path, run)[56:64], "little")


def as_an_older_writers(path: str, run: int) -> None:
    """Rewrites the run's frontier as a writer before the clean flag wrote it (bytes 72..76
    zero, its crc under the WAL's seed): an open verifies that run's records one by one."""
    h = bytearray(read_frontier(path, run))
    assert int.from_bytes(h[72:76], "little") == CLEAN
    uuid = int.from_bytes(h[16:24], "little")
    h[72:76] = bytes(4)
    h[124:128] = seeded_crc((uuid ^ (uuid >> 32)) & 0xFFFFFFFF, bytes(h[:124])).to_bytes(4, "little")
    with open(path, "r+b") as f:
        f.seek(run + FRONTIER_AT)
        f.write(h)
