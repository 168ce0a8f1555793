"""`walfs groups`: list, describe, reset and delete consumer groups, as kafka-consumer-groups
does for a Kafka listener, on a mount point (through the mount's files and xattrs: the
daemon that holds the data directory does the work) or on an unmounted data directory
(through the engine interface). The groups are the one cursor store that the mount's
consumer files, the Python API and Kafka's groups share.

    walfs groups list PATH
    walfs groups describe PATH GROUP
    walfs groups reset PATH GROUP --topic T [--partition N]
                       (--to-earliest | --to-latest | --to-offset N | --to-datetime ISO) [--execute]
    walfs groups delete PATH GROUP

A reset prints its plan and changes nothing without --execute (as kafka-consumer-groups).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from datetime import datetime
from typing import Any

from walfs.cli.retention import XATTR, is_mount
from walfs.engine.names import CONSUMERS_DIR, PARTITION_PREFIX
from walfs.engine.rules import committed_offset, committed_offsets
from walfs.errors import WalError

Stream = tuple[str, int]
# A group's cursor as describe shows it: (topic, partition, committed offset, low, high).
Cursor = tuple[str, int, int, int, int]


class GroupError(Exception):
    """A user-facing failure: one line, exit code 1."""


class MountGroups:
    """Groups of a mount, through its files: `.consumers/<group>/...` and the consumer
    files' xattrs (committed offsets, watermarks, reset_offset, the offset for a time)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.consumers = os.path.join(path, CONSUMERS_DIR)

    def close(self) -> None:
        pass

    def groups(self) -> list[str]:
        return sorted(os.listdir(self.consumers))

    def exists(self, group: str) -> bool:
        return os.path.isdir(self._group_dir(group))

    def _group_dir(self, group: str) -> str:
        if "/" in group or group in ("", ".", ".."):
            raise GroupError(f"invalid group name {group!r}")
        return os.path.join(self.consumers, group)

    def _file(self, group: str, topic: str, partition: int) -> str:
        return os.path.join(self._group_dir(group), f"{PARTITION_PREFIX}{partition}", topic)

    def streams(self, group: str) -> list[Stream]:
        out = []
        for d in os.listdir(self.path):
            if d.startswith(PARTITION_PREFIX):
                partition = int(d[len(PARTITION_PREFIX) :])
                out += [(t, partition) for t in os.listdir(os.path.join(self.path, d))]
        return sorted(out)

    def cursors(self, group: str) -> list[Cursor]:
        """The group's cursors and their streams' marks, from its directory's xattr pages
        (walfs.fuse.xattrs.CursorPages): requests for the group's cursors, not for every
        topic of the mount."""
        path = self._group_dir(group)
        out: list[Cursor] = []
        while True:
            page = os.getxattr(path, f"{XATTR}cursors.{len(out)}")
            if not page:
                return out
            for line in page.splitlines():
                topic, partition, offset, low, high = json.loads(line)
                out.append((topic, partition, offset, low, high))

    def _get(self, path: str, key: str) -> int | None:
        try:
            return int(os.getxattr(path, XATTR + key))
        except OSError as e:
            if e.errno == errno.ENODATA:
                return None
            raise

    def _topic(self, stream: Stream) -> str:
        return os.path.join(self.path, f"{PARTITION_PREFIX}{stream[1]}", stream[0])

    def marks(self, group: str, stream: Stream) -> tuple[int, int]:
        low, high = (self._get(self._topic(stream), k) for k in ("low_watermark", "high_watermark"))
        assert low is not None and high is not None
        return low, high

    def cursor(self, group: str, stream: Stream) -> int | None:
        if not self.exists(group):
            return None
        return self._get(self._file(group, *stream), "cursor")

    def offset_for_time(self, group: str, stream: Stream, ms: int) -> int:
        offset = self._get(self._topic(stream), f"offset_for_timestamp.{ms}")
        assert offset is not None
        return offset

    def reset(self, group: str, stream: Stream, offset: int) -> None:
        if not self.exists(group):
            os.mkdir(self._group_dir(group))  # as a Kafka commit makes its group
        try:
            os.setxattr(self._file(group, *stream), XATTR + "reset_offset", str(offset).encode())
        except OSError as e:
            if e.errno == errno.EBUSY:
                raise GroupError(
                    f"group {group!r} has a reader of {stream[0]}/{stream[1]} open on {self.path}: "
                    "stop it first (as Kafka's reset requires an inactive group)"
                ) from None
            raise

    def delete(self, group: str) -> None:
        try:
            os.rmdir(self._group_dir(group))
        except OSError as e:
            if e.errno == errno.EBUSY:
                msg = f"group {group!r} has readers open on {self.path}: stop them first"
                raise GroupError(msg) from None
            raise


