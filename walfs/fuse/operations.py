"""The FUSE face of a walfs engine (walfs.engine.contract.LogEngine): a pyfuse3 Operations
class that only translates requests into calls on the engine and on the mount's parts
(walfs/fuse/: the tree of names and inodes, attributes, open files, consumer files,
xattrs, cache invalidation and the watcher, permissions, errnos, the request wrapper).

A topic file's bytes are its records' values, each followed by b"\\n" (the engine's byte
view), from the byte of the low watermark when its inode was made (walfs.fuse.tree,
"Generations": after a trim the name leads to a new inode that starts at the first kept
record; open files keep theirs). Each newline-terminated line written is one record
(walfs.fuse.line_assembly); a partial line stays with its file handle until its newline,
flush (close) or fsync.
Everything here is append-only in the way Linux treats append-only inodes: every call
that would change or remove bytes gets EPERM.

pyfuse3 runs every request as a trio task on one thread, so a handler must never wait for
the disk: appends that wait for fsync (fsync=always), fsync itself, topic creation and
consumer commits run in worker threads (engines are thread-safe and its C calls release
the GIL). Reads, non-durable appends and the engine's index look-ups (byte_position,
offset_at_byte) are memory work and run inline: a thread hop (~100 us here) would cost
more than the call.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Sequence

import pyfuse3
import trio

from walfs.common.metrics import LoopLatency
from walfs.engine.capabilities import DiskUse, has
from walfs.engine.contract import LogEngine
from walfs.engine.names import MAX_NAME_BYTES
from walfs.engine.rules import append_lines, resident
from walfs.errors import OffsetOutOfRangeError, RecordTooLargeError
from walfs.fuse import consumer_files, kernel_flags, xattrs
from walfs.fuse.attributes import Attributes
from walfs.fuse.errnos import logged_fuse_error, topic_name_error, wal_errors_as_errno
from walfs.fuse.handles import Handle, Handles
from walfs.fuse.invalidation import Invalidator
from walfs.fuse.line_assembly import DEFAULT_MAX_LINE_BYTES, LineAssembler
from walfs.fuse.nodes import DIR_KINDS, Node, parse_partition_dir
from walfs.fuse.page_push import PAGE, PagePusher
from walfs.fuse.permissions import may_write_dir
from walfs.fuse.requests import wrap_handlers
from walfs.fuse.tree import Tree
from walfs.fuse.watcher import Watcher

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "MIN_MAX_LINE_BYTES",
    "WalOperations",
    "parse_partition_dir",
    "topic_name_error",
]

log = logging.getLogger("walfs.fuse")

# A writer that never sends a newline (cat /dev/zero >> t) is held at max_line_bytes,
# then gets EFBIG. The floor is FUSE's largest WRITE (1 MiB): then only a held partial
# line can pass it.
MIN_MAX_LINE_BYTES = 1 << 20

# The request handlers (each guarded and timed by walfs.fuse.requests).
REQUESTS = (
    "lookup", "getattr", "setattr", "mkdir", "unlink", "rmdir", "rename", "link", "symlink",
    "mknod", "opendir", "readdir", "releasedir", "open", "create", "read", "write", "flush",
    "fsync", "release", "statfs", "getxattr", "listxattr", "setxattr", "removexattr",
)  # fmt: skip


class WalOperations(pyfuse3.Operations):
    """Translates FUSE requests into engine calls.

    `wal` is the engine (walfs.engine.contract.LogEngine: this class uses nothing else).
    `blocking_appends` says whether an append can wait for the disk (fsync=always): such
    appends run in a worker thread, others run inline because a thread hop costs more than
    the append itself.
    """

    enable_writeback_cache = False  # the kernel would then ignore our sizes (fuse-facts)

    def __init__(
        self,
        engine: LogEngine,
        data_dir: str,
        *,
        uid: int | None = None,
        gid: int | None = None,
        blocking_appends: bool = False,
        info: dict[str, str] | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        umask: int = 0o022,
        allow_delete: bool = False,
    ) -> None:
        super().__init__()
        if max_line_bytes < MIN_MAX_LINE_BYTES:
            raise ValueError(f"max_line_bytes must be at least {MIN_MAX_LINE_BYTES}")
        self.max_line_bytes = max_line_bytes
        self.allow_delete = allow_delete
        self.engine = engine
        self.data_dir = data_dir
        self.blocking_appends = blocking_appends
        self.info = dict(info or {})

        self.invalidator = Invalidator()
        self.tree = Tree(engine, self.invalidator)
        self.attributes = Attributes(
            engine,
            self.tree.mtime_ns,
            self.tree.base,
            self.tree.ended,
            uid=os.getuid() if uid is None else uid,
            gid=os.getgid() if gid is None else gid,
            umask=umask,
        )
        self.handles = Handles()
        # Bytes appended go to the kernel's page cache of the topic's inode (run() is a
        # daemon task): the first read after writing is then served by the kernel.
        self.pages = PagePusher(engine, base_of=self.tree.base_of)
        self.watcher = Watcher(engine, self.tree, self.invalidator, self.pages)

        self._read_buf = bytearray(1 << 20)  # READ replies are built here (see read)
        self.cold_reads = 0  # READs sent to a thread because their data was not in memory
        self.read_bytes = 0  # bytes READs returned (not served by the kernel's page cache)
        # A summary of the daemon's metrics in Prometheus's text format (root xattr
        # user.walfs.metrics; walfs.common.metrics.Metrics.summary_text),
        # and the histogram every request is timed into (walfs.fuse.requests), which the
        # daemon's metrics expose.
        self.metrics_text: Callable[[], bytes] | None = None
        self.xattr_snapshots = xattrs.Snapshots()  # the metrics text, read by size then value
        self.cursor_pages = xattrs.CursorPages()  # a group's cursors: its directory's xattr
        self.request_latency = LoopLatency(REQUESTS)

        self.tree.load_streams()
        # Set once the kernel's INIT has been answered (settings such as the read-ahead
        # must be changed after it: INIT resets them).
        self.initialized = trio.Event()

    def init(self) -> None:
        # Called by pyfuse3 while it handles INIT; the answer goes out before this task
        # next yields, so whoever waits on `initialized` runs after it.
        self.initialized.set()

    def _entry(self, node: Node) -> pyfuse3.EntryAttributes:
        """The entry of a node for a reply that gives the kernel a reference (lookup,
        create, mkdir; readdir counts its own, walfs.fuse.tree.Tree.looked_up)."""
        info = self.attributes.info(node)  # one look at the stream for both
        ino = self.tree.ino(node, info)
        attrs = self.attributes.of(node, ino, info)
        self.tree.looked_up(ino)
        return attrs

    def may_write_dir(self, ctx: pyfuse3.RequestContext) -> bool:
        """Whether the caller may write a directory of the tree: the right to create
        groups and move their cursors."""
        a = self.attributes
        return may_write_dir(ctx, a.uid, a.gid, a.dir_mode)

    # ----------------------------------------------------------------- appending

    async def _append(self, node: Node, lines: bytes | bytearray | memoryview) -> None:
        """Appends newline-terminated lines (each one record) as one batch."""
        if not self.blocking_appends:
            self._append_inline(node, lines)
            return
        # Plain trys rather than wal_errors_as_errno: these run for every write request.
        try:
            await trio.to_thread.run_sync(self._append_lines, node, lines)
        except Exception as exc:
            raise _append_error(node, exc) from exc
        self.watcher.stream_changed(node.topic, node.partition)

    def _append_inline(self, node: Node, lines: bytes | bytearray | memoryview) -> None:
        """_append when appends do not wait for the disk."""
        try:
            self._append_lines(node, lines)
        except Exception as exc:
            raise _append_error(node, exc) from exc
        self.watcher.stream_changed(node.topic, node.partition)

    def _append_lines(self, node: Node, lines: bytes | bytearray | memoryview) -> None:
        # Flagged so that the engine's change callback (Watcher.poke) leaves this one
        # alone: the handler reports it itself.
        own = self.watcher.own_append
        own.active = True
        try:
            append_lines(self.engine, node.topic, node.partition, lines)
        finally:
            own.active = False

    def _release_held(self, h: Handle) -> None:
        """The writer of h sent a FLUSH, FSYNC or RELEASE: its write() calls have ended
        (the kernel drops the cached pages of a direct_io write()'s range around it), so
        every byte its WRITEs appended may be cached now (walfs.fuse.page_push)."""
        if h.held:
            self.pages.release(h.ino, h.held)
            h.held = h.held_last = 0

    async def _commit_partial(self, h: Handle) -> None:
        """At FLUSH, FSYNC, RELEASE (the writer is done with its WRITEs): the held partial
        line becomes a record, and what the handle appended may be cached."""
        self._release_held(h)
        assert h.lines is not None
        record = h.lines.pending_record()
        if record is None:
            return
        # The record is the partial line as it stands; its newline is the view's own.
        try:
            await self._append(h.node, record)
        except BaseException:
            h.lines.pending_failed()
            raise
        self.pages.grew(h.ino, h.node.topic, h.node.partition, len(record))
        h.lines.committed()

    async def commit_all_partials(self) -> None:
        """At shutdown: partial lines whose write() returned must not be lost."""
        for h in self.handles.open_handles():
            if h.lines is not None and h.lines.partial:
                try:
                    await self._commit_partial(h)
                except pyfuse3.FUSEError as exc:
                    log.error("could not commit a partial line of %r: %s", h.node.topic, exc)

    async def _commit_consumer(self, h: Handle) -> None:
        node = h.node
        frontier = h.frontier
        with wal_errors_as_errno("commit consumer offset"):
            n = await trio.to_thread.run_sync(
                consumer_files.commit_read, self.engine, node, h.base_offset, h.base_byte, frontier
            )
        h.committed_frontier = frontier
        if n:
            ino = self.tree.known_ino(node)
            if ino is not None:
                self.invalidator.sizes((ino,))

    # ----------------------------------------------------------------- FUSE: names

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        node = self.tree.child(self.tree.node(parent_inode), name)
        if node is None:
            return self.attributes.negative()
        return self._entry(node)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        # Inode numbers stay assigned for the mount's life, except old generations of a
        # trimmed topic, which go once the kernel forgets them (walfs.fuse.tree).
        for ino, n in inode_list:
            self.tree.forget(ino, n)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        node = self.tree.node(inode)
        with wal_errors_as_errno("getattr"):
            return self.attributes.of(node, inode)

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        node = self.tree.node(inode)
        if fields.update_size or fields.update_mode or fields.update_uid or fields.update_gid:
            # truncate, chmod, chown: what an append-only inode refuses.
            raise pyfuse3.FUSEError(errno.EPERM)
        # Times (touch): accepted and forgotten, so that tools which touch their output work.
        return self.attributes.of(node, inode)

    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self.tree.node(parent_inode)
        if len(name) > MAX_NAME_BYTES:
            raise pyfuse3.FUSEError(errno.ENAMETOOLONG)
        if parent.kind == "consumers":
            return await self._make_group(name, ctx)
        n = parse_partition_dir(name.decode("utf-8", "replace"))
        if parent.kind != "root" or n is None:
            raise pyfuse3.FUSEError(errno.EPERM)
        if n in self.tree.partitions():
            raise pyfuse3.FUSEError(errno.EEXIST)
        self.tree.made_partitions.add(n)
        return self._entry(Node("pdir", n))

    async def _make_group(self, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        err = topic_name_error(name)
        if err:
            raise pyfuse3.FUSEError(err)
        group = name.decode("utf-8")
        if group in self.tree.known_groups():
            raise pyfuse3.FUSEError(errno.EEXIST)
        if not self.may_write_dir(ctx):
            raise pyfuse3.FUSEError(errno.EACCES)
        with wal_errors_as_errno(f"create group {group!r}"):
            await trio.to_thread.run_sync(self.engine.create_group, group)
        self.tree.add_group(group)
        return self._entry(Node("group", group=group))

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        """`rm TOPIC` deletes the topic's stream (that partition) when the mount allows it
        (--allow-delete); EPERM otherwise. The kernel has checked write permission on the
        directory. Open readers of the file then see its end (reads return nothing)."""
        parent = self.tree.node(parent_inode)
        if not self.allow_delete or parent.kind not in ("root", "pdir"):
            raise pyfuse3.FUSEError(errno.EPERM)
        text = name.decode("utf-8", "replace")
        partition = parent.partition
        if not self.tree.is_topic(text, partition):
            raise pyfuse3.FUSEError(errno.ENOENT)
        with wal_errors_as_errno(f"delete {text!r}"):
            await trio.to_thread.run_sync(self.engine.delete, text, partition)
        self.tree.drop_stream((text, partition))
        await self.watcher.bytes_changed((text, partition), deleted=True)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        """`rmdir .consumers/NAME` deletes the group with its cursors (Kafka's DeleteGroups;
        EBUSY while a consumer file of it that commits is open here, as Kafka refuses a
        group with members). The kernel has checked write permission on .consumers.
        Every other rmdir: EPERM."""
        parent = self.tree.node(parent_inode)
        if parent.kind != "consumers":
            raise pyfuse3.FUSEError(errno.EPERM)
        group = name.decode("utf-8", "replace")
        if group not in self.tree.known_groups():
            raise pyfuse3.FUSEError(errno.ENOENT)
        if self._group_readers(group):
            raise pyfuse3.FUSEError(errno.EBUSY)
        with wal_errors_as_errno(f"delete group {group!r}"):
            await trio.to_thread.run_sync(self.engine.forget, group)
        self.tree.drop_group(group)
        log.info("deleted consumer group %r", group)

    def _group_readers(self, group: str, stream: tuple[str, int] | None = None) -> bool:
        """Whether a consumer file of the group (on `stream`, if given) that commits when
        closed is open in this mount."""
        return any(
            h.node.kind == "cfile"
            and h.may_commit
            and h.node.group == group
            and (stream is None or (h.node.topic, h.node.partition) == stream)
            for h in self.handles.open_handles()
        )

    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        raise pyfuse3.FUSEError(errno.EPERM)

    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)

    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)

    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)

    # ----------------------------------------------------------------- FUSE: directories

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        node = self.tree.node(inode)
        if node.kind not in DIR_KINDS:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return self.handles.add(Handle(node))

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        h = self.handles[fh]
        with wal_errors_as_errno("readdir"):
            if start_id == 0 or h.listing is None:
                # The listing as of the first page: later pages (the kernel asks for a
                # few dozen entries at a time) go through the same list, so that a
                # directory of N names costs one listing, not N / page of them. Names
                # made meanwhile show at the next opendir or rewinddir (POSIX leaves it
                # open whether they show in a listing under way).
                if start_id == 0:
                    self.tree.refresh_streams()
                h.listing = self.tree.listing(h.node)
            entries = h.listing
            ino_of, attributes_of, info_of = self.tree.ino, self.attributes.of, self.attributes.info
            looked_up, reply = self.tree.looked_up, pyfuse3.readdir_reply
            for i in range(start_id, len(entries)):
                name, node = entries[i]
                # One look at the stream per entry, for its inode's base and its size.
                info = info_of(node)
                ino = ino_of(node, info)
                if not reply(token, name, attributes_of(node, ino, info), i + 1):
                    return
                looked_up(ino)

    async def releasedir(self, fh: int) -> None:
        self.handles.pop(fh, None)

    # ----------------------------------------------------------------- FUSE: files

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        node = self.tree.node(inode)
        if node.kind in DIR_KINDS:
            raise pyfuse3.FUSEError(errno.EISDIR)
        writable = (flags & os.O_ACCMODE) != os.O_RDONLY
        if node.kind == "cfile":
            if writable or flags & os.O_TRUNC:
                raise pyfuse3.FUSEError(errno.EACCES)
            return await self._open_consumer(node, ctx)
        # libfuse turns on atomic O_TRUNC, so `echo x > t` arrives here as O_TRUNC.
        if flags & os.O_TRUNC or (writable and not flags & os.O_APPEND):
            raise pyfuse3.FUSEError(errno.EPERM)
        lines = LineAssembler(self.max_line_bytes) if writable else None
        # The file's positions start at its generation's base (walfs.fuse.tree).
        h = Handle(node, ino=inode, lines=lines, append=writable, base_byte=self.tree.base[inode])
        # Writers bypass the page cache: the kernel would cache their bytes at the offset
        # it believes is the end, which is wrong when others append or a line is partial.
        # Readers keep the cache: bytes before the size never change, and a new size
        # drops the cached pages anyway.
        return pyfuse3.FileInfo(fh=self.handles.add(h), direct_io=writable, keep_cache=True)

    async def _open_consumer(self, node: Node, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        with wal_errors_as_errno("open consumer file"):
            base_offset, base_byte = consumer_files.view_start(self.engine, node)
        # The peek view never commits; the committing view commits for those who may
        # write the tree's directories.
        may_commit = not node.peek and self.may_write_dir(ctx)
        h = Handle(node, base_offset=base_offset, base_byte=base_byte, may_commit=may_commit)
        # direct_io: the view's start moves with each commit, so cached pages of another
        # open would be stale.
        return pyfuse3.FileInfo(fh=self.handles.add(h), direct_io=True, keep_cache=False)

    async def create(
        self,
        parent_inode: int,
        name: bytes,
        mode: int,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent = self.tree.node(parent_inode)
        if parent.kind not in ("root", "pdir"):
            raise pyfuse3.FUSEError(errno.EACCES if parent.kind == "gpdir" else errno.EPERM)
        err = topic_name_error(name)
        if err:
            raise pyfuse3.FUSEError(err)
        topic = name.decode("utf-8")
        partition = parent.partition
        node = Node("topic", partition, topic)
        if self.tree.stream_exists(topic, partition):
            # A stale negative entry in the kernel: the topic exists after all.
            if flags & os.O_EXCL:
                raise pyfuse3.FUSEError(errno.EEXIST)
            info = await self.open(self.tree.ino(node), flags, ctx)
            return info, self._entry(node)
        writable = (flags & os.O_ACCMODE) != os.O_RDONLY
        # A new topic may be filled by `>` or cp (no O_APPEND, maybe O_TRUNC): their
        # writes are accepted as long as they run sequentially from 0.
        lines = LineAssembler(self.max_line_bytes) if writable else None
        ino = self.tree.ino(node)
        append = bool(flags & os.O_APPEND)
        h = Handle(node, ino=ino, lines=lines, append=append, base_byte=self.tree.base[ino])
        # The empty stream is made durable now, so that `touch t` leaves a topic behind.
        stream = (topic, partition)
        self.tree.creating.add(stream)
        try:
            with wal_errors_as_errno(f"create {topic!r}"):
                await trio.to_thread.run_sync(self.engine.create, topic, partition)
        finally:
            self.tree.creating.discard(stream)
        self.tree.add_stream(stream, made_in=parent_inode)
        fh = self.handles.add(h)
        return pyfuse3.FileInfo(fh=fh, direct_io=writable, keep_cache=True), self._entry(node)

    async def read(self, fh: int, off: int, size: int) -> bytes | memoryview:  # type: ignore[override]
        # Records in the page cache are copied inline: 128 KiB take ~0.1 ms and a thread
        # hop costs as much again on a busy 2-core machine. They go into one buffer the
        # mount reuses (pyfuse3 takes any buffer, its stub says bytes): pyfuse3 sends the
        # reply before this task yields (nothing on that path awaits), so no other READ can
        # overwrite them first. Records on disk only (old data, a consumer's backlog) are
        # copied in a thread, so that the disk's wait does not stall every other request.
        h = self.handles[fh]
        node = h.node
        topic, part = node.topic, node.partition
        pos = h.base_byte + off  # a consumer file's view, or a topic file's generation
        if h.ino in self.tree.ended:
            return b""  # a deleted topic's old generation: its end
        data: bytes | memoryview
        try:  # a plain try: this runs for every READ request
            if resident(self.engine, topic, part, pos, size):
                if len(self._read_buf) < size:
                    self._read_buf = bytearray(size)
                out = memoryview(self._read_buf)[:size]
                data = out[: self.engine.read_bytes(topic, part, pos, out)]
            else:
                self.cold_reads += 1
                data = await trio.to_thread.run_sync(self._read_cold, topic, part, pos, size)
        except OffsetOutOfRangeError as exc:
            data = await self._page_across_low(h, pos, size, exc)
        except Exception as exc:
            raise logged_fuse_error(f"read {node.topic!r}", exc) from exc
        self.read_bytes += len(data)
        if node.kind == "cfile" and off <= h.frontier:
            h.frontier = max(h.frontier, off + len(data))
        return data

    async def _page_across_low(self, h: Handle, pos: int, size: int, exc: Exception) -> memoryview:
        """A READ that reached trimmed bytes: ENODATA, except when an old generation (a
        topic file opened before a trim) reads the page that holds the low watermark's
        byte. The kernel reads whole pages, and a reader at the end (`tail -f`) sits in
        that page: its trimmed head reads as NUL bytes up to the newline that ends the
        last trimmed record (the one byte of it that is known), the rest as it is
        (docs/mount.md "Trimming and retention")."""
        node = h.node
        try:
            low = self.engine.info(node.topic, node.partition).low_byte
            cut = low - pos
            if node.kind == "topic" and 0 < cut < min(PAGE, size) and (pos - h.base_byte) % PAGE == 0:
                buf = bytearray(size)
                buf[cut - 1] = 0x0A  # every record's line ends with b"\n"
                n = await trio.to_thread.run_sync(
                    self.engine.read_bytes, node.topic, node.partition, low, memoryview(buf)[cut:]
                )
                return memoryview(buf)[: cut + n]
        except Exception as again:
            exc = again
        raise logged_fuse_error(f"read {node.topic!r}", exc) from exc

    def _read_cold(self, topic: str, part: int, pos: int, size: int) -> memoryview:
        """A read that may wait for the disk (in a worker thread), into its own buffer."""
        buf = bytearray(size)
        return memoryview(buf)[: self.engine.read_bytes(topic, part, pos, buf)]

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self.handles[fh]
        lines = h.lines
        if lines is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        if not h.append and off != h.next_pos:
            raise pyfuse3.FUSEError(errno.EPERM)  # writing at an offset
        if lines.refused:
            raise pyfuse3.FUSEError(errno.EFBIG)
        if h.held > h.held_last:
            # All but the previous WRITE's bytes: that one may be the first part of the
            # same write() (a buffer that does not start on a page reaches the daemon as
            # two WRITEs), and the kernel drops the cached pages of a write()'s whole
            # range when it ends (ftrace: invalidate_inode_pages2_range from
            # fuse_direct_io), which would take pages stored in between with them.
            self.pages.release(h.ino, h.held - h.held_last)
            h.held = h.held_last
        try:
            batch = lines.complete_lines(buf)
        except RecordTooLargeError as exc:
            log.warning("a line of %r: %s (EFBIG)", h.node.topic, exc)
            raise pyfuse3.FUSEError(errno.EFBIG) from None
        if batch is not None:
            # The complete lines go in as one batch (split in C, append_lines): no other
            # writer's line can land between them, and a crash keeps all or none.
            await self._append(h.node, batch)
            h.held += len(batch)
            h.held_last = len(batch)
            self.pages.grew(h.ino, h.node.topic, h.node.partition, len(batch), held=True)
            lines.appended(buf)
        else:
            h.held_last = 0
        h.next_pos += len(buf)
        return len(buf)

    async def flush(self, fh: int) -> None:
        # FLUSH is what close() waits for; RELEASE comes later, asynchronously. Settle
        # here so that the next open (by the same shell script, say) sees the result.
        h = self.handles[fh]
        if h.has_unsettled():
            await self._settle(h)

    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self.handles[fh]
        if h.writable:
            await self._commit_partial(h)
        # Always sync, also for read-only handles: fsync(fd) is how a reader asks that
        # what it saw is durable.
        with wal_errors_as_errno("fsync"):
            await trio.to_thread.run_sync(self.engine.sync)

    async def release(self, fh: int) -> None:
        h = self.handles.get(fh)
        if h is None:
            return
        try:
            if h.has_unsettled():
                await self._settle(h)
        finally:
            self.handles.pop(fh, None)

    async def _settle(self, h: Handle) -> None:
        """FLUSH's and RELEASE's work: a writer's partial line becomes a record, a reader's
        cursor is committed."""
        if h.lines is not None:
            await self._commit_partial(h)
        else:
            await self._commit_consumer(h)

    # ----------------------------------------------------------------- FUSE: the rest

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        out = pyfuse3.StatvfsData()
        out.f_namemax = MAX_NAME_BYTES
        if not has(self.engine, DiskUse):
            # An engine without a disk of its own (the cluster) has no file system to
            # report: sizes show as 0 blocks (df shows the mount; Kafka's own tools show
            # the cluster's disks).
            out.f_bsize = out.f_frsize = 4096
            return out
        st = os.statvfs(self.data_dir)
        out.f_bsize = st.f_bsize
        out.f_frsize = st.f_frsize
        out.f_blocks = st.f_blocks
        out.f_bfree = st.f_bfree
        out.f_bavail = st.f_bavail
        out.f_files = st.f_files
        out.f_ffree = st.f_ffree
        out.f_favail = st.f_favail
        out.f_namemax = MAX_NAME_BYTES
        return out

    def _xattrs(self, node: Node) -> xattrs.Getters:
        if node.kind != "root":
            return xattrs.stream_xattrs(self.engine, node)
        metrics = self.metrics_text
        return {
            "pid": lambda: str(os.getpid()),
            "cold_reads": lambda: str(self.cold_reads),
            "read_bytes": lambda: str(self.read_bytes),
            "pushed_bytes": lambda: str(self.pages.pushed_bytes),
            "push_skipped_bytes": lambda: str(self.pages.skipped_bytes),
            "auto_inval_data": lambda: "off" if kernel_flags.active() else "on",
            **({"metrics": lambda: metrics().decode()} if metrics is not None else {}),
            "data_dir": lambda: self.data_dir,
            **{k: _constant(v) for k, v in self.info.items()},
        }

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        node = self.tree.node(inode)
        key = xattrs.key_of(name)
        first = xattrs.cursors_page(key) if node.kind == "group" else None
        if first is not None:
            with wal_errors_as_errno("getxattr"):  # reads the group's cursor files: a thread
                pages, engine, pid, group = self.cursor_pages, self.engine, ctx.pid, node.group

                def render() -> bytes:
                    return pages.page(engine, pid, group, first)

                value = self.xattr_snapshots.take(ctx.pid, inode, key)
                if value is None:
                    value = await trio.to_thread.run_sync(render)
                    self.xattr_snapshots.hold(ctx.pid, inode, key, value)
                return value
        with wal_errors_as_errno("getxattr"):  # a consumer file's getters read its cursor
            getter = xattrs.getter_for(self.engine, node, key, self._xattrs(node))
            if getter is None:
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
            if key in xattrs.SNAPSHOTTED:
                return self.xattr_snapshots.value(ctx.pid, inode, key, lambda: getter().encode())
            return getter().encode()

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        node = self.tree.node(inode)
        with wal_errors_as_errno("listxattr"):
            keys = [k for k in self._xattrs(node) if k not in xattrs.UNLISTED]
            return [(xattrs.XATTR_PREFIX + k).encode() for k in keys]

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext) -> None:
        """user.walfs.low_watermark trims a topic (its partition); user.walfs.retention_ms
        and user.walfs.retention_bytes set its retention (-1: no limit; "default": the
        WAL's); on a consumer file, user.walfs.committed_offset commits and
        user.walfs.reset_offset resets (EBUSY while a consumer file of the group on that
        stream that commits is open here). The kernel has checked write permission on the
        file (default_permissions)."""
        node = self.tree.node(inode)
        key, change = xattrs.change_for(self.engine, node, name, value)
        if key == "reset_offset" and self._group_readers(node.group, (node.topic, node.partition)):
            raise pyfuse3.FUSEError(errno.EBUSY)
        with wal_errors_as_errno(f"setxattr {key}"):
            await trio.to_thread.run_sync(change)
        if key == "low_watermark":
            # Before the reply: the next open of the name must find the new generation.
            await self.watcher.bytes_changed((node.topic, node.partition))
        self.invalidator.sizes((inode,))

    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        raise pyfuse3.FUSEError(errno.ENOTSUP)


def _append_error(node: Node, exc: Exception) -> pyfuse3.FUSEError:
    return logged_fuse_error(f"append to {node.topic!r}/{node.partition}", exc)


def _constant(value: str) -> Callable[[], str]:
    return lambda: value


# Every request handler: guarded and timed (walfs.fuse.requests).
wrap_handlers(WalOperations, REQUESTS)
