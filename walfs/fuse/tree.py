"""What the tree shows: nodes, their inode numbers, names and listings.

    MOUNT/<topic>                                  partition 0 of <topic>
    MOUNT/partition=<n>/<topic>                    partition n (partition=0 is partition 0 again)
    MOUNT/.consumers/<group>/<topic>               <topic> after <group>'s committed offset
    MOUNT/.consumers/<group>/partition=<n>/<topic>
    MOUNT/.consumers/<group>/.peek/...             the same views, which never commit

The streams and groups here are a cache of the engine's lists: names only ever get
added (a delete, when allowed, takes one out), and a name the kernel may hold as a
negative entry is invalidated when its stream appears (walfs.fuse.invalidation).

Generations (docs/mount.md "Trimming and retention"): a topic file's position 0 is the
byte of the low watermark when its inode was made (its `base`), so that every tool reads
a trimmed topic from its first kept record. A trim makes the next lookup of the name give
a new inode (a new generation, as logrotate gives a new file); open files keep their
inode and its base, so `tail -f` goes on at its own positions. An old generation lives
until the kernel forgets it (its lookup count, kept here, reaches 0); a deleted stream's
old generations are `ended` (empty).
"""

from __future__ import annotations

import errno

import pyfuse3

from walfs.engine.contract import LogEngine
from walfs.engine.names import CONSUMERS_DIR, MAX_NAME_BYTES, PARTITION_PREFIX
from walfs.engine.types import StreamInfo
from walfs.fuse.errnos import topic_name_error
from walfs.fuse.invalidation import Invalidator
from walfs.fuse.nodes import (
    CONSUMERS,
    PEEK_DIR,
    ROOT,
    Node,
    Stream,
    StreamSet,
    parent_of,
    parse_partition_dir,
)
from walfs.fuse.page_push import mtime_ns as page_mtime_ns