class DirGroups:
    """Groups of an unmounted data directory, through the engine."""

    def __init__(self, path: str, org_id: int, write: bool) -> None:
        from walfs.errors import WalLockedError
        from walfs.open import open_engine

        if not os.path.isdir(path):
            raise GroupError(f"{path} is neither a walfs mount point nor a data directory")
        # Read-only first: it refuses a directory that holds no WAL instead of making one.
        self.engine = open_engine(path, read_only=True, org_id=org_id)
        if write:
            self.engine.close()
            try:
                self.engine = open_engine(path, org_id=org_id)
            except WalLockedError:
                raise GroupError(
                    f"{path} is in use by a running walfs daemon: run `walfs groups` on its mount "
                    "point (or kafka-consumer-groups against its Kafka listener)"
                ) from None

    def close(self) -> None:
        self.engine.close()

    def groups(self) -> list[str]:
        return sorted(self.engine.groups())

    def exists(self, group: str) -> bool:
        return group in self.engine.groups()

    def streams(self, group: str) -> list[Stream]:
        return sorted(self.engine.streams())

    def marks(self, group: str, stream: Stream) -> tuple[int, int]:
        info = self.engine.info(*stream)
        return info.low_watermark, info.high_watermark

    def cursor(self, group: str, stream: Stream) -> int | None:
        return committed_offset(self.engine, group, *stream)

    def cursors(self, group: str) -> list[Cursor]:
        out = []
        for (topic, partition), offset in sorted(committed_offsets(self.engine, group).items()):
            info = self.engine.info(topic, partition)
            out.append((topic, partition, offset, info.low_watermark, info.high_watermark))
        return out

    def offset_for_time(self, group: str, stream: Stream, ms: int) -> int:
        return self.engine.locate(*stream, timestamp_ms=ms)

    def reset(self, group: str, stream: Stream, offset: int) -> None:
        self.engine.commit(group, stream[0], stream[1], offset)

    def delete(self, group: str) -> None:
        if not self.engine.forget(group):
            raise GroupError(f"group {group!r} does not exist")


Backend = MountGroups | DirGroups


def describe(b: Backend, group: str) -> list[dict[str, Any]]:
    """The group's cursors: per topic and partition, the committed offset, the
    watermarks and the lag (the high watermark less the committed offset, as
    kafka-consumer-groups and the walfs_consumer_lag metric count it). Its cost follows
    the group's cursors, not the log's topics."""
    if not b.exists(group):
        raise GroupError(f"group {group!r} does not exist")
    return [
        {
            "group": group,
            "topic": topic,
            "partition": partition,
            "committed_offset": cursor,
            "low_watermark": low,
            "high_watermark": high,
            "lag": max(high - cursor, 0),
        }
        for topic, partition, cursor, low, high in b.cursors(group)
    ]


