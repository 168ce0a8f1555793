"""Builds walfs._core, the cffi binding of the C core (csrc/), at install time.

The four public headers are the whole boundary, their declarations fed to cffi as they are:
csrc/walfs.h (the storage ABI), walfs_kafka.h (Kafka record batches), walfs_salvage.h
(fsck --repair's scanners) and walfs_debug.h (test hooks). One binding module for all."""

import pathlib
import re

from cffi import FFI

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
HEADERS = ("walfs.h", "walfs_kafka.h", "walfs_salvage.h", "walfs_debug.h")


def _declarations() -> str:
    text = "\n".join((CSRC / h).read_text() for h in HEADERS)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


ffibuilder = FFI()
ffibuilder.cdef(_declarations())
# The core's log callback (walfs_set_log), implemented in walfs/local/core.py; cffi takes the
# GIL for it whatever thread the core calls it from.
ffibuilder.cdef('extern "Python" void _walfs_core_log(int, const char *, const char *);')
ffibuilder.set_source(
    "walfs._core",
    "".join(f'#include "{h}"\n' for h in HEADERS),
    sources=[f"csrc/{p.name}" for p in sorted(CSRC.glob("*.c"))],
    include_dirs=["csrc"],
    libraries=["uring", "pthread"],
    # Hidden visibility and link-time optimisation: the core's calls between its files
    # (the read's record_locate, slot_get, fmt_rec_check_q) are direct calls or inlined,
    # not calls through the PLT; only the module's init function is exported.
    extra_compile_args=[
        "-std=gnu11",
        "-O2",
        "-fvisibility=hidden",
        "-flto=auto",
        "-Wall",
        "-Wextra",
        "-Werror",
    ],
    extra_link_args=["-O2", "-flto=auto"],
    # This file too: a change of the flags above rebuilds the core.
    depends=[f"csrc/{p.name}" for p in sorted(CSRC.glob("*.h"))] + ["walfs/_build.py"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
