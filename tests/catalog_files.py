"""The catalog's two copies on disk (streams.cat and streams.cat.mirror, catalog version 3;
csrc/format.c): their entries, damage to one or both, and older directories made from a
new one (the fixture generator of the upgrade tests)."""

from __future__ import annotations

import os
from collections.abc import Callable

from walfs.wire.batch_codec import crc32c

CAT = "streams.cat"
MIRROR = "streams.cat.mirror"
COPIES = (CAT, MIRROR)
HDR = 64
SEG_HDR = 4096


def cat_entries(path: str) -> list[tuple[int, int, int]]:
    """(offset, type, length) of each catalog entry (as their length fields chain them)."""
    data = open(path, "rb").read()
    out, pos = [], HDR
    while pos + 8 <= len(data):
        typ = int.from_bytes(data[pos + 4 : pos + 6], "little")
        ln = int.from_bytes(data[pos + 6 : pos + 8], "little")
        if ln < 8:
            break
        out.append((pos, typ, ln))
        pos += ln
    return out


def wal_seed(wal_dir: str) -> int:
    """The WAL's crc seed, from whichever copy's header names the uuid."""
    for name in COPIES:
        p = os.path.join(wal_dir, name)
        if os.path.exists(p):
            uuid = int.from_bytes(open(p, "rb").read(HDR)[16:24], "little")
            if uuid:
                return (uuid ^ (uuid >> 32)) & 0xFFFFFFFF
    raise AssertionError("no catalog header")


def seal(entry: bytes, seed: int) -> bytes:
    return crc32c(entry[4:], seed).to_bytes(4, "little") + entry[4:]


def both(wal_dir: str, damage: Callable[[str], None]) -> None:
    """The same damage to both copies."""
    for name in COPIES:
        damage(os.path.join(wal_dir, name))


def flip(path: str, offset: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))


def zero(path: str, offset: int, length: int) -> None:
    """A latent sector error read back as zeros (512 bytes) or a lost 4 KiB page."""
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(offset)
        f.write(bytes(max(0, min(length, size - offset))))


def to_legacy(wal_dir: str, version: int) -> None:
    """Rewrites a closed version 3 data directory as an older release left it: one copy,
    entries sealed with the WAL's seed alone, SEGMENT entries without a creation time
    (version 2) or none at all and no cursor manifest (version 1)."""
    path = os.path.join(wal_dir, CAT)
    data = open(path, "rb").read()
    seed = wal_seed(wal_dir)
    hdr = bytearray(data[:HDR])
    hdr[8:12] = version.to_bytes(4, "little")
    hdr[40:60] = bytes(20)
    hdr[60:64] = crc32c(bytes(hdr[:60]), 0).to_bytes(4, "little")
    body = []
    for off, typ, ln in cat_entries(path):
        e = bytearray(data[off : off + ln])
        if typ in (6, 7) and version < 2:
            continue
        if typ == 6:
            e = e[:16]
            e[6:8] = (16).to_bytes(2, "little")
        body.append(seal(bytes(e), seed))
    with open(path, "wb") as f:
        f.write(bytes(hdr) + b"".join(body))
    os.unlink(os.path.join(wal_dir, MIRROR))
    for name in ("cursors.manifest.mirror", "topics.conf.mirror"):  # older releases kept one copy
        if os.path.exists(os.path.join(wal_dir, name)):
            os.unlink(os.path.join(wal_dir, name))
    if version < 2 and os.path.exists(os.path.join(wal_dir, "cursors.manifest")):
        os.unlink(os.path.join(wal_dir, "cursors.manifest"))


def version(wal_dir: str, name: str = CAT) -> int:
    return int.from_bytes(open(os.path.join(wal_dir, name), "rb").read(12)[8:12], "little")
