"""The watcher that finds growth, trims, deletes and topics that did not come through this
mount's handlers, and tells the kernel (through walfs.fuse.invalidation's Invalidator) and
its page cache (walfs.fuse.page_push)."""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Iterator
from itertools import islice

import pyfuse3
import trio

from walfs.engine.contract import LogEngine
from walfs.engine.types import Change
from walfs.fuse.invalidation import Invalidator
from walfs.fuse.nodes import Node, Stream
from walfs.fuse.page_push import PagePusher
from walfs.fuse.page_push import mtime_ns as page_mtime_ns
from walfs.fuse.tree import Tree

log = logging.getLogger("walfs.fuse")

# How often the watcher looks for growth and topics that did not come through this mount.
WATCH_INTERVAL = 1.0
# How many streams one round looks at: a mount of 100,000 topics is looked at in slices,
# one per round (the engine's list is read again once every stream had its look), so that
# a round costs the same whatever the count. The local engine tells of every change as it
# happens (poke): the rounds are for engines that do not (other writers of a cluster).
LOOK_PER_ROUND = 2000


def _forget_names(parents: list[int], name: bytes) -> None:
    """Drops the kernel's entries of `name` (a worker thread: the call waits for requests
    under way in those directories, which the event loop answers)."""
    for parent in parents:
        try:
            pyfuse3.invalidate_entry(parent, name)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # ENOENT: the kernel holds no such entry
                log.warning("invalidate_entry(%d, %r): %s", parent, name, exc)


