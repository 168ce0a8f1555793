"""Bounded resources on the mount (issue 11): a writer that never sends a newline gets
EFBIG at the line limit, the held bytes are dropped, and the daemon's memory stays put."""

from __future__ import annotations

import errno
import os

import pytest
from conftest_mount import Mount, rss_kib

pytest_plugins = ["conftest_mount"]


def test_cat_dev_zero_gets_efbig_and_stores_nothing(make_mount) -> None:
    m: Mount = make_mount()
    m.start("--max-line-bytes", "1M")
    try:
        m.sh("echo before >> t")
        res = m.sh("cat /dev/zero >> t", check=False, timeout=60)
        assert res.returncode != 0
        assert b"File too large" in res.stderr
        assert m.out("cat t") == "before\n"  # nothing of the refused line
        m.sh("echo after >> t")  # a new open writes again
        assert m.out("cat t") == "before\nafter\n"
    finally:
        m.stop()


def test_daemon_memory_stays_bounded_while_a_writer_ignores_efbig(make_mount) -> None:
    m: Mount = make_mount()
    m.start("--max-line-bytes", "1M")
    try:
        assert m.pid is not None
        fd = os.open(m.path / "t", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        before = rss_kib(m.pid)
        chunk = b"z" * (128 << 10)
        refused = 0
        try:
            for _ in range(1600):  # 200 MiB without a newline
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    assert e.errno == errno.EFBIG
                    refused += 1
            with pytest.raises(OSError) as info:
                os.write(fd, b"tail of the long line\nand a new one\n")
            assert info.value.errno == errno.EFBIG  # the handle stays refused
        finally:
            os.close(fd)
        assert refused >= 1590
        grown = rss_kib(m.pid) - before
        assert grown < 32 << 10, f"daemon grew by {grown} KiB"
        assert m.out("cat t") == ""
        assert m.out("getfattr --only-values -n user.walfs.high_watermark t") == "0"
    finally:
        m.stop()


def test_long_lines_under_the_limit_still_span_requests(make_mount) -> None:
    m: Mount = make_mount()
    m.start("--max-line-bytes", "2M")
    try:
        m.sh("{ head -c 1500000 /dev/zero | tr '\\0' 'a'; echo; } | cat >> t")
        assert m.out("wc -c < t").strip() == "1500001"
        assert m.out("getfattr --only-values -n user.walfs.high_watermark t") == "1"
    finally:
        m.stop()


def test_max_line_bytes_below_a_fuse_write_is_refused(make_mount) -> None:
    from conftest_mount import cli

    m: Mount = make_mount()
    res = cli("mount", str(m.data), str(m.path), "--max-line-bytes", "4K", check=False)
    assert res.returncode == 2
    assert "--max-line-bytes must be at least" in res.stderr
