"""Bytes appended through the mount are in the kernel's page cache before anyone reads them
(walfs/fuse/page_push.py, issue 13), and the cache never serves a wrong byte: not past the end
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
from test_mount_kafka import free_port, kcat

import walfs

pytest_plugins = ["conftest_mount"]

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
PAGE = mmap.PAGESIZE


def page_vector(path: Path) -> list[bool]:
    """Per page of `path`: in the kernel's page cache or not."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return []
        # A private writable mapping gives ctypes an address; nothing is written.
        with mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) as m:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            base = ctypes.addressof(ctypes.c_char.from_buffer(m))
            if _libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return [bool(v & 1) for v in vec]
    finally:
        os.close(fd)


def resident(path: Path) -> tuple[int, int]:
    """(pages of `path` in the kernel's page cache, pages of the file)."""
    vec = page_vector(path)
    return sum(vec), len(vec)


def all_resident(path: Path) -> bool:
    have, pages = resident(path)
    return pages > 0 and have == pages


def away_from_a_minute_step() -> None:
    """Where the mount cannot turn off FUSE_AUTO_INVAL_DATA (walfs.fuse.kernel_flags),
    growth moves a topic's mtime in whole minutes, and a new mtime makes the kernel drop
    the file's pages (walfs.fuse.page_push.MTIME_STEP_NS): start a test's writes well inside a
    minute, so that its reads see the mtime its writes made."""
    second = time.time() % 60
    if second > 40:
        time.sleep(60.5 - second)


def lines(n: int, tag: bytes = b"x", width: int = 100) -> bytes:
    return b"".join(b"%08d " % i + tag * (width - 10) + b"\n" for i in range(n))


def engine_view(data: Path, topic: str) -> bytes:
    """The topic's byte view as the engine holds it (the mount stopped)."""
    with walfs.Wal(str(data)) as wal:
        return wal.read_bytes(topic, 0, wal.info(topic).byte_size)


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


def served(m: Mount) -> int:
    """Bytes the daemon's READs have returned (what the kernel's cache did not serve)."""
    return int(os.getxattr(m.path, "user.walfs.read_bytes"))


def test_pages_survive_a_new_mtime_and_serve_the_first_read(make_mount) -> None:
    """FUSE_AUTO_INVAL_DATA is off (walfs.fuse.kernel_flags): growth gives the topic an
    exact new mtime, and the kernel keeps the pages it holds when it learns it (with the
    flag on it dropped them all). A topic written through the mount is then read without
    a single READ reaching the daemon."""
    m: Mount = make_mount()
    m.start()
    try:
        assert os.getxattr(m.path, "user.walfs.auto_inval_data") == b"off"
        t = m.path / "t"
        data = lines(20_000)
        write_in_pieces(t, data, 1 << 20)
        wait_until(lambda: all_resident(t), what="the written pages in the kernel's cache")
        before = t.stat().st_mtime_ns
        time.sleep(0.01)
        more = lines(100, b"y")
        write_in_pieces(t, more, 1 << 20)  # another open file appends
        wait_until(lambda: all_resident(t), what="the appended pages in the kernel's cache")
        assert t.stat().st_mtime_ns > before  # exact, not a minute step
        time.sleep(1.1)  # the attributes the kernel holds expire: it asks for them again
        assert t.stat().st_mtime_ns > before
        vec = page_vector(t)
        kept = vec[: len(data) // PAGE]
        # With the flag on the kernel drops every page at a new mtime; memory pressure from
        # other processes may reclaim a few on its own (seen once in CI): most must stay.
        assert sum(kept) >= 0.9 * len(kept), "pages cached before the new mtime were dropped"
        missing = len(vec) - sum(vec)
        n = served(m)
        assert m.sh("cat t | cmp - <(cat t)").returncode == 0
        assert t.read_bytes() == data + more
        # Every byte from the kernel's cache (a READ per page missing at most: one
        # read-ahead window each).
        assert served(m) - n <= missing * (256 << 10)
    finally:
        m.stop()


def test_growth_through_the_kafka_face_reaches_cached_readers_whole(make_mount) -> None:
    """Records produced through the Kafka listener grow a topic whose pages the kernel
    holds (its last page partial): every reader, one holding the file open across the
    growth too, sees the new size and exactly the bytes, never a stale or zeroed tail."""
    m: Mount = make_mount()
    port = free_port()
    m.start("--kafka-listen", f"127.0.0.1:{port}")
    try:
        t = m.path / "t"
        expected = lines(3_000, width=77)  # 231 000 bytes: the end is inside a page
        write_in_pieces(t, expected, 64 << 10)
        wait_until(lambda: all_resident(t), what="the written pages in the kernel's cache")
        with open(t, "rb") as held:
            assert held.read() == expected
            for i in range(6):
                batch = "".join(f"kafka {i} {j} {'z' * (i * 13 + j)}\n" for j in range(40))
                kcat("-b", f"127.0.0.1:{port}", "-P", "-t", "t", stdin=batch)
                expected += batch.encode()
                size = len(expected)
                wait_until(lambda size=size: t.stat().st_size == size, what="the produced size")
                assert t.read_bytes() == expected, i
                held.seek(0)
                assert held.read() == expected, i
                assert m.out("wc -l < t").strip() == str(expected.count(b"\n"))
        wait_until(lambda: all_resident(t), what="the produced pages in the kernel's cache")
        assert t.read_bytes() == expected
    finally:
        m.stop()
    assert engine_view(Path(m.data), "t") == expected
