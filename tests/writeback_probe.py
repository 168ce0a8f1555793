"""What the writeback tests (test_wal_early_writeback.py, test_wal_run_writeback.py)
append, and the page cache's state of segment files as they read it: cachestat(2)
(Linux 6.5), the kernel's own count of a file's cached and dirty pages."""

from __future__ import annotations

import array
import ctypes
import os
import pathlib
from typing import Any

import walfs

VALUE = 1024

_SYS_CACHESTAT = 451  # the same number on every architecture (asm-generic)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    ]


def dirty_pages(path: pathlib.Path) -> tuple[int, int]:
    """(cached, dirty) pages of the whole file, from cachestat(2)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        st = _Stat()
        if libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(_Range(0, 0)), ctypes.byref(st), 0) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"cachestat(2) (Linux >= 6.5) failed: {os.strerror(e)}")
        return st.nr_cache, st.nr_dirty
    finally:
        os.close(fd)


def values(first: int, nbytes: int) -> list[bytes]:
    return [f"{first + i:012d}".encode().ljust(VALUE, b"v") for i in range(nbytes // VALUE)]


def batch(vs: list[bytes]) -> tuple[bytes, array.array, array.array]:
    return b"".join(vs), array.array("I", bytes(4 * len(vs))), array.array("I", map(len, vs))


def segment_files(d: str) -> list[pathlib.Path]:
    return sorted(pathlib.Path(d).glob("seg-*.wal"))


def check_recovered_prefix(
    wal_dir: str, geometry: dict[str, Any], synced: list[bytes], unsynced: list[bytes], keep_permille: int
) -> None:
    """Reopens topic "t" after a simulated power cut (debug.power_cut): every synced record
    is there; of the unsynced ones, recovery keeps a prefix of whole records, none when
    no page survived, never a damaged one."""
    w = walfs.Wal(wal_dir, fsync="never", **geometry)
    try:
        end = w.info("t").high_watermark
        assert len(synced) <= end <= len(synced) + len(unsynced)
        if keep_permille == 0:
            assert end == len(synced)
        got = w.read("t", 0, max_records=end + 10, max_bytes=64 << 20)
        assert got == (synced + unsynced)[:end]
    finally:
        w.close()