class Tree:
    """Nodes and inode numbers (stable for the mount's life, except a topic's, which is
    new after each trim: see Generations above; numbers are never reused, and both names
    of a partition-0 topic share one inode), the streams and groups the mount knows, and
    each stream's mtime."""

    def __init__(self, engine: LogEngine, invalidator: Invalidator) -> None:
        self.engine = engine
        self.invalidator = invalidator
        self._inodes: dict[Node, int] = {ROOT: pyfuse3.ROOT_INODE}
        self._nodes: dict[int, Node] = {pyfuse3.ROOT_INODE: ROOT}
        self._next_ino = pyfuse3.ROOT_INODE + 1
        # Streams (topic, partition) known to exist (a cache of the engine's list).
        self.streams = StreamSet()
        self.made_partitions: set[int] = set()  # mkdir partition=<n> without streams yet
        self.groups: set[str] = set()
        self._inos_of_stream: dict[Stream, tuple[int, ...]] = {}  # see stream_inos
        self.mtime_ns: dict[Stream, int] = {}
        self.creating: set[Stream] = set()  # CREATE handlers under way
        # Topic inodes: the byte position of the file's position 0 (see Generations).
        self.base: dict[int, int] = {}
        self.ended: set[int] = set()  # old generations of deleted streams: empty files
        self._old_gens: dict[Stream, list[int]] = {}  # generations before the current one
        self._lookups: dict[int, int] = {}  # the kernel's lookup count of each inode

    # ----------------------------------------------------------------- inodes

    def ino(self, node: Node, info: StreamInfo | None = None) -> int:
        """The node's inode, made if it has none; `info`: the stream's marks if the caller
        has them (a new topic inode's base is its low watermark's byte)."""
        ino = self._inodes.get(node)
        if ino is None:
            ino = self._next_ino
            self._next_ino += 1
            self._inodes[node] = ino
            self._nodes[ino] = node
            if node.kind == "topic":
                if info is None:
                    info = self.engine.info(node.topic, node.partition)
                self.base[ino] = info.low_byte
            self._inos_of_stream.clear()
        return ino

    def looked_up(self, ino: int) -> None:
        """The kernel was given an entry of `ino` (lookup, create, readdir): one more
        reference it will forget."""
        self._lookups[ino] = self._lookups.get(ino, 0) + 1

    def forget(self, ino: int, n: int) -> None:
        """The kernel dropped n references; an old generation it no longer knows goes."""
        left = self._lookups.get(ino, 0) - n
        if left > 0:
            self._lookups[ino] = left
            return
        self._lookups.pop(ino, None)
        node = self._nodes.get(ino)
        if node is not None and node.kind == "topic" and self._inodes.get(node) != ino:
            self._free(ino, node)

    def _free(self, ino: int, node: Node) -> None:
        del self._nodes[ino]
        self.base.pop(ino, None)
        self.ended.discard(ino)
        stream = (node.topic, node.partition)
        old = self._old_gens.get(stream)
        if old is not None and ino in old:
            old.remove(ino)
            if not old:
                del self._old_gens[stream]
        self._inos_of_stream.pop(stream, None)

    def base_of(self, ino: int) -> int | None:
        """Where the file of topic inode `ino` starts in its stream's byte view; None for
        an ended generation (walfs.fuse.page_push sends it nothing)."""
        if ino in self.ended:
            return None
        return self.base.get(ino, 0)

    def current_base(self, stream: Stream) -> int | None:
        """The base of the stream's current generation, None if the kernel has none."""
        ino = self._inodes.get(Node("topic", stream[1], stream[0]))
        return None if ino is None else self.base[ino]

    def new_generation(self, stream: Stream, *, deleted: bool = False) -> list[int]:
        """After a trim (or a delete: `deleted`) of `stream`: the next lookup of its name
        gets a new inode based at the low watermark then. Returns the stream's old
        generations the kernel may still hold (empty when nothing changed: the low
        watermark's byte is the current generation's base, or the kernel has none)."""
        topic, partition = stream
        node = Node("topic", partition, topic)
        ino = self._inodes.get(node)
        if ino is None:
            return []  # the kernel has no inode: the next one gets the right base
        if not deleted:
            low = self.engine.info(topic, partition).low_byte
            if low == self.base[ino]:
                return []
            deleted = low < self.base[ino]  # the stream was deleted and made again
        del self._inodes[node]
        self._inos_of_stream.pop(stream, None)
        old = self._old_gens.setdefault(stream, [])
        old.append(ino)
        if deleted:
            self.ended.update(old)
        if not self._lookups.get(ino):  # the kernel had forgotten it already
            self._free(ino, node)
        return list(self._old_gens.get(stream, ()))

    def known_ino(self, node: Node) -> int | None:
        """The node's inode if the kernel may know it (one was handed out), else None."""
        return self._inodes.get(node)

    def node(self, ino: int) -> Node:
        try:
            return self._nodes[ino]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def stream_inos(self, stream: Stream) -> tuple[int, ...]:
        """The inodes the kernel knows that show this stream: its topic file (every
        generation) and its consumer files. Cached (every write asks), dropped when an
        inode, a generation or a group is new."""
        inos = self._inos_of_stream.get(stream)
        if inos is None:
            topic, partition = stream
            nodes = [Node("topic", partition, topic)]
            nodes += [Node("cfile", partition, topic, g, peek) for g in self.groups for peek in (False, True)]
            inos = tuple(ino for ino in map(self._inodes.get, nodes) if ino is not None)
            inos += tuple(self._old_gens.get(stream, ()))
            self._inos_of_stream[stream] = inos
        return inos

    # ----------------------------------------------------------------- streams and groups

    def load_streams(self) -> None:
        """The streams and groups the engine has when the mount starts: the kernel holds no
        entry yet, so nothing is invalidated and no mtime is noted (Attributes shows the
        mount's start for a stream without one): a mount of 100,000 topics starts without
        100,000 invalidations and entries."""
        self.streams.update(self.engine.streams())
        self.groups.update(self.engine.groups())

    def refresh_streams(self) -> list[Stream]:
        """Re-reads the engine's stream list (one pass); returns the streams new to the mount."""
        new = [st for st in self.engine.streams() if st not in self.streams]
        for st in new:
            self.add_stream(st)
        groups = self.engine.groups()
        if not self.groups.issuperset(groups):
            self.groups.update(groups)
            self._inos_of_stream.clear()
        return new

    def add_stream(self, stream: Stream, made_in: int = 0) -> None:
        """A stream new to the mount. `made_in`: the directory inode whose CREATE made it
        (the kernel holds a fresh entry there: dropping it would drop the inode and its
        cached pages with it)."""
        if not made_in and stream in self.creating:
            return  # the watcher saw a CREATE of this mount: the handler adds it itself
        self.streams.add(stream)
        self.mtime_ns.setdefault(stream, page_mtime_ns())
        topic, partition = stream
        # The kernel may hold negative entries for this name under every alias.
        name = topic.encode()
        parents = [Node("pdir", partition)]
        if partition == 0:
            parents.append(ROOT)
        for group in self.groups:
            for peek in (False, True):
                parents.append(Node("gpdir", partition, group=group, peek=peek))
                if partition == 0:
                    parents.append(Node("group", group=group, peek=peek))
        inos = [ino for ino in map(self._inodes.get, parents) if ino is not None and ino != made_in]
        entries = [(ino, name) for ino in inos]
        # The watcher may have seen the creation first (the engine's watch call).
        self.invalidator.names(entries, keep=(made_in, name))
        self.invalidator.names([(pyfuse3.ROOT_INODE, f"{PARTITION_PREFIX}{partition}".encode())])

    def entry_parents(self, stream: Stream) -> list[int]:
        """The directory inodes the kernel knows where the stream's topic file has a name."""
        partition = stream[1]
        parents = [Node("pdir", partition)] + ([ROOT] if partition == 0 else [])
        return [ino for ino in map(self._inodes.get, parents) if ino is not None]

    def drop_stream(self, stream: Stream) -> None:
        """A stream deleted through this mount: its name goes from every directory."""
        self.streams.discard(stream)
        self._inos_of_stream.pop(stream, None)
        name = stream[0].encode()
        self.invalidator.names([(ino, name) for ino in self.entry_parents(stream)])

    def stream_exists(self, topic: str, partition: int) -> bool:
        if (topic, partition) in self.streams:
            return True
        # Streams that did not come through this mount (e.g. an in-process Kafka
        # listener) are found here before the watcher's next round.
        if (topic, partition) in self.engine.streams(topic):
            self.add_stream((topic, partition))
            return True
        return False

    def is_topic(self, text: str, partition: int) -> bool:
        if topic_name_error(text.encode()):
            return False
        return self.stream_exists(text, partition)

    def partitions(self) -> set[int]:
        # partition=0 always exists: it is the root's own topics under their other name.
        return {0} | self.streams.partitions() | self.made_partitions

    def topics_in(self, partition: int) -> list[str]:
        return self.streams.names(partition)

    def known_groups(self) -> set[str]:
        """Groups stored in the data directory (made, or deleted by Kafka's DeleteGroups,
        by another face since the last look)."""
        groups = set(self.engine.groups())
        if groups != self.groups:
            self.groups.intersection_update(groups)
            self.groups.update(groups)
            self._inos_of_stream.clear()
        return groups

    def add_group(self, group: str) -> None:
        self.groups.add(group)
        self._inos_of_stream.clear()

    def drop_group(self, group: str) -> None:
        """A group deleted through this mount (rmdir)."""
        self.groups.discard(group)
        self._inos_of_stream.clear()

    # ----------------------------------------------------------------- names

    def child(self, parent: Node, name: bytes) -> Node | None:
        """The node `name` stands for in `parent`, or None (a negative entry)."""
        if name == b".":
            return parent
        if name == b"..":
            return parent_of(parent)
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
                return Node("pdir", n) if n in self.partitions() else None
            return Node("topic", 0, text) if self.is_topic(text, 0) else None
        if kind == "pdir":
            p = parent.partition
            return Node("topic", p, text) if self.is_topic(text, p) else None
        if kind == "consumers":
            # Groups are made with mkdir (or by a commit through the API or Kafka): a
            # lookup creates nothing, so a stray name costs nothing and stores nothing.
            if text not in self.groups and text not in self.known_groups():
                return None
            return Node("group", group=text)
        if kind == "group":
            g, peek = parent.group, parent.peek
            if text == PEEK_DIR and not peek:
                return Node("group", group=g, peek=True)
            n = parse_partition_dir(text)
            if n is not None:
                return Node("gpdir", n, group=g, peek=peek) if n in self.partitions() else None
            if self.is_topic(text, 0):
                return Node("cfile", 0, text, g, peek)
            return None
        if kind == "gpdir":
            p = parent.partition
            return Node("cfile", p, text, parent.group, parent.peek) if self.is_topic(text, p) else None
        raise pyfuse3.FUSEError(errno.ENOTDIR)

    def listing(self, node: Node) -> list[tuple[bytes, Node]]:
        out: list[tuple[bytes, Node]] = []
        parts = sorted(self.partitions())
        if node.kind == "root":
            out.append((CONSUMERS_DIR.encode(), CONSUMERS))
            out += [(f"{PARTITION_PREFIX}{p}".encode(), Node("pdir", p)) for p in parts]
            out += [(t.encode(), Node("topic", 0, t)) for t in self.topics_in(0)]
        elif node.kind == "pdir":
            p = node.partition
            out += [(t.encode(), Node("topic", p, t)) for t in self.topics_in(p)]
        elif node.kind == "consumers":
            out += [(g.encode(), Node("group", group=g)) for g in sorted(self.known_groups())]
        elif node.kind == "group":
            g, peek = node.group, node.peek
            if not peek:
                out.append((PEEK_DIR.encode(), Node("group", group=g, peek=True)))
            out += [(f"{PARTITION_PREFIX}{p}".encode(), Node("gpdir", p, group=g, peek=peek)) for p in parts]
            # A partition-0 topic named .peek shows as partition=0/.peek only.
            topics = [t for t in self.topics_in(0) if peek or t != PEEK_DIR]
            out += [(t.encode(), Node("cfile", 0, t, g, peek)) for t in topics]
        elif node.kind == "gpdir":
            p, g = node.partition, node.group
            out += [(t.encode(), Node("cfile", p, t, g, node.peek)) for t in self.topics_in(p)]
        return out
