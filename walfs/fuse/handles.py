"""Open files (FUSE file handles): what a writer holds and how far a reader got."""

from __future__ import annotations

import errno
from dataclasses import dataclass

import pyfuse3

from walfs.fuse.line_assembly import LineAssembler
from walfs.fuse.nodes import Node


@dataclass(slots=True)
class Handle:
    """State of one open file (one FUSE fh)."""

    node: Node
    # The inode the file was opened by (writers: whose page cache gets their bytes).
    ino: int = 0
    # Writers: the partial line held until its newline, flush (close) or fsync.
    lines: LineAssembler | None = None
    # Opened with O_APPEND: the kernel's write offset is ignored (it is stale when others
    # append), the data goes to the stream's tail.
    append: bool = False
    # A handle that created the topic without O_APPEND (`>`, cp) may write sequentially
    # from 0; next_pos is where its next write must start.
    next_pos: int = 0
    # Consumer files: whether the opener may move the group's cursor (write permission on
    # the group's directory); others read the same bytes and commit nothing.
    may_commit: bool = True
    # Consumer files: where this handle's view starts and how far it has been read
    # contiguously from its start (only that much is committed at close).
    base_offset: int = 0
    base_byte: int = 0
    frontier: int = 0
    committed_frontier: int = 0  # the frontier at the last commit (flush repeats)
    # Bytes this handle's last WRITEs appended and the page push must not send yet
    # (walfs.fuse.page_push.PagePusher.release): those of its latest WRITE go at its next
    # FLUSH, FSYNC or RELEASE, or with the WRITE after next (`held_last`: the latest
    # WRITE's share of `held`; see WalOperations.write).
    held: int = 0
    held_last: int = 0
    # Directories: the listing readdir took at its first call (offset 0), which its later
    # calls page through: a listing of 100,000 topics is built once per `ls`, not once
    # per page of entries the kernel asks for.
    listing: list[tuple[bytes, Node]] | None = None

    @property
    def writable(self) -> bool:
        return self.lines is not None

    def reads_uncommitted(self) -> bool:
        """A consumer file read further than its last commit, by one who may commit."""
        return self.node.kind == "cfile" and self.may_commit and self.frontier > self.committed_frontier

    def has_unsettled(self) -> bool:
        """Whether FLUSH or RELEASE has work to do on this handle: a writer's held bytes or
        partial line, or a reader's uncommitted cursor. An `echo >> t` sends two FLUSHes and
        a RELEASE after its one WRITE, and most of them find nothing here."""
        if self.lines is not None:
            return bool(self.held or self.lines.partial)
        return self.reads_uncommitted()


class Handles(dict[int, Handle]):
    """fh -> Handle (numbers are never reused during a mount). A dict whose missing keys
    are EBADF: `handles[fh]` is a plain dict look-up, run by three of an echo's five
    requests."""

    def __init__(self) -> None:
        super().__init__()
        self._next_fh = 1

    def __missing__(self, fh: int) -> Handle:
        raise pyfuse3.FUSEError(errno.EBADF)

    def add(self, h: Handle) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self[fh] = h
        return fh

    def open_handles(self) -> list[Handle]:
        return list(self.values())
