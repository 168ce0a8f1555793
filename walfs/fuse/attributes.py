"""What the kernel is told about a node: mode, owner, size, times, and how long it may
cache them (entries never disappear, sizes change)."""

from __future__ import annotations

import stat
import time

import pyfuse3

from walfs.engine.contract import LogEngine
from walfs.engine.types import StreamInfo
from walfs.fuse.consumer_files import committed_byte
from walfs.fuse.nodes import DIR_KINDS, Node, Stream
from walfs.fuse.page_push import mtime_ns as page_mtime_ns

# Entries never disappear (nothing can be unlinked), so the kernel may keep them long.
ENTRY_TIMEOUT = 60.0
# Sizes change; the invalidation task tells the kernel at once, this bounds the damage if
# a notification is ever lost (e.g. growth the watcher has not seen yet).
ATTR_TIMEOUT = 1.0
# Spark/Hadoop probe `.<name>.crc` beside every file: let the kernel answer the repeats.
# New topics invalidate these negative entries explicitly, so the timeout may be long.
NEGATIVE_TIMEOUT = 30.0


class Attributes:
    """Every node belongs to uid:gid; its mode is the base mode less the umask, and the
    kernel enforces it (default_permissions). `mtime_ns`: each stream's mtime (kept by
    walfs.fuse.invalidation), the mount's start for the rest. `base` and `ended`: where
    each topic inode's file starts in its stream's byte view, and the old generations of
    deleted streams (walfs.fuse.tree, "Generations")."""

    def __init__(
        self,
        engine: LogEngine,
        mtime_ns: dict[Stream, int],
        base: dict[int, int],
        ended: set[int],
        *,
        uid: int,
        gid: int,
        umask: int,
    ) -> None:
        if not 0 <= umask <= 0o777:
            raise ValueError(f"umask {umask:o} is not a permission mask")
        self.engine = engine
        self.mtime_ns = mtime_ns
        self.base = base
        self.ended = ended
        self.uid = uid
        self.gid = gid
        self.dir_mode = 0o777 & ~umask
        self.file_mode = 0o666 & ~umask
        # Consumer files: writes are refused (EACCES), but the w bit is what setfattr of
        # their committed_offset needs (the kernel checks it).
        self.cfile_mode = 0o666 & ~umask
        self.start_ns = time.time_ns()
        # A stream the mount found at its start and that has not grown since has no entry
        # in mtime_ns (100,000 of them cost nothing): it shows the mtime a growth at the
        # start would have given it.
        self.streams_start_ns = page_mtime_ns(self.start_ns)

    def info(self, node: Node) -> StreamInfo | None:
        """The engine's marks of the stream a file node shows (None for a directory): a
        readdir or lookup asks them once and gives them to Tree.ino and to `of`."""
        return None if node.kind in DIR_KINDS else self.engine.info(node.topic, node.partition)

    def of(self, node: Node, ino: int, info: StreamInfo | None = None) -> pyfuse3.EntryAttributes:
        """`info`: the stream's marks when the caller has them (`info`), else asked here."""
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ino
        attrs.generation = 0
        attrs.entry_timeout = ENTRY_TIMEOUT
        attrs.attr_timeout = ATTR_TIMEOUT
        attrs.st_uid = self.uid
        attrs.st_gid = self.gid
        attrs.st_blksize = 128 * 1024  # the kernel's READ size: fewer, fuller requests
        mtime = self.start_ns
        if node.kind in DIR_KINDS:
            attrs.st_mode = stat.S_IFDIR | self.dir_mode
            attrs.st_nlink = 2
            attrs.st_size = 0
        else:
            stream = (node.topic, node.partition)
            mtime = self.mtime_ns.get(stream, self.streams_start_ns)
            if info is None:
                info = self.engine.info(node.topic, node.partition)
            size = info.byte_size
            if node.kind == "topic":
                attrs.st_mode = stat.S_IFREG | self.file_mode
                # One stream, two names when partition 0 (MOUNT/t and MOUNT/partition=0/t).
                attrs.st_nlink = 2 if node.partition == 0 else 1
                # The file starts at its generation's base: the low watermark's byte
                # when its inode was made; nothing is left of a deleted stream's.
                size = 0 if ino in self.ended else size - self.base.get(ino, 0)
            else:
                # Reading a consumer file (and setting its xattrs) is how it is used.
                attrs.st_mode = stat.S_IFREG | self.cfile_mode
                attrs.st_nlink = 1
                # Its size moves with appends through other inodes and with commits by
                # other handles: let the kernel ask every time (a cheap call).
                attrs.attr_timeout = 0
                size -= committed_byte(self.engine, node)
            attrs.st_size = max(size, 0)
        attrs.st_blocks = (attrs.st_size + 511) // 512
        attrs.st_atime_ns = mtime
        attrs.st_mtime_ns = mtime
        attrs.st_ctime_ns = mtime
        return attrs

    @staticmethod
    def negative() -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = 0  # a negative entry the kernel caches for entry_timeout
        attrs.entry_timeout = NEGATIVE_TIMEOUT
        return attrs
