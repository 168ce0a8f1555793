"""walfs.fuse.line_assembly on a real engine: bytes written in any pieces become exactly one
record per line, a failed append keeps nothing, and an over-long line is refused for good
(the mount's writers and any library caller share this one assembler)."""

from __future__ import annotations

from pathlib import Path

import pytest

import walfs
from walfs.engine.rules import read_values
from walfs.errors import RecordTooLargeError
from walfs.fuse.line_assembly import LineAssembler


def feed(wal: walfs.Wal, asm: LineAssembler, piece: bytes) -> None:
    batch = asm.complete_lines(piece)
    if batch is not None:
        wal.engine.append_lines("t", 0, batch)
        asm.appended(piece)


@pytest.mark.parametrize("size", [1, 3, 7, 64, 4096])
def test_any_cut_gives_one_record_per_line(tmp_path: Path, size: int) -> None:
    text = b"".join(b"line %d %s\n" % (i, b"y" * (i % 13)) for i in range(500)) + b"tail"
    with walfs.Wal(tmp_path / "wal") as wal:
        wal.create("t")
        asm = LineAssembler()
        for pos in range(0, len(text), size):
            feed(wal, asm, text[pos : pos + size])
        assert bytes(asm.partial) == b"tail"
        record = asm.pending_record()
        assert record is not None
        wal.engine.append_lines("t", 0, record)
        asm.committed()
        assert asm.pending_record() is None
        assert read_values(wal.engine, "t", 0, 0, max_records=1000) == text.split(b"\n")


def test_a_failed_append_keeps_the_held_line_and_nothing_else(tmp_path: Path) -> None:
    asm = LineAssembler()
    assert asm.complete_lines(b"ab") is None
    batch = asm.complete_lines(b"c\nd")
    assert bytes(batch or b"") == b"abc\n"
    # The append failed: appended() is not called, so the piece is not taken.
    assert bytes(asm.partial) == b"ab"
    record = asm.pending_record()
    assert bytes(record or b"") == b"ab\n"
    asm.pending_failed()
    assert bytes(asm.partial) == b"ab"


def test_an_over_long_line_is_refused_for_good() -> None:
    asm = LineAssembler(max_line_bytes=10)
    assert asm.complete_lines(b"12345") is None
    with pytest.raises(RecordTooLargeError):
        asm.complete_lines(b"678901")
    assert asm.refused and not asm.partial  # the held bytes are dropped, never stored
    with pytest.raises(RecordTooLargeError):
        asm.complete_lines(b"short\n")  # not even a short line after it: its tail
