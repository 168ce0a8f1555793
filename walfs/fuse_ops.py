"""The FUSE face of a walfs engine (walfs.engine_api.LogEngine): a pyfuse3 Operations
class that only translates.

The tree it shows::

    MOUNT/<topic>                                  partition 0 of <topic>
    MOUNT/partition=<n>/<topic>                    partition n (partition=0 is partition 0 again)
    MOUNT/.consumers/<group>/<topic>               <topic> after <group>'s committed offset
    MOUNT/.consumers/<group>/partition=<n>/<topic>

A topic file's bytes are its records' values, each followed by b"\\n" (the engine's byte
view). Each newline-terminated line written is one record; a partial line stays with its
file handle until its newline, flush (close) or fsync. Everything here is append-only in
the way Linux treats append-only inodes: every call that would change or remove bytes gets
EPERM. Byte and record logic lives in the engine; this module decides errnos, inodes,
kernel cache timeouts and when blocking work leaves the trio loop.

pyfuse3 runs every request as a trio task on one thread, so a handler must never wait for
the disk: appends that wait for fsync (fsync=always), fsync itself, topic creation and
consumer commits run in worker threads (engines are thread-safe and its C calls release
the GIL). Reads, non-durable appends and the engine's index look-ups (byte_position,
offset_at_byte) are memory work and run inline: a thread hop (~100 us here) would cost
more than the call.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyfuse3
import trio

from walfs import errors as wal_errors
from walfs.engine_api import Change, LogEngine, is_local
from walfs.names import CONSUMERS_DIR, MAX_NAME_BYTES, PARTITION_PREFIX, name_error
from walfs.page_push import PagePusher
from walfs.page_push import mtime_ns as page_mtime_ns
from walfs.retention import parse_limit, show_limit

log = logging.getLogger("walfs.fuse")

MAX_PARTITION = 2**31 - 1

# Entries never disappear (nothing can be unlinked), so the kernel may keep them long.
ENTRY_TIMEOUT = 60.0
# Sizes change; the invalidation task tells the kernel at once, this bounds the damage if
# a notification is ever lost (e.g. growth the watcher has not seen yet).
ATTR_TIMEOUT = 1.0
# Spark/Hadoop probe `.<name>.crc` beside every file: let the kernel answer the repeats.
# New topics invalidate these negative entries explicitly, so the timeout may be long.
NEGATIVE_TIMEOUT = 30.0
# How often the watcher looks for growth and topics that did not come through this mount.
WATCH_INTERVAL = 1.0
# Invalidations are batched over this long: one per append would cost a kernel round trip
# per write, and tail -f polls once a second anyway.
INVALIDATE_COALESCE = 0.02

XATTR_PREFIX = "user.walfs."


class Node(NamedTuple):
    """What an inode stands for. Kinds: root, pdir, consumers, group, gpdir, topic, cfile."""

    kind: str
    partition: int = 0
    topic: str = ""
    group: str = ""


ROOT = Node("root")
CONSUMERS = Node("consumers")
DIR_KINDS = frozenset({"root", "pdir", "consumers", "group", "gpdir"})


@dataclass
class Handle:
    """State of one open file (one FUSE fh)."""

    node: Node
    writable: bool = False
    # Opened with O_APPEND: the kernel's write offset is ignored (it is stale when others
    # append), the data goes to the stream's tail.
    append: bool = False
    # A handle that created the topic without O_APPEND (`>`, cp) may write sequentially
    # from 0; next_pos is where its next write must start.
    next_pos: int = 0
    partial: bytearray = field(default_factory=bytearray)
    # A line longer than max_line_bytes was refused (EFBIG): every later write through
    # this handle is refused too, so no tail of that line is ever stored as a record.
    refused_line: bool = False
    # Consumer files: whether the opener may move the group's cursor (write permission on
    # the group's directory); others read the same bytes and commit nothing.
    may_commit: bool = True
    # Where a held partial line and a request's complete lines are joined for one
    # append_lines call: kept across requests, so a stream of 1 MiB writes that end
    # mid-line (dd bs=1M) costs one memcpy per request, not an allocation and a realloc.
    scratch: bytearray | None = None
    # Consumer files: where this handle's view starts and how far it has been read
    # contiguously from its start (only that much is committed at close).
    base_offset: int = 0
    base_byte: int = 0
    frontier: int = 0
    committed_frontier: int = 0  # the frontier at the last commit (flush repeats)
    # Bytes this handle's last WRITE appended: they go to the kernel's page cache at the
    # handle's next request (see WalOperations._release_held).
    held: int = 0


def parse_partition_dir(name: str) -> int | None:
    """`partition=<n>` with n in 0..2**31-1 written canonically, else None."""
    if not name.startswith(PARTITION_PREFIX):
        return None
    digits = name[len(PARTITION_PREFIX) :]
    if not digits.isascii() or not digits.isdigit() or (len(digits) > 1 and digits[0] == "0"):
        return None
    n = int(digits)
    return n if n <= MAX_PARTITION else None


# The longest line (one record) a write through the mount may make. A writer that never
# sends a newline (cat /dev/zero >> t) is held at this many bytes, then gets EFBIG. The
# floor is FUSE's largest WRITE (1 MiB): then only a held partial line can pass it.
DEFAULT_MAX_LINE_BYTES = 16 << 20
MIN_MAX_LINE_BYTES = 1 << 20


def caller_groups(pid: int) -> set[int]:
    """The supplementary groups of the calling process (for group permission checks)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return {int(g) for g in line.split()[1:]}
    except (OSError, ValueError):
        pass
    return set()


