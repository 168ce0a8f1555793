"""The one atomic, durable replacement of a small file: write <tmp>, fsync it, rename it
over the file, fsync the directory (and, after it, any directories the caller just made).
A crash leaves the old content or the new, never a mix; a leftover <tmp> is the caller's to
ignore. Used by the cursor files and their manifest (walfs/local/cursors.py), topics.conf
(walfs/local/settings_file.py) and the Kafka users file (walfs/kafka/auth_config.py).

A file kept twice (issue 36: the cursor manifest, topics.conf) is written by write_mirrored
and read by read_mirrored: `<file>` and `<file>.mirror`, the same bytes, each carrying a
sequence number that every change increments. Both are replaced in one durable step
(<file>, then <file>.mirror, each tmp + fsync + rename; then one directory fsync), so a crash
in between leaves a newer and an older copy, each proving itself: the newer wins. A copy
that is missing or fails its checks while the other proves itself is one damaged copy: the
caller serves the good one (and a writer rewrites the bad one from it, byte for byte); both
bad is damage naming both files. Two copies of the same sequence but other bytes prove
nothing: damage too, never a guess."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from walfs.errors import WalCorruptError

MIRROR = ".mirror"  # the second copy of a file kept twice: <file>.mirror
T = TypeVar("T")


def fsync_dir(path: str) -> None:
    """Makes a directory's entries (a rename, a new or removed name) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(
    path: str,
    data: bytes | str,
    *,
    tmp: str | None = None,
    mode: int = 0o666,
    then_fsync: Iterable[str] = (),
) -> None:
    """Replaces `path` by `data`, atomically and durably. `tmp` names the temporary file
    (default "<path>.tmp.<thread id>", so that threads never share one); `mode` is the new
    file's (before the umask); `then_fsync` lists directories to fsync after the file's own
    (new parents: their entries must be durable too). The temporary file is removed when
    the write fails before the rename."""
    tmp = f"{path}.tmp.{threading.get_ident()}" if tmp is None else tmp
    _replace(path, data.encode() if isinstance(data, str) else data, tmp, mode)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    for d in then_fsync:
        fsync_dir(d)


MANY_AT_ONCE = 256  # files write_many_durable holds open at a time
FSYNC_THREADS = 16  # fsyncs it runs at once: the file system's journal commits them together


def write_many_durable(files: Sequence[tuple[str, bytes]], *, then_fsync: Iterable[str] = ()) -> None:
    """write_durable for many files: each written to "<path>.tmp.<thread id>" and fsynced
    (the fsyncs run side by side: one by one, each would wait for a journal commit of its
    own, ~4 ms here), then renamed over its file; then one fsync of each directory, then of
    `then_fsync`. Each file is replaced atomically, as by write_durable; when this raises,
    some may be replaced and others not (the temporary files left are removed)."""
    if len(files) == 1:  # one file (a single commit): no threads
        write_durable(*files[0], then_fsync=then_fsync)
        return
    ident = threading.get_ident()
    with ThreadPoolExecutor(max_workers=FSYNC_THREADS) as pool:
        for at in range(0, len(files), MANY_AT_ONCE):
            written: list[tuple[str, str, int]] = []  # (path, tmp, fd)
            renamed = 0
            try:
                for path, raw in files[at : at + MANY_AT_ONCE]:
                    tmp = f"{path}.tmp.{ident}"
                    written.append((path, tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)))
                    view = memoryview(raw)
                    while view:
                        view = view[os.write(written[-1][2], view) :]
                list(pool.map(os.fsync, [fd for _path, _tmp, fd in written]))
                # Side by side too: a rename over an existing file frees the old one's inode
                # (~1 ms each here one by one, ~0.4 ms side by side).
                list(pool.map(lambda w: os.replace(w[1], w[0]), written))
                renamed = len(written)
            finally:
                for _path, tmp, fd in written:
                    os.close(fd)
                    if not renamed:
                        try:
                            os.unlink(tmp)  # (one that was renamed is gone by its tmp name)
                        except FileNotFoundError:
                            pass
    for d in sorted({os.path.dirname(os.path.abspath(p)) for p, _raw in files}):
        fsync_dir(d)
    for d in then_fsync:
        fsync_dir(d)


