"""The small shared utilities of walfs/common/, each the one home of its rule: the atomic
durable file write, sizes, addresses."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest

from walfs.common.addresses import parse_bootstrap, parse_listen_address
from walfs.common.durable_file import write_durable
from walfs.common.sizes import SizeError, human, parse_limit, parse_size, show_limit


def test_write_durable_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_durable(str(path), b"one")
    write_durable(str(path), "two", mode=0o600, tmp=str(path) + ".tmp")
    assert path.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f"]
    path.unlink()
    write_durable(str(path), b"x", mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_durable(str(path), b"old")
    with pytest.raises(IsADirectoryError):
        (tmp_path / "d").mkdir()
        write_durable(str(path), b"new", tmp=str(tmp_path / "d"))
    assert path.read_bytes() == b"old"
    with pytest.raises(TypeError):
        write_durable(str(path), 5)  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path)) == ["d", "f"]


def test_sizes() -> None:
    assert [parse_size(t) for t in ("65536", "64K", "64M", "64MiB", "2g", " 1kb ")] == [
        65536,
        64 << 10,
        64 << 20,
        64 << 20,
        2 << 30,
        1 << 10,
    ]
    for bad in ("x", "1T", "", "-1"):
        with pytest.raises(SizeError):
            parse_size(bad)
    assert issubclass(SizeError, ValueError) and issubclass(SizeError, argparse.ArgumentTypeError)
    assert [parse_limit(t) for t in ("-1", "none", "10", "10k", "1T")] == [None, None, 10, 10 << 10, 1 << 40]
    with pytest.raises(ValueError, match="not a retention limit"):
        parse_limit("10MiB")
    assert show_limit(None) == "-1" and show_limit(5) == "5"
    assert [human(n) for n in (0, 1023, 1024, 3 << 29, 5 << 40, 2048 << 40)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 GiB",
        "5.0 TiB",
        "2048.0 TiB",
    ]


def test_addresses() -> None:
    assert parse_listen_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen_address("[::1]:9092") == ("::1", 9092)
    for bad in ("9092", ":9092", "h:p", "h:70000"):
        with pytest.raises(ValueError):
            parse_listen_address(bad)
    assert parse_bootstrap("a:1, b:2") == ("a", 1)
    assert parse_bootstrap("[::1]:9092") == ("::1", 9092)
    for bad in ("a:0", "a", "a:65536"):
        with pytest.raises(ValueError, match='bootstrap must be "host:port"'):
            parse_bootstrap(bad)
