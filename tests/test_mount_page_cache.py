"""Bytes appended through the mount are in the kernel's page cache before anyone reads them
(walfs/page_push.py, issue 13), and the cache never serves a wrong byte: not past the end
after more appends, not after a trim (the file then starts at the first kept record),
not after a topic was deleted and made
again. Residency is read with mincore(2) on a mapping of the topic file."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import time
from pathlib import Path

from conftest_mount import Mount, wait_until

import walfs

pytest_plugins = ["conftest_mount"]

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
PAGE = mmap.PAGESIZE


def resident(path: Path) -> tuple[int, int]:
    """(pages of `path` in the kernel's page cache, pages of the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        # A private writable mapping gives ctypes an address; nothing is written.
        with mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) as m:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            base = ctypes.addressof(ctypes.c_char.from_buffer(m))
            if _libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(v & 1 for v in vec), pages
    finally:
        os.close(fd)


def all_resident(path: Path) -> bool:
    have, pages = resident(path)
    return pages > 0 and have == pages


def away_from_a_minute_step() -> None:
    """Growth moves a topic's mtime in whole minutes, and a new mtime makes the kernel drop
    the file's pages (walfs.page_push.MTIME_STEP_NS): start a test's writes well inside a
    minute, so that its reads see the mtime its writes made."""
    second = time.time() % 60
    if second > 40:
        time.sleep(60.5 - second)


def lines(n: int, tag: bytes = b"x", width: int = 100) -> bytes:
    return b"".join(b"%08d " % i + tag * (width - 10) + b"\n" for i in range(n))


def engine_view(data: Path, topic: str) -> bytes:
    """The topic's byte view as the engine holds it (the mount stopped)."""
    with walfs.Wal(str(data)) as wal:
        return wal.read_bytes(topic, 0, wal.byte_size(topic))


def write_in_pieces(path: Path, data: bytes, piece: int) -> None:
    """O_APPEND writes of `piece` bytes: most of them end inside a line."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for i in range(0, len(data), piece):
            os.write(fd, data[i : i + piece])
    finally:
        os.close(fd)


def test_bytes_written_are_cached_before_the_first_read_and_are_the_engines(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    try:
        away_from_a_minute_step()
        data = lines(40_000)  # 4 MB: dd-sized writes that end inside lines
        write_in_pieces(m.path / "t", data, 1 << 20)
        wait_until(lambda: all_resident(m.path / "t"), what="the written pages in the kernel's cache")
        assert (m.path / "t").read_bytes() == data
    finally:
        m.stop()
    assert engine_view(Path(m.data), "t") == data


def test_cached_pages_never_show_bytes_past_their_end(make_mount) -> None:
    """The last page of a pushed range is partial; appends by another open file and by a
    line split over two writes land in it. Every read sees exactly the records so far."""
    m: Mount = make_mount()
    m.start()
    try:
        away_from_a_minute_step()
        t = m.path / "t"
        expected = lines(1_000, width=77)  # 77 000 bytes: the end is inside a page
        write_in_pieces(t, expected, 5_000)
        wait_until(lambda: all_resident(t), what="the written pages in the kernel's cache")
        for i in range(30):
            more = b"line %d %s\n" % (i, b"y" * (i * 37 % 300))
            if i % 3 == 0:
                write_in_pieces(t, more, 7)  # one line over many writes
            else:
                m.sh(f"printf '%s' '{more.decode()[:-1]}' | cat - <(echo) >> t")
            expected += more
            assert t.read_bytes() == expected, i
            assert t.stat().st_size == len(expected)
        wait_until(lambda: all_resident(t), what="the appended pages in the kernel's cache")
        assert t.read_bytes() == expected
    finally:
        m.stop()
    assert engine_view(Path(m.data), "t") == expected


def test_after_a_trim_no_cached_page_shows_the_trimmed_head(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    try:
        away_from_a_minute_step()
        m.sh("seq 1 20000 >> t")
        wait_until(lambda: all_resident(m.path / "t"), what="the written pages in the kernel's cache")
        fd = os.open(m.path / "t", os.O_RDONLY)  # opened before the trim: its positions stay
        try:
            m.sh("setfattr -n user.walfs.low_watermark -v 10000 t")
            assert m.out("head -n 1 t") == "10001\n"  # a new open: the first kept record
            assert m.out("tail -n 1 t") == "20000\n"
            try:
                os.pread(fd, 10, 0)
                raise AssertionError("a cached page of the trimmed head was served")
            except OSError as exc:
                assert exc.errno == errno.ENODATA
        finally:
            os.close(fd)
    finally:
        m.stop()


def test_a_deleted_topic_made_again_shows_its_new_bytes(make_mount) -> None:
    m: Mount = make_mount()
    m.start("--allow-delete")
    try:
        away_from_a_minute_step()
        t = m.path / "t"
        write_in_pieces(t, lines(3_000, b"a"), 64 << 10)
        wait_until(lambda: all_resident(t), what="the written pages in the kernel's cache")
        m.sh("rm t")
        fresh = lines(1_000, b"b")
        write_in_pieces(t, fresh, 64 << 10)
        assert t.read_bytes() == fresh
    finally:
        m.stop()