def write_mirrored(path: str, data: bytes) -> None:
    """Replaces both copies of a file kept twice by `data` (which carries its new sequence
    number) in one durable step: <path>, then <path>.mirror, each atomically; then the
    directory fsync that makes both renames durable."""
    for p in (path, path + MIRROR):
        _replace(p, data, p + ".tmp", 0o666)  # one temporary name: the caller serializes writes
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def _replace(path: str, raw: bytes, tmp: str, mode: int) -> None:
    """Writes `raw` to `tmp`, fsyncs it and renames it over `path` (the directory fsync is
    the caller's); the temporary file is removed when this fails before the rename."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@dataclass
class Mirrored(Generic[T]):
    """What read_mirrored found: the value of the copy that won (None when neither file
    exists), its sequence (0: an older release's single file, read as it is), its raw
    bytes, and the copies to rewrite from them: (path, why) for each damaged or missing
    copy (`bad`) and for an older one (`older`: a crash between the two writes, or a
    writer's change in flight beside a reader). `upgrade`: the winner is in an older
    format (rewrite both, in the new one)."""

    value: T | None
    seq: int = 0
    raw: bytes = b""
    good: str = ""
    bad: list[tuple[str, str]] = field(default_factory=list)
    older: list[tuple[str, str]] = field(default_factory=list)
    upgrade: bool = False

    def heal(self, read_only: bool, note: Callable[[str, str, str], None]) -> None:
        """A writer rewrites each bad or older copy from the good one's bytes and notes it;
        a read-only reader changes nothing and notes the bad ones (an older copy beside a
        reader may be a writer's change in flight)."""
        for bad, why in self.bad + ([] if read_only else self.older):
            if not read_only:
                write_durable(bad, self.raw, tmp=bad + ".tmp")
            note(bad, why, self.good)


def read_mirrored(path: str, parse: Callable[[bytes], tuple[int, T]], limit: int = 1 << 26) -> Mirrored[T]:
    """Reads both copies of a file kept twice (module doc). `parse(data)` returns (sequence,
    value), sequence 0 for an older release's format, or raises ValueError saying what is
    wrong. Raises WalCorruptError naming both files when neither proves itself (a missing
    <path> beside a missing mirror is no file: value None)."""
    found: list[tuple[str, bytes | None, tuple[int, T] | None, str]] = []
    for p in (path, path + MIRROR):
        try:
            with open(p, "rb") as f:
                data: bytes | None = f.read(limit)
        except FileNotFoundError:
            found.append((p, None, None, "missing"))
            continue
        try:
            found.append((p, data, parse(data or b""), ""))
        except ValueError as e:
            found.append((p, data, None, str(e) or "damaged"))
    (p0, raw0, got0, why0), (p1, raw1, got1, why1) = found
    if got0 is None and got1 is None:
        if raw0 is None and raw1 is None:
            return Mirrored(None)
        raise WalCorruptError(f"{p0} is damaged ({why0}) and so is its copy {p1} ({why1})")
    if got0 is not None and got1 is not None:
        if got0[0] == got1[0] and raw0 != raw1:
            raise WalCorruptError(
                f"{p0} and its copy {p1} both verify with sequence {got0[0]} but differ: neither is taken"
            )
        win = 0 if got0[0] >= got1[0] else 1
    else:
        win = 0 if got0 is not None else 1
    good, raw, got = (p0, raw0, got0) if win == 0 else (p1, raw1, got1)
    assert got is not None and raw is not None
    seq, value = got
    out = Mirrored(value, seq, raw, good)
    if seq == 0:  # an older release's single file: both are written in the new format
        out.upgrade = True
        return out
    other = found[1 - win]
    if other[2] is None:
        out.bad.append((other[0], other[3] if other[1] is not None else "missing"))
    elif other[2][0] < seq:
        why = f"older (sequence {other[2][0]} < {seq}: a crash between the two writes)"
        out.older.append((other[0], why))
    return out
