"""WalOperations without a kernel: handler semantics on a real Wal (trio mode tests)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pyfuse3
import pytest

import walfs
from walfs.engine.rules import read_values
from walfs.fuse.operations import WalOperations, parse_partition_dir, topic_name_error

CTX: Any = None  # the handlers never look at the request context


@pytest.fixture
def ops(tmp_path: Path) -> Any:
    wal = walfs.Wal(tmp_path / "wal", segment_size=1 << 20, block_size=64 << 10)
    try:
        yield WalOperations(wal.engine, str(tmp_path))
    finally:
        wal.close()


async def create(ops: WalOperations, name: bytes, flags: int) -> tuple[int, int]:
    info, attrs = await ops.create(pyfuse3.ROOT_INODE, name, 0o644, flags, CTX)
    return info.fh, attrs.st_ino


async def test_lines_partials_and_stale_append_offsets(ops: WalOperations) -> None:
    fh, ino = await create(ops, b"t", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    # The kernel's offset for O_APPEND is whatever it believed; it must not matter.
    assert await ops.write(fh, 0, b"one\ntw") == 6
    assert await ops.write(fh, 0, b"o\nthr") == 5
    assert read_values(ops.engine, "t", 0, 0) == [b"one", b"two"]
    assert (await ops.getattr(ino, CTX)).st_size == 8  # record boundary only
    await ops.flush(fh)
    await ops.release(fh)
    assert read_values(ops.engine, "t", 0, 0) == [b"one", b"two", b"thr"]
    assert await ops.read((await ops.open(ino, os.O_RDONLY, CTX)).fh, 4, 100) == b"two\nthr\n"


async def test_requests_that_end_mid_line_join_the_held_partial(ops: WalOperations) -> None:
    """dd bs=1M of text: every request ends mid-line, so each append joins the held
    partial with the request's complete lines (one batch, through a reused buffer)."""
    fh, _ino = await create(ops, b"dd", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    text = b"".join(b"line %05d %s\n" % (i, b"x" * (i % 37)) for i in range(3000))
    expected = text.split(b"\n")[:-1]
    for size in (1, 7, 4096, 50_000):  # growing requests: the buffer grows too
        pos = 0
        while pos < len(text):
            assert await ops.write(fh, 0, text[pos : pos + size]) == len(text[pos : pos + size])
            pos += size
    await ops.release(fh)
    assert read_values(ops.engine, "dd", 0, 0, max_records=100_000) == expected * 4
    # Empty lines are records too, also right after a held partial.
    fh, _ino = await create(ops, b"empty", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    await ops.write(fh, 0, b"a")
    await ops.write(fh, 0, b"\n\n\nb")
    await ops.release(fh)
    assert read_values(ops.engine, "empty", 0, 0) == [b"a", b"", b"", b"b"]


async def test_sequential_writer_of_a_new_topic(ops: WalOperations) -> None:
    fh, ino = await create(ops, b"new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    assert await ops.write(fh, 0, b"a\n") == 2
    with pytest.raises(pyfuse3.FUSEError) as info:
        await ops.write(fh, 0, b"b\n")  # rewriting offset 0
    assert info.value.errno == errno.EPERM
    assert await ops.write(fh, 2, b"c\n") == 2
    await ops.release(fh)
    assert read_values(ops.engine, "new", 0, 0) == [b"a", b"c"]
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND | os.O_TRUNC):
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.open(ino, flags, CTX)
        assert info.value.errno == errno.EPERM


async def test_unexpected_errors_cost_one_request_not_the_mount(
    ops: WalOperations, monkeypatch: pytest.MonkeyPatch
) -> None:
    fh, ino = await create(ops, b"t", os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def broken(*args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ops.engine, "info", broken)
    with pytest.raises(pyfuse3.FUSEError) as info:
        await ops.getattr(ino, CTX)
    assert info.value.errno == errno.EIO
    monkeypatch.undo()
    assert (await ops.getattr(ino, CTX)).st_size == 0


async def test_negative_entries_and_names(ops: WalOperations) -> None:
    attrs = await ops.lookup(pyfuse3.ROOT_INODE, b".t.crc", CTX)
    assert attrs.st_ino == 0 and attrs.entry_timeout > 0
    with pytest.raises(pyfuse3.FUSEError) as info:
        await ops.lookup(pyfuse3.ROOT_INODE, b"x" * 250, CTX)
    assert info.value.errno == errno.ENAMETOOLONG
    assert topic_name_error(b".consumers") == errno.EINVAL
    assert topic_name_error(b"partition=1") == errno.EINVAL
    assert topic_name_error(b"\xff") == errno.EINVAL
    assert topic_name_error("é".encode() * 124) == 0
    assert topic_name_error("é".encode() * 125) == errno.ENAMETOOLONG
    assert parse_partition_dir("partition=12") == 12
    for bad in ("partition=", "partition=012", "partition=-1", "partition=2147483648"):
        assert parse_partition_dir(bad) is None
