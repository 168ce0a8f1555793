"""The cursor manifest: the list of every cursor file (walfs/local/cursors.py), so that a
deleted one is reported instead of read as "no cursor" (which would deliver its stream again
from the low watermark). It is a base and a journal, each kept twice (issue 36), so that a new
cursor costs one appended frame, not a rewrite of the whole list (issue 35: the first commits
of a group over 100,000 topics, one by one, rewrote a list of 100,000 names each).

On disk (the contract; docs/format.md restates it), in the data directory:

- the base, cursors.manifest and its copy cursors.manifest.mirror (the same bytes; both
  replaced in one durable step, walfs.common.durable_file.write_mirrored): b"WALFSCMF" |
  u32 version (3) | u64 sequence | u32 N | N bytes of UTF-8 JSON {"<group>": ["<stream key>",
  ...]} | the first 16 bytes of blake3 of everything before.
- the journal, cursors.manifest.journal and its copy cursors.manifest.journal.mirror: a head
  b"WALFSCMJ" | u32 version (1) | u64 base sequence | blake3-16 of those 20 bytes; then
  frames, each u32 n | u64 sequence | n bytes of UTF-8 JSON {"add": {"<group>": [keys]}} or
  {"remove": {...}} | blake3-16 of the head's 20 bytes followed by the frame's bytes before.
  Frame k (from 1) has sequence base sequence + k. A frame is appended to the journal and
  fdatasynced, then to its copy and fdatasynced.

The list is the base's, changed by the journal's frames in order, when the journal names the
base's sequence. A journal that names an older base is what a crash between a compaction's
two steps leaves (its frames are in the base): read as empty. The journal is compacted into
a new base (sequence: the last frame's + 1) once it outgrows max(64 KiB, the base), and after
a failed append: the base is replaced first, then both journal copies by an empty one naming
it. Where no journal exists yet (a new directory, or a version 2 base being upgraded) the
empty journal is written first, then the base: a crash between leaves a version 2 base, or
none, beside a journal that is ignored.

Which copy is taken: the base as walfs.common.durable_file.read_mirrored says; of the
journal, among the copies that name the base, the one with more frames that prove
themselves (a crash between the two appends leaves the copy one frame behind; a crash in an
append leaves a torn frame at the end of the first copy). Frames both copies hold must be
the same bytes (else: damage, neither taken). A copy that is missing, damaged, behind or
torn beside a good one is rewritten from it by a writer's open and reported (Heals); a
read-only open serves around it (and reports damage, not a copy behind or torn, which may
be a writer's append in flight). A version 3 base beside no journal copy that names it, and
both copies of the base damaged, are damage: WalCorruptError naming the files.

Older bases (version 1: one file, no sequence; version 2: no journal) are read as they are
and rewritten as version 3 with an empty journal at a writer's open: an upgrade, not damage.
A release before the journal reads a version 3 base as damaged: it refuses the directory.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

import blake3

from walfs.common.durable_file import MIRROR, read_mirrored, write_durable, write_mirrored
from walfs.errors import WalCorruptError
from walfs.local.recovery_log import Heals

MANIFEST = "cursors.manifest"  # in the data directory: any name may be a group
JOURNAL = MANIFEST + ".journal"
_MAGIC = b"WALFSCMF"
_VERSION = 3
_HEAD1 = struct.Struct("<8sII")  # version 1: no sequence
_HEAD = struct.Struct("<8sIQI")
_J_MAGIC = b"WALFSCMJ"
_J_VERSION = 1
_J_HEAD = struct.Struct("<8sIQ")
_J_HEAD_SIZE = _J_HEAD.size + 16
_FRAME = struct.Struct("<IQ")
COMPACT_AT = 64 << 10  # a journal longer than this and than the base is compacted
_LIMIT = 1 << 28  # a copy longer than this is not read whole (damage)

Listed = dict[str, set[str]]


def _parse_base(data: bytes) -> tuple[int, tuple[int, Listed]]:
    """(sequence, (version, listed)) of one copy of the base; ValueError saying what is wrong."""
    ok = len(data) >= 32 and data[:8] == _MAGIC
    version = struct.unpack_from("<I", data, 8)[0] if ok else 0
    if version == 1:
        seq, head = 0, _HEAD1.size
        n = _HEAD1.unpack_from(data)[2]
    elif version in (2, _VERSION) and len(data) >= _HEAD.size + 16:
        _m, _v, seq, n = _HEAD.unpack_from(data)
        head = _HEAD.size
        ok = seq > 0
    else:
        raise ValueError("bad magic, version or length")
    ok = ok and len(data) == head + n + 16 and blake3.blake3(data[:-16]).digest(length=16) == data[-16:]
    listed = _groups(data[head : head + n]) if ok else None
    if listed is None:
        raise ValueError("checksum or content fails")
    return seq, (version, listed)


def _groups(raw: bytes | dict[str, object]) -> Listed | None:
    """{"group": ["key", ...]} as sets, or None when it is not that shape."""
    try:
        got = json.loads(raw.decode()) if isinstance(raw, bytes) else raw
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(got, dict):
        return None
    out: Listed = {}
    for g, v in got.items():
        if not isinstance(g, str) or not isinstance(v, list) or not all(isinstance(k, str) for k in v):
            return None
        out[g] = set(v)
    return out


def _base_bytes(seq: int, listed: Listed) -> bytes:
    body = json.dumps({g: sorted(v) for g, v in sorted(listed.items()) if v}).encode()
    head = _HEAD.pack(_MAGIC, _VERSION, seq, len(body)) + body
    return head + blake3.blake3(head).digest(length=16)


def _journal_head(base_seq: int) -> bytes:
    head = _J_HEAD.pack(_J_MAGIC, _J_VERSION, base_seq)
    return head + blake3.blake3(head).digest(length=16)


def _frame(base_seq: int, seq: int, change: dict[str, Listed]) -> bytes:
    body = json.dumps(
        {k: {g: sorted(v) for g, v in sorted(m.items()) if v} for k, m in change.items()}
    ).encode()
    raw = _FRAME.pack(len(body), seq) + body
    return raw + blake3.blake3(_J_HEAD.pack(_J_MAGIC, _J_VERSION, base_seq) + raw).digest(length=16)


@dataclass
class _Journal:
    """One copy of the journal as read: its base sequence, its frames (bytes, change) that
    prove themselves, where they end, and its length (more: a torn or damaged frame)."""

    base_seq: int
    frames: list[tuple[bytes, dict[str, Listed]]]
    end: int
    size: int


def _parse_journal(data: bytes) -> _Journal:
    """One copy of the journal; ValueError when its head fails. Frames are read until one
    fails its checks or breaks the sequence."""
    if len(data) < _J_HEAD_SIZE:
        raise ValueError("cut short")
    magic, version, base_seq = _J_HEAD.unpack_from(data)
    if magic != _J_MAGIC or version != _J_VERSION:
        raise ValueError("bad magic or version")
    if blake3.blake3(data[: _J_HEAD.size]).digest(length=16) != data[_J_HEAD.size : _J_HEAD_SIZE]:
        raise ValueError("checksum mismatch in its head")
    head = data[: _J_HEAD.size]
    frames: list[tuple[bytes, dict[str, Listed]]] = []
    at = _J_HEAD_SIZE
    while at + _FRAME.size + 16 <= len(data):
        n, seq = _FRAME.unpack_from(data, at)
        end = at + _FRAME.size + n + 16
        if seq != base_seq + len(frames) + 1 or end > len(data):
            break
        if blake3.blake3(head + data[at : end - 16]).digest(length=16) != data[end - 16 : end]:
            break
        change = _change(data[at + _FRAME.size : end - 16])
        if change is None:
            break
        frames.append((data[at:end], change))
        at = end
    return _Journal(base_seq, frames, at, len(data))


def _change(body: bytes) -> dict[str, Listed] | None:
    try:
        got = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(got, dict) or not set(got) <= {"add", "remove"}:
        return None
    out: dict[str, Listed] = {}
    for k, v in got.items():
        groups = _groups(v) if isinstance(v, dict) else None
        if groups is None:
            return None
        out[k] = groups
    return out


def apply(listed: Listed, change: dict[str, Listed]) -> None:
    for g, keys in change.get("remove", {}).items():
        if g in listed:
            listed[g] -= keys
            if not listed[g]:
                del listed[g]
    for g, keys in change.get("add", {}).items():
        listed.setdefault(g, set()).update(keys)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(_LIMIT)
    except FileNotFoundError:
        return None


class CursorManifest:
    """The manifest of one data directory: `read()` loads (and, for a writer, heals and
    upgrades) it; `change()` appends a frame; `rewrite()` writes a new base. The caller
    serializes calls (CursorStore's lock)."""

    def __init__(self, dir_path: str, read_only: bool, heals: Heals) -> None:
        self.path = os.path.join(dir_path, MANIFEST)
        self.journal = os.path.join(dir_path, JOURNAL)
        self.read_only = read_only
        self.heals = heals
        self.seq = 0  # the sequence of the last change: the highest any copy holds
        self.listed: Listed = {}
        self._base_seq = 0  # the base the journal names
        self._base_size = 0
        self._journal_size = 0  # bytes of both journal copies (they hold the same), 0: none
        self._clean = False  # both journal copies hold those bytes and name the base

    def exists(self) -> bool:
        return os.path.exists(self.path) or os.path.exists(self.path + MIRROR)

    def read(self) -> Listed | None:
        """The list (module doc), or None when the base does not exist. A writer rewrites a
        damaged, missing, behind or torn copy from the good one, and an older version as
        version 3 with its journal."""
        try:
            base = read_mirrored(self.path, _parse_base, _LIMIT)
        except WalCorruptError as e:
            raise WalCorruptError(f"cursor manifest damaged: {e}") from None
        self.seq = max(self.seq, base.seq)
        self._clean = False
        if base.value is None:
            return None
        base.heal(self.read_only, self.heals.note)
        version, listed = base.value
        self._base_seq, self._base_size = base.seq, len(base.raw)
        if version < _VERSION:
            if not self.read_only:
                self.rewrite(listed)  # upgraded: version 3, with its journal
            self.listed = listed
            return listed
        self._read_journal(base.seq, listed)
        self.listed = listed
        return listed

    def _read_journal(self, base_seq: int, listed: Listed) -> None:
        """Applies the journal copy that wins to `listed`; heals or reports the other."""
        copies: list[tuple[str, bytes | None, _Journal | str]] = []
        for p in (self.journal, self.journal + MIRROR):
            data = _read(p)
            if data is None:
                copies.append((p, None, "missing"))
                continue
            try:
                got = _parse_journal(data)
            except ValueError as e:
                copies.append((p, data, str(e)))
                continue
            if got.base_seq > base_seq:
                copies.append((p, data, f"names base sequence {got.base_seq}, after the base's {base_seq}"))
            else:
                copies.append((p, data, got))
        named = [c for c in copies if isinstance(c[2], _Journal) and c[2].base_seq == base_seq]
        stale = [c for c in copies if isinstance(c[2], _Journal) and c[2].base_seq < base_seq]
        if not named:
            if not stale:
                why = "; ".join(f"{p}: {c}" for p, _d, c in copies)
                raise WalCorruptError(
                    f"cursor manifest journal damaged: no copy names base {base_seq} ({why})"
                )
            # A compaction's crash between the base and the journal: its frames are in the base.
            for p, _d, c in copies:
                if isinstance(c, str) and not self.read_only:
                    self.heals.note(p, c, self.path)
            if not self.read_only:
                write_mirrored(self.journal, _journal_head(base_seq))
                self._journal_size, self._clean = _J_HEAD_SIZE, True
            return
        win = max(named, key=lambda c: len(c[2].frames))  # type: ignore[union-attr]
        good = win[2]
        assert isinstance(good, _Journal) and win[1] is not None
        for _p, _d, c in named:
            assert isinstance(c, _Journal)
            common = min(len(c.frames), len(good.frames))
            if [f for f, _ in c.frames[:common]] != [f for f, _ in good.frames[:common]]:
                raise WalCorruptError(
                    f"cursor manifest journal {self.journal} and its copy both verify but differ: "
                    "neither is taken"
                )
        whole_beside = any(
            isinstance(c, _Journal) and c is not good and (len(c.frames), c.end) == (len(good.frames), c.size)
            for _p, _d, c in named
        )
        if good.end < good.size and not whole_beside:
            # Bytes after its last good frame: a crash tears only the first copy's last
            # append, while the second copy holds the frames before it, whole. Without that
            # copy, frames may be lost (a cut, a damaged frame), and nothing tells how many.
            why = "; ".join(
                f"{p}: {c if isinstance(c, str) else f'{len(c.frames)} frames'}"
                for p, _d, c in copies
            )
            raise WalCorruptError(
                f"cursor manifest journal damaged: {win[0]} is damaged or torn after its first "
                f"{len(good.frames)} frames and its copy does not prove the frames before it ({why})"
            )
        for _frame_bytes, change in good.frames:
            apply(listed, change)
        self.seq = max(self.seq, base_seq + len(good.frames))
        raw = win[1][: good.end]
        for p, data, c in copies:
            if data == raw:
                continue
            crash = ""  # what a crash leaves (a writer rewrites and reports it; a reader may
            # be beside a writer's append in flight: it says nothing)
            if isinstance(c, _Journal) and c.base_seq < base_seq:
                crash = "names an older base (a crash in a compaction)"
            elif isinstance(c, _Journal):
                # The first copy is appended first: a crash leaves it torn at its end, or
                # leaves the second one frame behind (torn or not); anything else is damage.
                behind, torn = len(good.frames) - len(c.frames), c.end < c.size
                if behind == 1 and p != self.journal:
                    crash = "one append behind" + (
                        ", torn (a crash in it)" if torn else " (a crash before it)"
                    )
                elif behind == 0 and torn and p == self.journal:
                    crash = "a torn append at its end (a crash in it)"
                else:
                    c = f"damaged after its first {len(c.frames)} frames ({behind} fewer than its copy)"
            if crash and self.read_only:
                continue
            if not self.read_only:
                write_durable(p, raw, tmp=p + ".tmp")
            self.heals.note(p, crash or str(c), win[0])
        self._journal_size = len(raw)
        self._clean = not self.read_only

    def rewrite(self, listed: Listed) -> None:
        """A new base listing `listed`, and an empty journal naming it (module doc for the
        order)."""
        self.seq += 1  # also when the write fails: the next one must be newer than any copy
        seq = self.seq
        fresh = not (os.path.exists(self.journal) or os.path.exists(self.journal + MIRROR))
        self._clean = False
        base = _base_bytes(seq, listed)
        if fresh:
            write_mirrored(self.journal, _journal_head(seq))
        write_mirrored(self.path, base)
        if not fresh:
            write_mirrored(self.journal, _journal_head(seq))
        self._base_seq, self._base_size = seq, len(base)
        self._journal_size, self._clean = _J_HEAD_SIZE, True
        self.listed = listed

    def change(self, add: Listed | None = None, remove: Listed | None = None) -> None:
        """Records that `add` files exist (after they were written) or that `remove` files
        are going (before they are deleted): one frame appended to both journal copies, or a
        compaction into a new base when the journal outgrew it (or an append failed)."""
        change = {k: v for k, v in (("add", add), ("remove", remove)) if v}
        if not change:
            return
        frame = _frame(self._base_seq, self.seq + 1, change)
        if not self._clean or self._journal_size + len(frame) > max(COMPACT_AT, self._base_size):
            after = {g: set(v) for g, v in self.listed.items()}
            apply(after, change)
            self.rewrite(after)
            return
        self._clean = False  # until both copies hold the frame
        for p in (self.journal, self.journal + MIRROR):
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            try:
                view = memoryview(frame)
                while view:
                    view = view[os.write(fd, view) :]
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self.seq += 1
        self._journal_size += len(frame)
        self._clean = True
        apply(self.listed, change)  # in place: a copy per change would cost the list's size
