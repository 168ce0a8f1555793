"""The user.walfs.* extended attributes: a topic's figures (watermarks, sizes, its
retention, a consumer file's committed offset and cursor, the offset for a time) and the
ones a writer may set (a topic's low_watermark trims, retention_ms/retention_bytes; a
consumer file's committed_offset commits, forwards only, and reset_offset moves the
cursor anywhere in the retained records). The root's figures belong to the daemon
(walfs.fuse.operations)."""

from __future__ import annotations

import errno
import json
import logging
import time
from collections.abc import Callable

import pyfuse3

from walfs.common.sizes import parse_limit, show_limit
from walfs.engine.contract import LogEngine
from walfs.engine.rules import committed_offset, committed_offsets, retention
from walfs.fuse.consumer_files import commit_offset, committed, reset_offset
from walfs.fuse.nodes import Node

log = logging.getLogger("walfs.fuse")

XATTR_PREFIX = "user.walfs."
SETTABLE = ("low_watermark", "retention_ms", "retention_bytes")
CONSUMER_SETTABLE = ("committed_offset", "reset_offset")
# getfattr -n user.walfs.offset_for_timestamp.<ms>: the first offset appended at or after
# <ms> (milliseconds since the epoch), the high watermark if none (not listed: a query).
TIME_QUERY = "offset_for_timestamp."
# getfattr -n user.walfs.cursors.<n> on .consumers/<group>: the group's cursors from the
# n-th on (a query, not listed; CursorPages below): what `walfs groups describe` reads.
CURSORS_QUERY = "cursors."
XATTR_SIZE_MAX = 65536  # the largest value the kernel passes (linux/limits.h)

Getters = dict[str, Callable[[], str]]

# The root's metrics summary: readable by name, left out of listxattr so that `getfattr -d`
# stays a short dump of figures (the summary is a few KiB of Prometheus text).
UNLISTED = frozenset({"metrics"})
# Values read through Snapshots (below).
SNAPSHOTTED = frozenset({"metrics"})


class Snapshots:
    """Values that change with every request (the metrics text counts the very getxattr
    that renders it), read the way getfattr reads an xattr: a size query, then a read into
    a buffer of that size. Rendered afresh for each size query, they would outgrow it
    (ERANGE). So the bytes rendered for one call of a process are served to that process's
    next call for the same file and name, if it comes within TTL seconds, and then dropped:
    every getfattr run sees a fresh value, served whole."""

    TTL = 1.0
    MAX_HELD = 256  # callers that asked once and not again are forgotten past this many

    def __init__(self) -> None:
        self._held: dict[tuple[int, int, str], tuple[float, bytes]] = {}

    def value(self, pid: int, inode: int, key: str, render: Callable[[], bytes]) -> bytes:
        value = self.take(pid, inode, key)
        if value is None:
            value = render()
            self.hold(pid, inode, key, value)
        return value

    def take(self, pid: int, inode: int, key: str) -> bytes | None:
        """The bytes held for this process's next call, if fresh (then dropped)."""
        held = self._held.pop((pid, inode, key), None)
        return held[1] if held is not None and time.monotonic() - held[0] < self.TTL else None

    def hold(self, pid: int, inode: int, key: str, value: bytes) -> None:
        """Bytes just rendered for a call: its process's next call is served them."""
        now = time.monotonic()
        if len(self._held) >= self.MAX_HELD:
            self._held = {k: v for k, v in self._held.items() if now - v[0] < self.TTL}
            if len(self._held) >= self.MAX_HELD:
                self._held.clear()
        self._held[(pid, inode, key)] = (now, value)


class CursorPages:
    """A group's cursors, read through its directory's xattr user.walfs.cursors.<n>: one
    JSON line per cursor, [topic, partition, committed offset, low watermark, high
    watermark], sorted by topic and partition, from the n-th cursor on, as many whole
    lines as one xattr value holds (64 KiB); an empty value past the last. A reader asks
    page 0, then page n with n the lines it has, until an empty one: a group of C cursors
    costs C / ~1,000 requests, whatever the log's topic count (`walfs groups describe`
    on a mount asked two xattrs of every topic before).

    Page 0 lists the group's cursors afresh (engine.rules.committed_offsets: the cursor
    store's list) and the marks of each; the next pages of the same process within TTL
    seconds are cut from that list, so that one reading is one listing. A value is served
    through Snapshots (its size query and its read see the same bytes)."""

    TTL = 30.0

    def __init__(self) -> None:
        self._held: dict[tuple[int, str], tuple[float, list[bytes]]] = {}

    def page(self, engine: LogEngine, pid: int, group: str, first: int) -> bytes:
        now = time.monotonic()
        held = self._held.get((pid, group))
        if first == 0 or held is None or now - held[0] >= self.TTL:
            self._held = {k: v for k, v in self._held.items() if now - v[0] < self.TTL}
            held = self._held[(pid, group)] = (now, _cursor_lines(engine, group))
        lines = held[1]
        out: list[bytes] = []
        size = 0
        for line in lines[first:]:
            if size + len(line) > XATTR_SIZE_MAX:
                break
            out.append(line)
            size += len(line)
        if first + len(out) >= len(lines):
            self._held.pop((pid, group), None)  # read to the end
        return b"".join(out)