def topic_name_error(name: bytes) -> int:
    """0 if `name` may be a topic in the tree, else the errno that explains why not. The
    rule is walfs.names.topic_bytes (the same on every face); this only picks the errno."""
    if len(name) > MAX_NAME_BYTES:
        return errno.ENAMETOOLONG
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        return errno.EINVAL
    return 0 if name_error(text) is None else errno.EINVAL


def fuse_error_for(exc: BaseException) -> pyfuse3.FUSEError:
    """The errno a walfs error becomes at the file system boundary."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc
    if isinstance(exc, wal_errors.WalIOError):
        return pyfuse3.FUSEError(exc.errno or errno.EIO)
    if isinstance(exc, (wal_errors.InvalidTopicError, wal_errors.InvalidPartitionError)):
        return pyfuse3.FUSEError(errno.EINVAL)
    if isinstance(exc, wal_errors.RecordTooLargeError):
        return pyfuse3.FUSEError(errno.EFBIG)
    if isinstance(exc, wal_errors.OffsetOutOfRangeError):
        # Bytes below the low watermark were trimmed: say "no data", not "I/O error".
        return pyfuse3.FUSEError(errno.ENODATA)
    if isinstance(exc, wal_errors.ReadOnlyError):
        return pyfuse3.FUSEError(errno.EROFS)
    if isinstance(exc, OSError) and exc.errno:
        return pyfuse3.FUSEError(exc.errno)
    return pyfuse3.FUSEError(errno.EIO)


def logged_fuse_error(what: str, exc: Exception) -> pyfuse3.FUSEError:
    """fuse_error_for(exc), logged (a warning for a full disk or trimmed data)."""
    err = fuse_error_for(exc)
    if err is not exc:
        level = logging.WARNING if err.errno in (errno.ENOSPC, errno.ENODATA) else logging.ERROR
        log.log(level, "%s failed: %r", what, exc, exc_info=level == logging.ERROR)
    return err


@contextmanager
def wal_errors_as_errno(what: str) -> Iterator[None]:
    try:
        yield
    except pyfuse3.FUSEError:
        raise
    except Exception as exc:
        raise logged_fuse_error(what, exc) from exc


class WalOperations(pyfuse3.Operations):
    """Translates FUSE requests into engine calls.

    `wal` is the engine (walfs.engine_api.LogEngine: this class uses nothing else).
    `blocking_appends` says whether an append can wait for the disk (fsync=always): such
    appends run in a worker thread, others run inline because a thread hop costs more than
    the append itself.
    """

    enable_writeback_cache = False  # the kernel would then ignore our sizes (fuse-facts)

    def __init__(
        self,
        wal: LogEngine,
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
        self.wal = wal
        self.data_dir = data_dir
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        if not 0 <= umask <= 0o777:
            raise ValueError(f"umask {umask:o} is not a permission mask")
        # Every node belongs to uid:gid; its mode is the base mode less the umask, and
        # the kernel enforces it (default_permissions).
        self.dir_mode = 0o777 & ~umask
        self.file_mode = 0o666 & ~umask
        self.cfile_mode = 0o444 & ~umask
        self.blocking_appends = blocking_appends
        self.info = dict(info or {})
        self.start_ns = time.time_ns()

        self._inodes: dict[Node, int] = {ROOT: pyfuse3.ROOT_INODE}
        self._nodes: dict[int, Node] = {pyfuse3.ROOT_INODE: ROOT}
        self._next_ino = pyfuse3.ROOT_INODE + 1
        self._handles: dict[int, Handle] = {}
        self._next_fh = 1

        # Streams (topic, partition) known to exist (a cache of the Wal's list).
        self._streams: set[tuple[str, int]] = set()
        self._made_partitions: set[int] = set()  # mkdir partition=<n> without streams yet
        self._groups: set[str] = set()
        self._inos_of_stream: dict[tuple[str, int], tuple[int, ...]] = {}  # see _stream_inos
        self._mtime_ns: dict[tuple[str, int], int] = {}
        self._seen_size: dict[tuple[str, int], int] = {}

        # Work for the invalidation task (cache notifications must not come from handlers).
        self._dirty_inodes: set[int] = set()
        self._poked: set[tuple[str, int]] = set()  # streams grown outside the handlers
        self._rewritten: set[tuple[str, int]] = set()  # trimmed or deleted (by anyone)
        self._creating: set[tuple[str, int]] = set()  # CREATE handlers under way

        self._watch_poke = trio.Event()
        self._trio_token: trio.lowlevel.TrioToken | None = None
        self._own_append = threading.local()  # .active while a handler appends
        self._read_buf = bytearray(1 << 20)  # READ replies are built here (see read)
        self.cold_reads = 0  # READs sent to a thread because their data was not in memory
        # The daemon's metrics in Prometheus's text format (root xattr user.walfs.metrics).
        self.metrics_text: Callable[[], bytes] | None = None
        self._dirty_entries: set[tuple[int, bytes]] = set()
        self._wakeup = trio.Event()  # sizes changed (batched)
        self._entries_wakeup = trio.Event()  # names appeared (at once)
        # Bytes appended go to the kernel's page cache of the topic's inode (run() is a
        # daemon task): the first read after writing is then served by the kernel.
        self.pages = PagePusher(wal)

        self.refresh_streams()
        # Set once the kernel's INIT has been answered (settings such as the read-ahead
        # must be changed after it: INIT resets them).
        self.initialized = trio.Event()

    def init(self) -> None:
        # Called by pyfuse3 while it handles INIT; the answer goes out before this task
        # next yields, so whoever waits on `initialized` runs after it.
        self.initialized.set()

    # ----------------------------------------------------------------- inodes and nodes

    def _ino(self, node: Node) -> int:
        ino = self._inodes.get(node)
        if ino is None:
            ino = self._next_ino
            self._next_ino += 1
            self._inodes[node] = ino
            self._nodes[ino] = node
            self._inos_of_stream.clear()
        return ino

    def _node(self, ino: int) -> Node:
        try:
            return self._nodes[ino]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def refresh_streams(self) -> list[tuple[str, int]]:
        """Re-reads the Wal's stream list (one pass); returns the streams new to the mount."""
        new = [st for st in self.wal.streams() if st not in self._streams]
        for st in new:
            self._add_stream(st)
        groups = self.wal.groups()
        if not self._groups.issuperset(groups):
            self._groups.update(groups)
            self._inos_of_stream.clear()
        return new

    def _add_stream(self, stream: tuple[str, int], made_in: int = 0) -> None:
        """A stream new to the mount. `made_in`: the directory inode whose CREATE made it
        (the kernel holds a fresh entry there: dropping it would drop the inode and its
        cached pages with it)."""
        if not made_in and stream in self._creating:
            return  # the watcher saw a CREATE of this mount: the handler adds it itself
        self._streams.add(stream)
        self._mtime_ns.setdefault(stream, page_mtime_ns())
        topic, partition = stream
        # The kernel may hold negative entries for this name under every alias.
        name = topic.encode()
        parents = [Node("pdir", partition)]
        if partition == 0:
            parents.append(ROOT)
        for group in self._groups:
            parents.append(Node("gpdir", partition, group=group))
            if partition == 0:
                parents.append(Node("group", group=group))
        for parent in parents:
            ino = self._inodes.get(parent)
            if ino is not None and ino != made_in:
                self._dirty_entries.add((ino, name))
        # The watcher may have seen the creation first (the engine's watch call).
        self._dirty_entries.discard((made_in, name))
        root_name = f"{PARTITION_PREFIX}{partition}".encode()
        self._dirty_entries.add((pyfuse3.ROOT_INODE, root_name))
        self._entries_wakeup.set()

    def _stream_exists(self, topic: str, partition: int) -> bool:
        if (topic, partition) in self._streams:
            return True
        # Streams that did not come through this mount (e.g. an in-process Kafka
        # listener) are found here before the watcher's next round.
        if (topic, partition) in self.wal.streams(topic):
            self._add_stream((topic, partition))
            return True
        return False

    def _partitions(self) -> set[int]:
        # partition=0 always exists: it is the root's own topics under their other name.
        return {0} | {p for _, p in self._streams} | self._made_partitions

    def _topics_in(self, partition: int) -> list[str]:
        return sorted(t for t, p in self._streams if p == partition)

    # ----------------------------------------------------------------- attributes

    def _attrs(self, node: Node, ino: int) -> pyfuse3.EntryAttributes:
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
            mtime = self._mtime_ns.get(stream, self.start_ns)
            size = self.wal.info(node.topic, node.partition).byte_size
            if node.kind == "topic":
                attrs.st_mode = stat.S_IFREG | self.file_mode
                # One stream, two names when partition 0 (MOUNT/t and MOUNT/partition=0/t).
                attrs.st_nlink = 2 if node.partition == 0 else 1
            else:
                # Reading a consumer file is the only way to use it; writing means nothing.
                attrs.st_mode = stat.S_IFREG | self.cfile_mode
                attrs.st_nlink = 1
                # Its size moves with appends through other inodes and with commits by
                # other handles: let the kernel ask every time (a cheap call).
                attrs.attr_timeout = 0
                size -= self._committed_byte(node)
            attrs.st_size = max(size, 0)
        attrs.st_blocks = (attrs.st_size + 511) // 512
        attrs.st_atime_ns = mtime
        attrs.st_mtime_ns = mtime
        attrs.st_ctime_ns = mtime
        return attrs

    def _entry(self, node: Node) -> pyfuse3.EntryAttributes:
        return self._attrs(node, self._ino(node))

    @staticmethod
    def _negative() -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = 0  # a negative entry the kernel caches for entry_timeout
        attrs.entry_timeout = NEGATIVE_TIMEOUT
        return attrs

    # ----------------------------------------------------------------- consumer positions

    def _committed(self, node: Node) -> int:
        committed = self.wal.committed(node.group, node.topic, node.partition)
        low = self.wal.info(node.topic, node.partition).low_watermark
        return max(committed or 0, low)

    def _committed_byte(self, node: Node) -> int:
        """Byte position in the topic's view where the group's next record starts."""
        offset = self._committed(node)
        if offset >= self.wal.info(node.topic, node.partition).high_watermark:
            return int(self.wal.info(node.topic, node.partition).byte_size)
        return int(self.wal.locate(node.topic, node.partition, offset=offset))

    def _records_within(self, h: Handle) -> int:
        """How many whole records lie in the first h.frontier bytes of a consumer view."""
        node = h.node
        end = int(self.wal.locate(node.topic, node.partition, byte=h.base_byte + h.frontier))
        return end - h.base_offset

    # ----------------------------------------------------------------- invalidation

    def _stream_changed(self, topic: str, partition: int, *, seen: bool = True) -> None:
        """Records growth of a stream. `seen`: the growth came through this mount, so the
        watcher must not count it again (a second mtime change would make the kernel drop
        the file's cached pages for nothing)."""
        stream = (topic, partition)
        self._mtime_ns[stream] = page_mtime_ns()  # steps: a new mtime drops cached pages
        if seen:
            self._seen_size.pop(stream, None)  # the watcher re-reads it quietly
        if stream not in self._streams:
            self._add_stream(stream)
        self._dirty_inodes.update(self._stream_inos(stream))
        self._wakeup.set()

    def _push(self, node: Node, nbytes: int, held: bool = False) -> None:
        """The stream of a topic node grew by nbytes: they go to the kernel's page cache
        of its file (walfs.page_push); `held`: once _release_held says so."""
        ino = self._inodes.get(node)
        if ino is not None:
            self.pages.grew(ino, node.topic, node.partition, nbytes, held=held)

    def _release_held(self, h: Handle) -> None:
        """The writer of h sent another request: the kernel is done with its previous
        WRITE (it drops the cached pages of a direct_io WRITE's range around it), so the
        bytes that WRITE appended may now be cached."""
        if h.held:
            ino = self._inodes.get(h.node)
            if ino is not None:
                self.pages.release(ino, h.held)
            h.held = 0

    def _stream_inos(self, stream: tuple[str, int]) -> tuple[int, ...]:
        """The inodes the kernel knows that show this stream: its topic file and its
        consumer files. Cached (every write asks), dropped when an inode or group is new."""
        inos = self._inos_of_stream.get(stream)
        if inos is None:
            topic, partition = stream
            nodes = [Node("topic", partition, topic)]
            nodes += [Node("cfile", partition, topic, group) for group in self._groups]
            inos = tuple(ino for ino in map(self._inodes.get, nodes) if ino is not None)
            self._inos_of_stream[stream] = inos
        return inos

    async def invalidation_task(self) -> None:
        """Tells the kernel about new sizes and names, outside any request handler."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._invalidate_sizes)
            nursery.start_soon(self._invalidate_names)

    async def _invalidate_sizes(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            inodes, self._dirty_inodes = self._dirty_inodes, set()
            for ino in inodes:
                try:
                    pyfuse3.invalidate_inode(ino, attr_only=True)
                except OSError as exc:
                    # ENOENT: the kernel has forgotten the inode; nothing to do.
                    if exc.errno != errno.ENOENT:
                        log.warning("invalidate_inode(%d): %s", ino, exc)
            await trio.sleep(INVALIDATE_COALESCE)

    async def _invalidate_names(self) -> None:
        # Not batched: a name created under one path (partition=0/t) must stop being a
        # cached negative entry under its other path (t) before the next command runs.
        # invalidate_entry_async queues to pyfuse3's own thread, which waits out any
        # request that holds the directory.
        while True:
            await self._entries_wakeup.wait()
            self._entries_wakeup = trio.Event()
            entries, self._dirty_entries = self._dirty_entries, set()
            for parent, name in entries:
                pyfuse3.invalidate_entry_async(parent, name, ignore_enoent=True)

    def poke_watcher(self, change: Change) -> None:
        """Any thread (the engine's watch callback): a stream grew, was trimmed, deleted or made
        (by the Kafka listener, say). The watcher looks at it now instead of at its next
        round."""
        if change.kind == "close" or getattr(self._own_append, "active", False):
            return
        stream = (change.topic, change.partition)
        first = not self._poked and not self._rewritten
        if change.kind in ("trim", "delete"):
            self._rewritten.add(stream)
        if change.kind != "delete":
            self._poked.add(stream)

        if first and self._trio_token is not None:
            self._trio_token.run_sync_soon(self._watch_poke.set)

    async def watch_task(self, interval: float = WATCH_INTERVAL) -> None:
        """Finds growth and topics that did not come through this mount's handlers."""
        self._trio_token = trio.lowlevel.current_trio_token()
        while True:
            with trio.move_on_after(interval) as timer:
                await self._watch_poke.wait()
            self._watch_poke = trio.Event()
            poked, self._poked = self._poked, set()
            rewritten, self._rewritten = self._rewritten, set()
            for stream in rewritten:
                await self._bytes_changed(stream)
            if not timer.cancelled_caught:
                # Poked: only the streams that grew outside the handlers (the mount's own
                # appends do not poke; the handlers report them).
                for stream in poked:
                    if stream not in self._streams:
                        self._add_stream(stream)
                    size = self.wal.info(*stream).byte_size
                    if self._seen_size.get(stream) != size:
                        if stream in self._seen_size:
                            self._stream_changed(*stream, seen=False)
                            self._push(Node("topic", stream[1], stream[0]), size - self._seen_size[stream])
                        self._seen_size[stream] = size
                continue
            try:
                self.refresh_streams()
                for stream in list(self._streams):
                    size = self.wal.info(*stream).byte_size
                    if self._seen_size.get(stream) != size:
                        if stream in self._seen_size:
                            self._stream_changed(*stream, seen=False)
                            self._push(Node("topic", stream[1], stream[0]), size - self._seen_size[stream])
                        self._seen_size[stream] = size
            except Exception:
                log.exception("watcher round failed")

    async def _bytes_changed(self, stream: tuple[str, int]) -> None:
        """Bytes the kernel may have cached changed meaning (a trim made the head ENODATA,
        a delete ended the file): exact mtime, and the kernel's pages of every file that
        shows the stream (its topic file and consumer files) go."""
        self._mtime_ns[stream] = time.time_ns()
        for ino in self._stream_inos(stream):
            await self.pages.drop(ino)

    # ----------------------------------------------------------------- appending

    async def _append(self, node: Node, lines: bytes | bytearray | memoryview) -> None:
        """Appends newline-terminated lines (each one record) as one batch."""
        # A plain try rather than wal_errors_as_errno: this runs for every write request.
        try:
            if self.blocking_appends:
                await trio.to_thread.run_sync(self._append_lines, node, lines)
            else:
                self._append_lines(node, lines)
        except Exception as exc:
            raise logged_fuse_error(f"append to {node.topic!r}/{node.partition}", exc) from exc
        self._stream_changed(node.topic, node.partition)

    def _read_cold(self, topic: str, part: int, pos: int, size: int) -> memoryview:
        """A read that may wait for the disk (in a worker thread), into its own buffer."""
        buf = bytearray(size)
        return memoryview(buf)[: self.wal.read_bytes(topic, part, pos, buf)]

    def _append_lines(self, node: Node, lines: bytes | bytearray | memoryview) -> None:
        # Flagged so that the append listener (poke_watcher) leaves this one alone: the
        # handler reports it itself, and a poke would cost a trio wakeup per write.
        self._own_append.active = True
        try:
            self.wal.append_lines(node.topic, node.partition, lines)
        finally:
            self._own_append.active = False

    async def _commit_partial(self, h: Handle) -> None:
        """At FLUSH, FSYNC, RELEASE (the writer is done with its WRITEs): the held partial
        line becomes a record, and what the handle appended may be cached."""
        self._release_held(h)
        if not h.partial:
            return
        # The record is the partial line as it stands; its newline is the view's own.
        h.partial += b"\n"
        try:
            await self._append(h.node, h.partial)
        except BaseException:
            del h.partial[-1:]
            raise
        self._push(h.node, len(h.partial))
        h.partial.clear()

    async def commit_all_partials(self) -> None:
        """At shutdown: partial lines whose write() returned must not be lost."""
        for h in list(self._handles.values()):
            if h.partial:
                try:
                    await self._commit_partial(h)
                except pyfuse3.FUSEError as exc:
                    log.error("could not commit a partial line of %r: %s", h.node.topic, exc)

    # ----------------------------------------------------------------- FUSE: names

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        node = self._child(parent, name)
        if node is None:
            return self._negative()
        return self._entry(node)

    def _child(self, parent: Node, name: bytes) -> Node | None:
        if name == b".":
            return parent
        if name == b"..":
            return self._parent_of(parent)
        if len(name) > MAX_NAME_BYTES:
            raise pyfuse3.FUSEError(errno.ENAMETOOLONG)
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            return None
        kind = parent.kind
        if kind == "root":
            if text == CONSUMERS_DIR:
                return CONSUMERS
            n = parse_partition_dir(text)
            if n is not None:
                return Node("pdir", n) if n in self._partitions() else None
            return Node("topic", 0, text) if self._is_topic(text, 0) else None
        if kind == "pdir":
            p = parent.partition
            return Node("topic", p, text) if self._is_topic(text, p) else None
        if kind == "consumers":
            # Groups are made with mkdir (or by a commit through the API or Kafka): a
            # lookup creates nothing, so a stray name costs nothing and stores nothing.
            if text not in self._groups and text not in self._known_groups():
                return None
            return Node("group", group=text)
        if kind == "group":
            n = parse_partition_dir(text)
            if n is not None:
                return Node("gpdir", n, group=parent.group) if n in self._partitions() else None
            if self._is_topic(text, 0):
                return Node("cfile", 0, text, parent.group)
            return None
        if kind == "gpdir":
            p = parent.partition
            return Node("cfile", p, text, parent.group) if self._is_topic(text, p) else None
        raise pyfuse3.FUSEError(errno.ENOTDIR)

    def _is_topic(self, text: str, partition: int) -> bool:
        if topic_name_error(text.encode()):
            return False
        return self._stream_exists(text, partition)

    @staticmethod
    def _parent_of(node: Node) -> Node:
        if node.kind in ("pdir", "consumers", "topic") and not (node.kind == "topic" and node.partition != 0):
            return ROOT
        if node.kind == "topic":
            return Node("pdir", node.partition)
        if node.kind == "group":
            return CONSUMERS
        if node.kind == "gpdir":
            return Node("group", group=node.group)
        if node.kind == "cfile":
            if node.partition == 0:
                return Node("group", group=node.group)
            return Node("gpdir", node.partition, group=node.group)
        return ROOT

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        # Inode numbers stay assigned for the mount's life: the tree only grows and a
        # stable number is what lets both names of a partition-0 topic share one inode.
        return None

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        with wal_errors_as_errno("getattr"):
            return self._attrs(node, inode)

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        if fields.update_size or fields.update_mode or fields.update_uid or fields.update_gid:
            # truncate, chmod, chown: what an append-only inode refuses.
            raise pyfuse3.FUSEError(errno.EPERM)
        # Times (touch): accepted and forgotten, so that tools which touch their output work.
        return self._attrs(node, inode)

    def _known_groups(self) -> set[str]:
        """Groups stored in the data directory (made, or deleted by Kafka's DeleteGroups,
        by another face since the last look)."""
        groups = set(self.wal.groups())
        if groups != self._groups:
            self._groups.intersection_update(groups)
            self._groups.update(groups)
            self._inos_of_stream.clear()
        return groups

    def may_write_dir(self, ctx: pyfuse3.RequestContext) -> bool:
        """Whether the caller has write permission on a directory of the tree (all of them
        share uid, gid and mode): the right to create groups and move their cursors."""
        if ctx.uid == 0:
            return True
        if ctx.uid == self.uid:
            return bool(self.dir_mode & 0o200)
        if self.gid == ctx.gid or self.gid in caller_groups(ctx.pid):
            return bool(self.dir_mode & 0o020)
        return bool(self.dir_mode & 0o002)

    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        if len(name) > MAX_NAME_BYTES:
            raise pyfuse3.FUSEError(errno.ENAMETOOLONG)
        if parent.kind == "consumers":
            return await self._make_group(name, ctx)
        n = parse_partition_dir(name.decode("utf-8", "replace"))
        if parent.kind != "root" or n is None:
            raise pyfuse3.FUSEError(errno.EPERM)
        if n in self._partitions():
            raise pyfuse3.FUSEError(errno.EEXIST)
        self._made_partitions.add(n)
        return self._entry(Node("pdir", n))

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        """`rm TOPIC` deletes the topic's stream (that partition) when the mount allows it
        (--allow-delete); EPERM otherwise. The kernel has checked write permission on the
        directory. Open readers of the file then see its end (reads return nothing)."""
        parent = self._node(parent_inode)
        if not self.allow_delete or parent.kind not in ("root", "pdir"):
            raise pyfuse3.FUSEError(errno.EPERM)
        text = name.decode("utf-8", "replace")
        partition = parent.partition
        if not self._is_topic(text, partition):
            raise pyfuse3.FUSEError(errno.ENOENT)
        with wal_errors_as_errno(f"delete {text!r}"):
            await trio.to_thread.run_sync(self.wal.delete, text, partition)
        self._streams.discard((text, partition))
        self._inos_of_stream.pop((text, partition), None)
        await self._bytes_changed((text, partition))
        parents = [Node("pdir", partition)] + ([ROOT] if partition == 0 else [])
        for p in parents:
            ino = self._inodes.get(p)
            if ino is not None:
                self._dirty_entries.add((ino, name))
        self._entries_wakeup.set()

    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        raise pyfuse3.FUSEError(errno.EPERM)

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
        node = self._node(inode)
        if node.kind not in DIR_KINDS:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return self._new_handle(Handle(node))

    def _listing(self, node: Node) -> list[tuple[bytes, Node]]:
        out: list[tuple[bytes, Node]] = []
        parts = sorted(self._partitions())
        if node.kind == "root":
            out.append((CONSUMERS_DIR.encode(), CONSUMERS))
            out += [(f"{PARTITION_PREFIX}{p}".encode(), Node("pdir", p)) for p in parts]
            out += [(t.encode(), Node("topic", 0, t)) for t in self._topics_in(0)]
        elif node.kind == "pdir":
            p = node.partition
            out += [(t.encode(), Node("topic", p, t)) for t in self._topics_in(p)]
        elif node.kind == "consumers":
            out += [(g.encode(), Node("group", group=g)) for g in sorted(self._known_groups())]
        elif node.kind == "group":
            g = node.group
            out += [(f"{PARTITION_PREFIX}{p}".encode(), Node("gpdir", p, group=g)) for p in parts]
            out += [(t.encode(), Node("cfile", 0, t, g)) for t in self._topics_in(0)]
        elif node.kind == "gpdir":
            p, g = node.partition, node.group
            out += [(t.encode(), Node("cfile", p, t, g)) for t in self._topics_in(p)]
        return out

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        h = self._handle(fh)
        with wal_errors_as_errno("readdir"):
            if start_id == 0:
                self.refresh_streams()
            # A fresh listing per call is fine: names only ever get added, in sorted
            # groups, so positions from an earlier call stay valid except for additions.
            entries = self._listing(h.node)
            for i in range(start_id, len(entries)):
                name, node = entries[i]
                if not pyfuse3.readdir_reply(token, name, self._entry(node), i + 1):
                    return

    async def releasedir(self, fh: int) -> None:
        self._handles.pop(fh, None)

    # ----------------------------------------------------------------- FUSE: files

    def _new_handle(self, h: Handle) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = h
        return fh

    def _handle(self, fh: int) -> Handle:
        try:
            return self._handles[fh]
        except KeyError:
            raise pyfuse3.FUSEError(errno.EBADF) from None

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        node = self._node(inode)
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
        h = Handle(node, writable=writable, append=writable)
        # Writers bypass the page cache: the kernel would cache their bytes at the offset
        # it believes is the end, which is wrong when others append or a line is partial.
        # Readers keep the cache: bytes before the size never change, and a new size
        # drops the cached pages anyway.
        return pyfuse3.FileInfo(fh=self._new_handle(h), direct_io=writable, keep_cache=True)

    async def _make_group(self, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        err = topic_name_error(name)
        if err:
            raise pyfuse3.FUSEError(err)
        group = name.decode("utf-8")
        if group in self._known_groups():
            raise pyfuse3.FUSEError(errno.EEXIST)
        if not self.may_write_dir(ctx):
            raise pyfuse3.FUSEError(errno.EACCES)
        with wal_errors_as_errno(f"create group {group!r}"):
            await trio.to_thread.run_sync(self.wal.create_group, group)
        self._groups.add(group)
        self._inos_of_stream.clear()
        return self._entry(Node("group", group=group))

    async def _open_consumer(self, node: Node, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        with wal_errors_as_errno("open consumer file"):
            base_offset = self._committed(node)
            base_byte = int(self.wal.locate(node.topic, node.partition, offset=base_offset))
        h = Handle(node, base_offset=base_offset, base_byte=base_byte, may_commit=self.may_write_dir(ctx))
        # direct_io: the view's start moves with each commit, so cached pages of another
        # open would be stale.
        return pyfuse3.FileInfo(fh=self._new_handle(h), direct_io=True, keep_cache=False)

    async def create(
        self,
        parent_inode: int,
        name: bytes,
        mode: int,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent = self._node(parent_inode)
        if parent.kind not in ("root", "pdir"):
            raise pyfuse3.FUSEError(errno.EACCES if parent.kind == "gpdir" else errno.EPERM)
        err = topic_name_error(name)
        if err:
            raise pyfuse3.FUSEError(err)
        topic = name.decode("utf-8")
        partition = parent.partition
        node = Node("topic", partition, topic)
        if self._stream_exists(topic, partition):
            # A stale negative entry in the kernel: the topic exists after all.
            if flags & os.O_EXCL:
                raise pyfuse3.FUSEError(errno.EEXIST)
            info = await self.open(self._ino(node), flags, ctx)
            return info, self._entry(node)
        writable = (flags & os.O_ACCMODE) != os.O_RDONLY
        # A new topic may be filled by `>` or cp (no O_APPEND, maybe O_TRUNC): their
        # writes are accepted as long as they run sequentially from 0.
        h = Handle(node, writable=writable, append=bool(flags & os.O_APPEND))
        # The empty stream is made durable now, so that `touch t` leaves a topic behind.
        self._creating.add((topic, partition))
        try:
            with wal_errors_as_errno(f"create {topic!r}"):
                await trio.to_thread.run_sync(self.wal.create, topic, partition)
        finally:
            self._creating.discard((topic, partition))
        self._add_stream((topic, partition), made_in=parent_inode)
        fh = self._new_handle(h)
        return pyfuse3.FileInfo(fh=fh, direct_io=writable, keep_cache=True), self._entry(node)

    async def read(self, fh: int, off: int, size: int) -> bytes | memoryview:  # type: ignore[override]
        # Records in the page cache are copied inline: 128 KiB take ~0.1 ms and a thread
        # hop costs as much again on a busy 2-core machine. They go into one buffer the
        # mount reuses (pyfuse3 takes any buffer, its stub says bytes): pyfuse3 sends the
        # reply before this task yields (nothing on that path awaits), so no other READ can
        # overwrite them first. Records on disk only (old data, a consumer's backlog) are
        # copied in a thread, so that the disk's wait does not stall every other request.
        h = self._handle(fh)
        node = h.node
        topic, part = node.topic, node.partition
        pos = h.base_byte + off if node.kind == "cfile" else off
        data: bytes | memoryview
        try:  # a plain try: this runs for every READ request
            if self.wal.resident(topic, part, pos, size):
                if len(self._read_buf) < size:
                    self._read_buf = bytearray(size)
                out = memoryview(self._read_buf)[:size]
                data = out[: self.wal.read_bytes(topic, part, pos, out)]
            else:
                self.cold_reads += 1
                data = await trio.to_thread.run_sync(self._read_cold, topic, part, pos, size)
        except Exception as exc:
            raise logged_fuse_error(f"read {node.topic!r}", exc) from exc
        if node.kind == "cfile" and off <= h.frontier:
            h.frontier = max(h.frontier, off + len(data))
        return data

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self._handle(fh)
        if not h.writable:
            raise pyfuse3.FUSEError(errno.EBADF)
        if not h.append:
            if off != h.next_pos:
                raise pyfuse3.FUSEError(errno.EPERM)  # writing at an offset
        if h.refused_line:
            raise pyfuse3.FUSEError(errno.EFBIG)
        self._release_held(h)
        newline = buf.find(b"\n")
        # Only the line that continues the held partial one can pass the limit: any other
        # line lies within this request, and a request is at most MIN_MAX_LINE_BYTES.
        if len(h.partial) + (len(buf) if newline < 0 else newline) > self.max_line_bytes:
            log.warning(
                "a line of %r passed %d bytes: refused (EFBIG), %d held bytes dropped",
                h.node.topic, self.max_line_bytes, len(h.partial),
            )
            h.partial = bytearray()
            h.scratch = None
            h.refused_line = True
            raise pyfuse3.FUSEError(errno.EFBIG)
        if newline < 0:
            # No line ends here: keep it with the handle (a long line spans requests).
            h.partial += buf
            h.next_pos += len(buf)
            return len(buf)
        # The complete lines go in as one batch (split in C, Wal.append_lines): no other
        # writer's line can land between them, and a crash keeps all or none. What follows
        # the last newline is the next partial line.
        end = buf.rfind(b"\n") + 1
        if h.partial:
            held = len(h.partial)
            need = held + end
            if h.scratch is None or len(h.scratch) < need:
                h.scratch = bytearray(max(need, 2 * len(h.scratch or b"")))
            with memoryview(h.scratch) as joined:
                joined[:held] = h.partial
                joined[held:need] = memoryview(buf)[:end]
                await self._append(h.node, joined[:need])
            self._push(h.node, need, held=True)
            h.held = need
        else:
            await self._append(h.node, buf if end == len(buf) else memoryview(buf)[:end])
            self._push(h.node, end, held=True)
            h.held = end
        if end == len(buf):
            h.partial.clear()
        else:
            h.partial = bytearray(memoryview(buf)[end:])
        h.next_pos += len(buf)
        return len(buf)

    async def flush(self, fh: int) -> None:
        # FLUSH is what close() waits for; RELEASE comes later, asynchronously. Commit
        # here so that the next open (by the same shell script, say) sees the result.
        h = self._handle(fh)
        if h.writable:
            await self._commit_partial(h)
        elif h.node.kind == "cfile" and h.may_commit and h.frontier > h.committed_frontier:
            await self._commit_consumer(h)

    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._handle(fh)
        if h.writable:
            await self._commit_partial(h)
        # Always sync, also for read-only handles: fsync(fd) is how a reader asks that
        # what it saw is durable.
        with wal_errors_as_errno("fsync"):
            await trio.to_thread.run_sync(self.wal.sync)

    async def release(self, fh: int) -> None:
        h = self._handles.get(fh)
        if h is None:
            return
        try:
            if h.writable:
                await self._commit_partial(h)
            elif h.node.kind == "cfile" and h.may_commit and h.frontier > h.committed_frontier:
                await self._commit_consumer(h)
        finally:
            self._handles.pop(fh, None)

    async def _commit_consumer(self, h: Handle) -> None:
        node = h.node

        def commit() -> int:
            n = self._records_within(h)
            if n > 0:
                new = h.base_offset + n
                # Two handles of one group: never move the committed offset backwards
                # (advance_only checks and writes in one step under the cursor store's lock).
                self.wal.commit(node.group, node.topic, node.partition, new, advance_only=True)
            return n

        frontier = h.frontier
        with wal_errors_as_errno("commit consumer offset"):
            n = await trio.to_thread.run_sync(commit)
        h.committed_frontier = frontier
        if n:
            ino = self._inodes.get(node)
            if ino is not None:
                self._dirty_inodes.add(ino)
                self._wakeup.set()

    # ----------------------------------------------------------------- FUSE: the rest

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        out = pyfuse3.StatvfsData()
        out.f_namemax = MAX_NAME_BYTES
        if not is_local(self.data_dir):
            # A cluster engine has no local file system to report: sizes show as 0 blocks
            # (df shows the mount; Kafka's own tools show the cluster's disks).
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

    def _metrics_text(self) -> str:
        assert self.metrics_text is not None
        return self.metrics_text().decode()

    def _xattrs(self, node: Node) -> dict[str, Callable[[], str]]:
        if node.kind == "root":
            return {
                "pid": lambda: str(os.getpid()),
                "cold_reads": lambda: str(self.cold_reads),
                "pushed_bytes": lambda: str(self.pages.pushed_bytes),
                "push_skipped_bytes": lambda: str(self.pages.skipped_bytes),
                **({"metrics": self._metrics_text} if self.metrics_text is not None else {}),
                "data_dir": lambda: self.data_dir,
                **{k: _constant(v) for k, v in self.info.items()},
            }
        if node.kind not in ("topic", "cfile"):
            return {}
        t, p = node.topic, node.partition

        def info(name: str) -> Callable[[], str]:
            def get() -> str:
                return str(getattr(self.wal.info(t, p), name))

            return get

        out: dict[str, Callable[[], str]] = {
            "org_id": info("org_id"),
            "topic": lambda: t,
            "topic_hash": info("topic_hash"),
            "partition": lambda: str(p),
            "low_watermark": lambda: str(self.wal.info(t, p).low_watermark),
            "high_watermark": lambda: str(self.wal.info(t, p).high_watermark),
            "durable_watermark": lambda: str(self.wal.info(t, p).durable_watermark),
            "retention_ms": lambda: show_limit(self.wal.retention(t).ms),
            "retention_bytes": lambda: show_limit(self.wal.retention(t).bytes),
            "byte_size": lambda: str(self.wal.info(t, p).byte_size),
        }
        if node.kind == "cfile":
            out["group"] = lambda: node.group
            out["committed_offset"] = lambda: str(self._committed(node))
        return out

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        node = self._node(inode)
        text = name.decode("utf-8", "replace")
        if not text.startswith(XATTR_PREFIX):
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        getter = self._xattrs(node).get(text[len(XATTR_PREFIX) :])
        if getter is None:
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        with wal_errors_as_errno("getxattr"):
            return getter().encode()

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        node = self._node(inode)
        return [(XATTR_PREFIX + k).encode() for k in self._xattrs(node)]

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext) -> None:
        """user.walfs.low_watermark trims a topic (its partition); user.walfs.retention_ms
        and user.walfs.retention_bytes set its retention (-1: no limit; "default": the
        WAL's). The kernel has checked write permission on the file (default_permissions).
        Anything else: ENOTSUP, not EPERM, so that `cp -a` and friends skip xattrs."""
        node = self._node(inode)
        key = name.decode("utf-8", "replace").removeprefix(XATTR_PREFIX)
        if node.kind != "topic" or key not in ("low_watermark", "retention_ms", "retention_bytes"):
            raise pyfuse3.FUSEError(errno.ENOTSUP)
        t, p = node.topic, node.partition
        try:
            text = value.decode("ascii").strip()
            if key == "low_watermark":
                if not text.isdigit():
                    raise ValueError(text)
                offset = int(text)
                if offset > self.wal.info(t, p).high_watermark:
                    raise ValueError(f"{offset} is past the end")

                def change() -> None:
                    self.wal.trim(t, p, offset)
            else:
                setting: int | str | None = "default" if text == "default" else parse_limit(text)

                def change() -> None:
                    self.wal.set_retention(t, **{key: setting})
        except (UnicodeDecodeError, ValueError) as exc:
            log.info("setxattr %s on %r refused: %s", key, t, exc)
            raise pyfuse3.FUSEError(errno.EINVAL) from None
        with wal_errors_as_errno(f"setxattr {key}"):
            await trio.to_thread.run_sync(change)
        if key == "low_watermark":
            # Before the reply: the next read of the trimmed head must not hit cached pages.
            await self._bytes_changed((t, p))

        self._dirty_inodes.add(inode)
        self._wakeup.set()

    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        raise pyfuse3.FUSEError(errno.ENOTSUP)


def _constant(value: str) -> Callable[[], str]:
    return lambda: value


# Every FUSE request handler. pyfuse3 answers FUSEError with its errno, but any other
# exception escapes its worker task, ends pyfuse3.main() and takes the whole mount down
# with the request unanswered. A bug or an unexpected WAL error must cost one request
# (EIO, logged with its traceback), never the mount.
_HANDLERS = (
    "lookup", "getattr", "setattr", "mkdir", "unlink", "rmdir", "rename", "link", "symlink",
    "mknod", "opendir", "readdir", "releasedir", "open", "create", "read", "write", "flush",
    "fsync", "release", "statfs", "getxattr", "listxattr", "setxattr", "removexattr",
)  # fmt: skip


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def guarded(self: WalOperations, *args: Any) -> Any:
        try:
            return await fn(self, *args)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:
            log.exception("%s%r failed", fn.__name__, args[:2])
            raise fuse_error_for(exc) from exc

    return guarded


for _name in _HANDLERS:
    setattr(WalOperations, _name, _guard(getattr(WalOperations, _name)))
