"""Sizes written by people, parsed and printed in one place: K, M, G, T are powers of 1024
(KiB, MiB, GiB, TiB), as everywhere in walfs.

- parse_size: a byte count for a command-line flag or mount option ("64M", "64MiB", "65536").
- parse_limit / show_limit: a retention limit (an xattr, `walfs retention`, a Kafka config):
  a count with an optional K/M/G/T, or -1 / "none" for no limit (Kafka spells it -1).
- human: a byte count for a person to read ("1.5 GiB")."""

from __future__ import annotations

import argparse

UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_UNITS = "kmg"  # parse_size's suffixes (its message names them)


class SizeError(argparse.ArgumentTypeError, ValueError):
    """Not a size: a ValueError, that argparse shows as it is (`--flag: <message>`)."""


def parse_size(text: str) -> int:
    """Bytes, or with a K, M or G suffix (KiB, MiB, GiB: 1024-based), e.g. 64M."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        value = int(t[:-1]) * UNITS[t[-1]] if t and t[-1] in _SIZE_UNITS else int(t)
    except ValueError:
        raise SizeError(f"{text!r} is not a size: give bytes or a number with K, M or G (e.g. 64M)") from None
    if value < 0:
        raise SizeError(f"{text!r}: a size cannot be negative")
    return value


def parse_limit(text: str) -> int | None:
    """An xattr or CLI value: a non-negative integer, optionally with K/M/G/T (powers of
    1024), or -1 / "none" for no limit (Kafka spells "no limit" -1). ValueError otherwise."""
    t = text.strip().lower()
    if t in ("-1", "none"):
        return None
    unit = UNITS.get(t[-1:], 1)
    digits = t[:-1] if unit > 1 else t
    if not digits.isdigit() or len(digits) > 19 or int(digits) * unit >= 2**63:
        raise ValueError(f"not a retention limit: {text!r}")
    return int(digits) * unit


def show_limit(v: int | None) -> str:
    """A limit as parse_limit reads it back: bytes, or -1 for none."""
    return "-1" if v is None else str(v)


def human(n: float) -> str:
    """Bytes for a person: "512 B", "1.5 KiB", ... "2.0 TiB" (one decimal from KiB on)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