def _cursor_lines(engine: LogEngine, group: str) -> list[bytes]:
    out = []
    for (topic, partition), offset in sorted(committed_offsets(engine, group).items()):
        i = engine.info(topic, partition)
        row = [topic, partition, offset, i.low_watermark, i.high_watermark]
        out.append(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    return out


def cursors_page(key: str) -> int | None:
    """n of a `cursors.<n>` key, else None."""
    if not key.startswith(CURSORS_QUERY):
        return None
    text = key[len(CURSORS_QUERY) :]
    return int(text) if text.isascii() and text.isdigit() else None


def key_of(name: bytes) -> str:
    """The walfs key of an xattr name; ENOATTR for names outside user.walfs."""
    text = name.decode("utf-8", "replace")
    if not text.startswith(XATTR_PREFIX):
        raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
    return text[len(XATTR_PREFIX) :]


def stream_xattrs(engine: LogEngine, node: Node) -> Getters:
    """The getters of a topic or consumer file (none for directories)."""
    if node.kind not in ("topic", "cfile"):
        return {}
    t, p = node.topic, node.partition

    def info(name: str) -> Callable[[], str]:
        def get() -> str:
            return str(getattr(engine.info(t, p), name))

        return get

    out: Getters = {
        "org_id": info("org_id"),
        "topic": lambda: t,
        "topic_hash": info("topic_hash"),
        "partition": lambda: str(p),
        "low_watermark": info("low_watermark"),
        "high_watermark": info("high_watermark"),
        "durable_watermark": info("durable_watermark"),
        "retention_ms": lambda: show_limit(retention(engine, t).ms),
        "retention_bytes": lambda: show_limit(retention(engine, t).bytes),
        "byte_size": info("byte_size"),
    }
    if node.kind == "cfile":
        out["group"] = lambda: node.group
        out["committed_offset"] = lambda: str(committed(engine, node))
        # The stored cursor, listed only when the group committed on this stream.
        cursor = committed_offset(engine, node.group, t, p)
        if cursor is not None:
            out["cursor"] = lambda: str(cursor)
    return out


def getter_for(engine: LogEngine, node: Node, key: str, getters: Getters) -> Callable[[], str] | None:
    """The getter of `key` on `node`: a listed one, or the offset-for-time query."""
    getter = getters.get(key)
    if getter is not None or not key.startswith(TIME_QUERY) or node.kind not in ("topic", "cfile"):
        return getter
    text = key[len(TIME_QUERY) :]
    if not text.isdigit():
        return None
    ms = int(text)
    return lambda: str(engine.locate(node.topic, node.partition, timestamp_ms=ms))


def change_for(engine: LogEngine, node: Node, name: bytes, value: bytes) -> tuple[str, Callable[[], None]]:
    """(key, the blocking engine call that sets it). ENOTSUP for anything not settable (not
    EPERM, so that `cp -a` and friends skip xattrs); EINVAL for a bad value."""
    key = name.decode("utf-8", "replace").removeprefix(XATTR_PREFIX)
    if node.kind == "cfile" and key in CONSUMER_SETTABLE:
        return key, _consumer_change(engine, node, key, value)
    if node.kind != "topic" or key not in SETTABLE:
        raise pyfuse3.FUSEError(errno.ENOTSUP)
    t, p = node.topic, node.partition
    try:
        text = value.decode("ascii").strip()
        if key == "low_watermark":
            if not text.isdigit():
                raise ValueError(text)
            offset = int(text)
            if offset > engine.info(t, p).high_watermark:
                raise ValueError(f"{offset} is past the end")

            def change() -> None:
                engine.trim(t, p, offset)
        else:
            setting: int | str | None = "default" if text == "default" else parse_limit(text)

            def change() -> None:
                engine.set_settings(t, **{key: setting})
    except (UnicodeDecodeError, ValueError) as exc:
        log.info("setxattr %s on %r refused: %s", key, t, exc)
        raise pyfuse3.FUSEError(errno.EINVAL) from None
    return key, change


def _consumer_change(engine: LogEngine, node: Node, key: str, value: bytes) -> Callable[[], None]:
    """committed_offset: a commit (forwards only, at most the high watermark, durable
    when setxattr returns); reset_offset: the cursor moves to any retained offset."""
    try:
        text = value.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    if not text.isdigit():
        log.info("setxattr %s on %r refused: %r is not an offset", key, node.topic, value[:40])
        raise pyfuse3.FUSEError(errno.EINVAL)
    offset = int(text)

    def change() -> None:
        try:
            (commit_offset if key == "committed_offset" else reset_offset)(engine, node, offset)
        except ValueError as exc:
            log.info("setxattr %s of group %r on %r refused: %s", key, node.group, node.topic, exc)
            raise pyfuse3.FUSEError(errno.EINVAL) from None

    return change
