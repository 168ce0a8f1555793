"""Builds walfs._core, the cffi binding of the C core (csrc/), at install time.

csrc/walfs.h is the whole boundary: its declarations are fed to cffi as they are."""

import pathlib
import re

from cffi import FFI

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"


def _declarations() -> str:
    text = (CSRC / "walfs.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


ffibuilder = FFI()
ffibuilder.cdef(_declarations())
# The core's log callback (walfs_set_log), implemented in walfs/local/core.py; cffi takes the
# GIL for it whatever thread the core calls it from.
ffibuilder.cdef('extern "Python" void _walfs_core_log(int, const char *, const char *);')
ffibuilder.set_source(
    "walfs._core",
    '#include "walfs.h"',
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
