"""Nodes: what an inode stands for, and the rules of the tree's directory names."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from walfs.engine.names import PARTITION_PREFIX

MAX_PARTITION = 2**31 - 1


class Node(NamedTuple):
    """What an inode stands for. Kinds: root, pdir, consumers, group, gpdir, topic, cfile.
    `peek`: a group's peek view (.consumers/<group>/.peek/...: the group dir itself with
    peek set is `.peek`), whose consumer files never commit."""

    kind: str
    partition: int = 0
    topic: str = ""
    group: str = ""
    peek: bool = False


ROOT = Node("root")
CONSUMERS = Node("consumers")
DIR_KINDS = frozenset({"root", "pdir", "consumers", "group", "gpdir"})
# In a group's directory: its peek view (a partition-0 topic of this name is reached there
# as partition=0/.peek).
PEEK_DIR = ".peek"

Stream = tuple[str, int]


class StreamSet:
    """A set of streams (topic, partition) kept as a set of names per partition: a stream
    costs its set entry, its name being the engine's own string (100,000 topics: a tuple
    per stream would add 64 bytes to each; docs/operations.md "What a topic costs")."""

    __slots__ = ("_by_partition",)

    def __init__(self) -> None:
        self._by_partition: dict[int, set[str]] = {}

    def __contains__(self, stream: object) -> bool:
        if not isinstance(stream, tuple) or len(stream) != 2:
            return False
        names = self._by_partition.get(stream[1])
        return names is not None and stream[0] in names

    def add(self, stream: Stream) -> None:
        topic, partition = stream
        names = self._by_partition.get(partition)
        if names is None:
            names = self._by_partition[partition] = set()
        names.add(topic)

    def update(self, streams: Iterable[Stream]) -> None:
        by_partition = self._by_partition
        for topic, partition in streams:
            names = by_partition.get(partition)
            if names is None:
                names = by_partition[partition] = set()
            names.add(topic)

    def discard(self, stream: Stream) -> None:
        topic, partition = stream
        names = self._by_partition.get(partition)
        if names is not None:
            names.discard(topic)
            if not names:
                del self._by_partition[partition]

    def __len__(self) -> int:
        return sum(map(len, self._by_partition.values()))

    def __iter__(self) -> Iterator[Stream]:
        """A tuple made per stream as it goes; the set may change meanwhile (each partition's
        names are copied when the walk reaches them: what was discarded before is left out)."""
        for partition, names in list(self._by_partition.items()):
            for topic in list(names):
                yield topic, partition

    def partitions(self) -> set[int]:
        return set(self._by_partition)

    def names(self, partition: int) -> list[str]:
        """The topics of one partition, sorted."""
        return sorted(self._by_partition.get(partition, ()))


def parse_partition_dir(name: str) -> int | None:
    """`partition=<n>` with n in 0..2**31-1 written canonically, else None."""
    if not name.startswith(PARTITION_PREFIX):
        return None
    digits = name[len(PARTITION_PREFIX) :]
    if not digits.isascii() or not digits.isdigit() or (len(digits) > 1 and digits[0] == "0"):
        return None
    n = int(digits)
    return n if n <= MAX_PARTITION else None


def parent_of(node: Node) -> Node:
    if node.kind in ("pdir", "consumers", "topic") and not (node.kind == "topic" and node.partition != 0):
        return ROOT
    if node.kind == "topic":
        return Node("pdir", node.partition)
    if node.kind == "group":
        return Node("group", group=node.group) if node.peek else CONSUMERS
    if node.kind == "gpdir":
        return Node("group", group=node.group, peek=node.peek)
    if node.kind == "cfile":
        if node.partition == 0:
            return Node("group", group=node.group, peek=node.peek)
        return Node("gpdir", node.partition, group=node.group, peek=node.peek)
    return ROOT