def parse_datetime(text: str) -> int:
    """ISO 8601 (as kafka-consumer-groups' --to-datetime; local time without a zone) ->
    milliseconds since the epoch."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        msg = f"--to-datetime {text!r} is not an ISO 8601 time (e.g. 2026-11-28T09:00:00)"
        raise GroupError(msg) from None
    return int(when.timestamp() * 1000)


def reset_plan(b: Backend, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Where each partition's cursor would go. --to-offset is clamped to the retained
    offsets, as kafka-consumer-groups does."""
    streams = [s for s in b.streams(a.group) if s[0] == a.topic]
    if a.partition is not None:
        streams = [s for s in streams if s[1] == a.partition]
    if not streams:
        where = a.topic if a.partition is None else f"{a.topic} partition {a.partition}"
        raise GroupError(f"no topic {where}")
    ms = parse_datetime(a.to_datetime) if a.to_datetime is not None else None
    plan = []
    for stream in streams:
        low, high = b.marks(a.group, stream)
        if a.to_earliest:
            target = low
        elif a.to_latest:
            target = high
        elif ms is not None:
            target = b.offset_for_time(a.group, stream, ms)
        else:
            target = min(max(a.to_offset, low), high)
        plan.append(
            {
                "group": a.group,
                "topic": stream[0],
                "partition": stream[1],
                "committed_offset": b.cursor(a.group, stream),
                "new_offset": target,
            }
        )
    return plan


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """Rows as aligned columns under Kafka-style headers ("-" for none)."""
    cells = [[h for h, _ in columns]]
    cells += [["-" if r[k] is None else str(r[k]) for _, k in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)
    return "\n".join(lines)


DESCRIBE_COLUMNS = [
    ("GROUP", "group"),
    ("TOPIC", "topic"),
    ("PARTITION", "partition"),
    ("CURRENT-OFFSET", "committed_offset"),
    ("LOG-START-OFFSET", "low_watermark"),
    ("LOG-END-OFFSET", "high_watermark"),
    ("LAG", "lag"),
]
RESET_COLUMNS = [
    ("GROUP", "group"),
    ("TOPIC", "topic"),
    ("PARTITION", "partition"),
    ("CURRENT-OFFSET", "committed_offset"),
    ("NEW-OFFSET", "new_offset"),
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="walfs groups",
        description="list, describe, reset and delete consumer groups (the mount's .consumers, "
        "the Python API's and Kafka's groups: one store)",
    )
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, text: str, group: bool = True) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=text, description=text)
        s.add_argument("path", metavar="PATH", help="a walfs mount point or an unmounted data directory")
        if group:
            s.add_argument("group", metavar="GROUP", help="the consumer group")
        s.add_argument("--org-id", type=int, default=1, help="for a data directory (a mount has its own)")
        s.add_argument("--json", action="store_true", help="print JSON (one object per line) for scripts")
        return s

    action("list", "list the groups", group=False)
    action("describe", "show a group's committed offset, watermarks and lag per topic and partition")
    r = action("reset", "move a group's cursors (prints the plan; --execute applies it)")
    r.add_argument("--topic", required=True, help="the topic whose cursors move")
    r.add_argument("--partition", type=int, default=None, help="only this partition (default: all)")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to the low watermark (first retained record)")
    to.add_argument("--to-latest", action="store_true", help="to the high watermark (past the last record)")
    to.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the retained ones)")
    to.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="to the first record appended at or after this time (e.g. 2026-11-28T09:00:00, local time "
        "without a zone)",
    )
    r.add_argument("--execute", action="store_true", help="apply the plan (without it nothing changes)")
    action("delete", "delete a group and its cursors")
    return p


def run(a: argparse.Namespace) -> int:
    write = a.action in ("reset", "delete") and (a.action == "delete" or a.execute)
    b: Backend = MountGroups(a.path) if is_mount(a.path) else DirGroups(a.path, a.org_id, write)
    try:
        if a.action == "list":
            names = b.groups()
            for g in names:
                print(json.dumps({"group": g}) if a.json else g)
        elif a.action == "describe":
            rows = describe(b, a.group)
            if a.json:
                for row in rows:
                    print(json.dumps(row))
            elif rows:
                print(table(rows, DESCRIBE_COLUMNS))
            else:
                print(f"group {a.group!r} has no committed offsets")
        elif a.action == "reset":
            plan = reset_plan(b, a)
            if a.execute:
                for row in plan:
                    b.reset(a.group, (row["topic"], row["partition"]), row["new_offset"])
            if a.json:
                for row in plan:
                    print(json.dumps({**row, "executed": a.execute}))
            else:
                print(table(plan, RESET_COLUMNS))
                if not a.execute:
                    print("dry run: nothing changed (add --execute to apply)", file=sys.stderr)
        else:
            if not b.exists(a.group):
                raise GroupError(f"group {a.group!r} does not exist")
            b.delete(a.group)
            if not a.json:
                print(f"deleted group {a.group!r}")
            else:
                print(json.dumps({"group": a.group, "deleted": True}))
    finally:
        b.close()
    return 0


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    try:
        return run(a)
    except (GroupError, WalError) as e:  # WalError: the engine's (a damaged cursor file, ...)
        print(f"walfs groups: {e}", file=sys.stderr)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"walfs groups: {where}{e.strerror or e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
