"""Nodes: what an inode stands for, and the rules of the tree's directory names."""

from __future__ import annotations

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
