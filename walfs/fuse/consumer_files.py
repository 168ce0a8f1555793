"""Consumer files (MOUNT/.consumers/<group>/<topic>): a topic's byte view from the
group's next record on. Reading one moves the group's cursor at every close (FLUSH: also
the close the kernel does for a killed process), by the records read contiguously from
the view's start (whole records only), and never backwards. The peek view
(.consumers/<group>/.peek/...) shows the same bytes and never commits; its reader commits
with setxattr user.walfs.committed_offset (commit_offset below)."""

from __future__ import annotations

from walfs.engine.contract import LogEngine
from walfs.engine.rules import group_start
from walfs.fuse.nodes import Node


def committed(engine: LogEngine, node: Node) -> int:
    """The offset where the group's view of the node's stream starts."""
    return group_start(engine, node.group, node.topic, node.partition)


def committed_byte(engine: LogEngine, node: Node) -> int:
    """Byte position in the topic's view where the group's next record starts."""
    offset = committed(engine, node)
    info = engine.info(node.topic, node.partition)
    if offset >= info.high_watermark:
        return int(info.byte_size)
    return int(engine.locate(node.topic, node.partition, offset=offset))


def view_start(engine: LogEngine, node: Node) -> tuple[int, int]:
    """(offset, byte) where a consumer file opened now starts."""
    offset = committed(engine, node)
    return offset, int(engine.locate(node.topic, node.partition, offset=offset))


def commit_read(engine: LogEngine, node: Node, base_offset: int, base_byte: int, frontier: int) -> int:
    """Commits the whole records in the first `frontier` bytes of a view that started at
    (base_offset, base_byte); returns how many (0: nothing to commit). Blocking (a
    durable write): call it from a worker thread."""
    end = int(engine.locate(node.topic, node.partition, byte=base_byte + frontier))
    n = end - base_offset
    if n > 0:
        # Two handles of one group: never move the committed offset backwards
        # (advance_only checks and writes in one step under the cursor store's lock).
        engine.commit(node.group, node.topic, node.partition, base_offset + n, advance_only=True)
    return n


def commit_offset(engine: LogEngine, node: Node, offset: int) -> None:
    """An explicit commit (setxattr user.walfs.committed_offset): forwards only from
    where the group's next record is, at most the high watermark; durable when it
    returns. ValueError for an offset out of that range. Blocking: a worker thread."""
    start = committed(engine, node)
    high = engine.info(node.topic, node.partition).high_watermark
    if offset < start:
        raise ValueError(f"{offset} is below the committed offset {start} (walfs groups reset moves back)")
    if offset > high:
        raise ValueError(f"{offset} is past the high watermark {high}")
    engine.commit(node.group, node.topic, node.partition, offset, advance_only=True)


def reset_offset(engine: LogEngine, node: Node, offset: int) -> None:
    """A reset (setxattr user.walfs.reset_offset, `walfs groups reset`): the cursor moves
    to any offset from the low to the high watermark, durably. ValueError outside."""
    info = engine.info(node.topic, node.partition)
    if not info.low_watermark <= offset <= info.high_watermark:
        low, high = info.low_watermark, info.high_watermark
        raise ValueError(f"{offset} is outside the retained offsets {low}..{high}")
    engine.commit(node.group, node.topic, node.partition, offset)