class Watcher:
    """Growth of streams, from this mount's handlers (`grew`) or from anywhere else (the
    engine's watch callback `poke`, and a round every WATCH_INTERVAL): new mtimes and
    sizes for the kernel, and the new bytes for its page cache (walfs.fuse.page_push)."""

    def __init__(self, engine: LogEngine, tree: Tree, invalidator: Invalidator, pages: PagePusher) -> None:
        self.engine = engine
        self.tree = tree
        self.invalidator = invalidator
        self.pages = pages
        # The byte size each stream had when last looked at, by partition then topic (the
        # topic's name is the engine's own string: no tuple a stream, 100,000 topics).
        self._seen_size: dict[int, dict[str, int]] = {}
        # The streams the next rounds look at (LOOK_PER_ROUND each); None: a new pass
        self._to_look: Iterator[Stream] | None = None
        self._poked: set[Stream] = set()  # streams grown outside the handlers
        self._rewritten: dict[Stream, bool] = {}  # trimmed or deleted (True), by anyone
        self._generations = trio.Lock()  # bytes_changed
        self._watch_poke = trio.Event()
        self._trio_token: trio.lowlevel.TrioToken | None = None
        # .active while a handler appends: the engine's callback leaves that one alone
        # (the handler reports it itself, and a poke would cost a trio wakeup per write).
        self.own_append = threading.local()

    def stream_changed(self, topic: str, partition: int, *, seen: bool = True) -> None:
        """Records growth of a stream. `seen`: the growth came through this mount, so the
        watcher must not count it again (a second mtime change would make the kernel drop
        the file's cached pages for nothing)."""
        stream = (topic, partition)
        self.tree.mtime_ns[stream] = page_mtime_ns()  # steps: a new mtime drops cached pages
        if seen:
            self._seen_size.get(partition, {}).pop(topic, None)  # the watcher re-reads it quietly
        if stream not in self.tree.streams:
            self.tree.add_stream(stream)
        self.invalidator.sizes(self.tree.stream_inos(stream))

    def push(self, node: Node, nbytes: int) -> None:
        """The stream of a topic node grew by nbytes: they go to the kernel's page cache
        of its file (walfs.fuse.page_push)."""
        ino = self.tree.known_ino(node)
        if ino is not None:
            self.pages.grew(ino, node.topic, node.partition, nbytes)

    async def bytes_changed(self, stream: Stream, *, deleted: bool = False) -> None:
        """A trim or a delete (`deleted`) of the stream, by anyone: the file's name leads
        to a new generation (walfs.fuse.tree), based at the new low watermark. The old
        generations keep their positions (open files go on where they were), but what they
        cached of the trimmed head must go: exact mtime, and the kernel's pages of every
        old generation and consumer file are dropped. After a trim this returns once the
        kernel's names lead to the new generation (a `setfattr` trim answers after it)."""
        if deleted:
            # Without waiting for the kernel's names: UNLINK calls this while the kernel
            # holds the directory, and dropping a name there waits for that very request.
            await self._rewrite(stream, self.tree.new_generation(stream, deleted=True), wait=False)
            return
        async with self._generations:  # one at a time: a second caller waits for the first
            old = self.tree.new_generation(stream)
            if old:  # else nothing changed for the kernel (told already, or it knows nothing)
                await self._rewrite(stream, old, wait=True)

    async def _rewrite(self, stream: Stream, old: list[int], *, wait: bool) -> None:
        self.tree.mtime_ns[stream] = time.time_ns()
        parents, name = self.tree.entry_parents(stream), stream[0].encode()
        if wait:
            await trio.to_thread.run_sync(_forget_names, parents, name)
        else:
            self.invalidator.names([(parent, name) for parent in parents])
        for ino in self.tree.stream_inos(stream):
            if ino in old or self.tree.node(ino).kind == "cfile":
                await self.pages.drop(ino)
        self.invalidator.sizes(old)

    def poke(self, change: Change) -> None:
        """Any thread (the engine's watch callback): a stream grew, was trimmed, deleted or
        made (by the Kafka listener, say). The watcher looks at it now instead of at its
        next round."""
        if change.kind == "close" or getattr(self.own_append, "active", False):
            return
        stream = (change.topic, change.partition)
        first = not self._poked and not self._rewritten
        if change.kind in ("trim", "delete"):
            self._rewritten[stream] = self._rewritten.get(stream, False) or change.kind == "delete"
        if change.kind != "delete":
            self._poked.add(stream)

        if first and self._trio_token is not None:
            self._trio_token.run_sync_soon(self._watch_poke.set)

    async def run(self, interval: float = WATCH_INTERVAL) -> None:
        """Finds growth and topics that did not come through this mount's handlers."""
        self._trio_token = trio.lowlevel.current_trio_token()
        while True:
            with trio.move_on_after(interval) as timer:
                await self._watch_poke.wait()
            self._watch_poke = trio.Event()
            poked, self._poked = self._poked, set()
            rewritten, self._rewritten = self._rewritten, {}
            for stream, deleted in rewritten.items():
                await self.bytes_changed(stream, deleted=deleted)
            if not timer.cancelled_caught:
                # Poked: only the streams that grew outside the handlers (the mount's own
                # appends do not poke; the handlers report them).
                for stream in poked:
                    if stream not in self.tree.streams:
                        self.tree.add_stream(stream)
                    self._look_at(stream)
                continue
            try:
                if self._to_look is None:
                    self.tree.refresh_streams()
                    self._to_look = iter(self.tree.streams)
                look = list(islice(self._to_look, LOOK_PER_ROUND))
                if len(look) < LOOK_PER_ROUND:
                    self._to_look = None
                # Trims nobody told of (an engine that does not call back for them).
                trimmed = [st for st in look if st in self.tree.streams and self._look_at(st)]
                for stream in trimmed:
                    await self.bytes_changed(stream)
            except Exception:
                log.exception("watcher round failed")

    def _look_at(self, stream: Stream) -> bool:
        """Growth of the stream; returns whether its low watermark is not where its
        current generation starts (a trim bytes_changed has not handled)."""
        info = self.engine.info(*stream)
        size = info.byte_size
        topic, partition = stream
        seen = self._seen_size.get(partition)
        if seen is None:
            seen = self._seen_size[partition] = {}
        before = seen.get(topic)
        if before != size:
            if before is not None:
                self.stream_changed(topic, partition, seen=False)
                self.push(Node("topic", partition, topic), size - before)
            seen[topic] = size
        base = self.tree.current_base(stream)
        return base is not None and info.low_byte != base
