"""Turns off FUSE_AUTO_INVAL_DATA for the mount, which pyfuse3 offers no way to do.

Why: libfuse turns FUSE_AUTO_INVAL_DATA on by default, and with it the kernel drops every
cached page of a file whenever an attribute reply shows a new mtime, and asks the daemon
for the attributes before every read() whose cached ones expired. A topic only grows:
bytes before its end never change, so a new mtime says nothing about the cached ones,
and walfs drops what a trim or a delete changes itself (walfs.fuse.page_push.PagePusher.drop).
With the flag on, the mount had to move mtimes in whole minutes, and a write that
crossed a minute lost every page pushed before it (docs/mount.md, "Caching"). A new size
learned from an attribute reply still drops the file's pages (that stays: the last
pushed page may end inside the new bytes).

How: pyfuse3 answers the kernel's INIT with its own callback, which clears some
capabilities and never this one (pyfuse3 3.5, handlers.pxi `fuse_init`). libfuse copies
the table of callbacks into its session at `fuse_session_new` (pyfuse3.init), and INIT
comes later, from the first request read in pyfuse3.main. So, between the two, the
session's copy of the `init` pointer is replaced by a wrapper that calls pyfuse3's and
then clears FUSE_CAP_AUTO_INVAL_DATA in `conn->want`. The session's address is pyfuse3's
module variable `session` (its symbol in pyfuse3's symbol table); the table is found in
the session by its first pointers, which equal those of pyfuse3's own table
(`fuse_ops`). Every step checks what it finds and gives up, leaving the mount as it was,
when anything does not match (a stripped or rebuilt pyfuse3, another libfuse): the mount
then keeps the minute-step mtimes (`active()` is False).
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct

import pyfuse3

log = logging.getLogger("walfs.fuse")

FUSE_CAP_AUTO_INVAL_DATA = 1 << 12
_PTR = ctypes.sizeof(ctypes.c_void_p)
# struct fuse_conn_info (fuse_common.h, a public ABI): five unsigned, capable, then want.
_WANT = 24
# How far into struct fuse_session the callback table may start (libfuse 3.x: ~40 bytes).
_SEARCH = 512

_INIT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_ORIG_INIT = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

_state: dict[str, object] = {}


def _symbols(path: str, names: set[str]) -> dict[str, int]:
    """st_value of `names` in the ELF symbol tables of `path` (.symtab and .dynsym)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}  # not a little-endian ELF64
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out: dict[str, int] = {}
    for _name, typ, _flags, _addr, off, size, link, _info, _align, entsize in sections:
        if typ not in (2, 11) or not entsize:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        stroff = sections[link][4]
        for k in range(size // entsize):
            st_name, _i, _o, _shndx, st_value, _sz = struct.unpack_from("<IBBHQQ", data, off + k * entsize)
            end = data.index(b"\0", stroff + st_name)
            name = data[stroff + st_name : end].decode("ascii", "replace")
            if name in names and st_value:
                out[name] = st_value
    return out


def _load_base(path: str) -> int | None:
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == real and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16)
    return None


def _find(path: str) -> tuple[int, int] | None:
    """(address of pyfuse3's `session` variable, of its `fuse_ops` table), checked."""
    names = {"__pyx_v_7pyfuse3_session", "__pyx_v_7pyfuse3_fuse_ops", "PyInit_pyfuse3"}
    syms = _symbols(path, names)
    base = _load_base(path)
    if base is None or set(syms) != names:
        return None
    # The base is right when the exported module init lands where the loader put it.
    exported = ctypes.cast(ctypes.CDLL(path).PyInit_pyfuse3, ctypes.c_void_p).value
    if exported != base + syms["PyInit_pyfuse3"]:
        return None
    return base + syms["__pyx_v_7pyfuse3_session"], base + syms["__pyx_v_7pyfuse3_fuse_ops"]


def no_auto_inval_data() -> bool:
    """Call after pyfuse3.init() and before pyfuse3.main(): the kernel's INIT is then
    answered without FUSE_CAP_AUTO_INVAL_DATA. True when the wrapper is in place."""
    _state.clear()
    try:
        found = _find(pyfuse3.__file__)
        if found is None:
            log.info("pyfuse3's session not found: FUSE_AUTO_INVAL_DATA stays on")
            return False
        session_var, ops = found
        session = ctypes.c_void_p.from_address(session_var).value
        head = ctypes.string_at(ops, 3 * _PTR)  # init, destroy, lookup
        if not session or head[:_PTR] == b"\0" * _PTR or head[2 * _PTR :] == b"\0" * _PTR:
            return False
        window = ctypes.string_at(session, _SEARCH + 3 * _PTR)
        at = window.find(head)
        if at < 0 or at % _PTR or window.find(head, at + 1) >= 0:
            return False
        slot = ctypes.c_void_p.from_address(session + at)
        if not slot.value:
            return False
        orig = _ORIG_INIT(slot.value)

        def init(userdata: int | None, conn: int | None) -> None:
            orig(userdata, conn)
            if conn:
                want = ctypes.c_uint.from_address(conn + _WANT)
                want.value &= ~FUSE_CAP_AUTO_INVAL_DATA
                _state["answered"] = True

        wrapper = _INIT(init)
        _state["wrapper"] = wrapper  # the kernel's INIT calls it later: keep it alive
        slot.value = ctypes.cast(wrapper, ctypes.c_void_p).value
        _state["active"] = True
        return True
    except Exception:
        log.exception("turning off FUSE_AUTO_INVAL_DATA failed: it stays on")
        return False


def active() -> bool:
    """Whether the kernel's INIT was answered without FUSE_CAP_AUTO_INVAL_DATA."""
    return bool(_state.get("answered"))
