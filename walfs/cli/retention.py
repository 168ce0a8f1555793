"""`walfs trim` and `walfs retention`: lifecycle of a topic, on a mounted WAL (through the
mount's xattrs, so the daemon that holds the data directory does the work) or on an
unmounted data directory (through the engine interface, walfs.engine.contract).

    walfs trim PATH TOPIC OFFSET [--partition N]
    walfs trim TOPIC_FILE OFFSET           (a topic's file on a mount)
    walfs retention PATH TOPIC [--ms MS] [--bytes SIZE] [--partition N]

PATH is a mount point or a data directory. A data directory that a mount serves is
changed through that mount. Without --ms/--bytes, `retention` prints the topic's policy.
-1 means no limit, "default" the WAL's default.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from walfs.cli.common import XATTR, CliError, Parser, Target, module_main, mount_of, resolve
from walfs.common.sizes import parse_limit, show_limit
from walfs.engine.rules import retention

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine


def is_mount(path: str) -> bool:
    try:
        os.getxattr(path, XATTR + "pid")
        return True
    except OSError:
        return False


def topic_file(mount: str, topic: str, partition: int) -> str:
    if partition == 0:
        return os.path.join(mount, topic)
    return os.path.join(mount, f"partition={partition}", topic)


def _through_mount(target: Target, org_id: int | None) -> str | None:
    """The mount point to work through: PATH itself, or the mount serving the data
    directory PATH (its daemon holds the directory's lock)."""
    if target.mount is not None:
        return target.mount
    assert target.data_dir is not None
    mp = mount_of(target.data_dir)
    if mp is not None and org_id is not None:
        mount_org = int(os.getxattr(mp, XATTR + "org_id"))
        if mount_org != org_id:
            raise CliError(
                f"{target.data_dir} is mounted on {mp} for org {mount_org}, not {org_id}: "
                "stop that mount to change another org's topics"
            )
    return mp


def _stream_file(mount: str, topic: str, partition: int) -> str:
    f = topic_file(mount, topic, partition)
    try:
        os.getxattr(f, XATTR + "high_watermark")
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            where = "" if partition == 0 else f" partition {partition}"
            raise CliError(f"{mount}: no topic {topic!r}{where}") from None
        raise
    return f


def _open_data_dir(path: str, org_id: int) -> LogEngine:
    """A writable engine on an unmounted data directory (never creating one)."""
    from walfs.cli.common import open_read_only
    from walfs.engine.targets import is_local
    from walfs.errors import WalLockedError
    from walfs.open import open_engine

    if is_local(path):
        open_read_only(path).close()  # a directory that holds no WAL is refused, not made one
    try:
        return open_engine(path, org_id=org_id)
    except WalLockedError:
        raise CliError(
            f"{path} is held by a running walfs process that this command cannot reach (a `walfs serve`, "
            "or a mount in another mount namespace): change it through that process, or stop it"
        ) from None


def _engine_topic(w: LogEngine, topic: str, partition: int, path: str) -> None:
    if (topic, partition) not in w.streams(topic):
        where = "" if partition == 0 else f" partition {partition}"
        raise CliError(f"{path}: no topic {topic!r}{where}")


def trim_main(argv: list[str]) -> int:
    p = Parser(
        prog="walfs trim",
        usage="walfs trim PATH TOPIC OFFSET [--partition N] | walfs trim TOPIC_FILE OFFSET",
        description="Raise a topic's low watermark: records below OFFSET go. "
        "TOPIC_FILE is the topic's file on a mount (/mnt/wal/orders, /mnt/wal/partition=2/orders).",
    )
    p.add_argument("args", nargs="+", metavar="PATH TOPIC OFFSET", help="a mount point or a data "
                   "directory, the topic's name and the offset; or a topic's file on a mount and the offset")
    p.add_argument("--partition", type=int, default=None, help="the partition (default 0)")
    p.add_argument(
        "--org-id", type=int, default=None, help="for a data directory (default 1; a mount has its own)"
    )
    a = p.parse_args(argv)
    if len(a.args) not in (2, 3):
        p.error("give PATH TOPIC OFFSET, or a topic's file on a mount and OFFSET")
    try:
        offset = int(a.args[-1])
    except ValueError:
        p.error(f"argument offset: invalid int value: {a.args[-1]!r}")
    if offset < 0:
        p.error(f"argument offset: {offset} is negative")
    if len(a.args) == 2:
        f, topic, partition = _topic_file_arg(a.args[0], a.partition)
        _check_offset(offset, int(os.getxattr(f, XATTR + "high_watermark")), topic, partition)
        os.setxattr(f, XATTR + "low_watermark", str(offset).encode())
        return 0
    path, topic = a.args[0], a.args[1]
    partition = a.partition or 0
    target = resolve(path, "trim")
    mount = _through_mount(target, a.org_id)
    if mount is not None:
        f = _stream_file(mount, topic, partition)
        _check_offset(offset, int(os.getxattr(f, XATTR + "high_watermark")), topic, partition)
        os.setxattr(f, XATTR + "low_watermark", str(offset).encode())
        return 0
    w = _open_data_dir(path, a.org_id or 1)
    try:
        _engine_topic(w, topic, partition, path)
        _check_offset(offset, w.info(topic, partition).high_watermark, topic, partition)
        w.trim(topic, partition, offset)
    finally:
        w.close()
    return 0


def _topic_file_arg(path: str, partition: int | None) -> tuple[str, str, int]:
    """A topic's file on a mount, given alone: the file, its topic and its partition (read
    from the file's own xattrs, so every partition directory and org works the same)."""
    try:
        topic = os.getxattr(path, XATTR + "topic").decode()
        part = int(os.getxattr(path, XATTR + "partition"))
    except FileNotFoundError:
        raise CliError(f"{path}: no such file or directory") from None
    except OSError:
        raise CliError(
            f"{path} is not a topic's file on a walfs mount: give PATH TOPIC OFFSET "
            "(PATH a mount point or a data directory), or a topic's file and OFFSET"
        ) from None
    try:
        group = os.getxattr(path, XATTR + "group").decode()
    except OSError:
        group = None
    if group is not None:
        raise CliError(f"{path} is group {group!r}'s consumer file, not a topic's file: "
                       "trim the topic's own file")
    if partition is not None and partition != part:
        raise CliError(f"{path} is partition {part}'s file, not partition {partition}'s")
    return path, topic, part


def _check_offset(offset: int, high: int, topic: str, partition: int) -> None:
    if offset > high:
        raise CliError(
            f"offset {offset} is past the end of {topic!r}[{partition}] (high watermark {high}): "
            f"trim to at most {high}"
        )


def retention_main(argv: list[str]) -> int:
    p = Parser(prog="walfs retention", description="Show or set a topic's retention.")
    p.add_argument("path", help="a walfs mount point or a data directory")
    p.add_argument("topic", help="the topic's name")
    p.add_argument("--ms", default=None, help="retention by age in ms (-1: none, default: the WAL's)")
    p.add_argument("--bytes", default=None, help="retention by size, e.g. 10G (-1: none, default: the WAL's)")
    p.add_argument("--partition", type=int, default=0, help="(a mount sets the topic through this file)")
    p.add_argument(
        "--org-id", type=int, default=None, help="for a data directory (default 1; a mount has its own)"
    )
    a = p.parse_args(argv)
    changes = {k: v for k, v in (("retention_ms", a.ms), ("retention_bytes", a.bytes)) if v is not None}
    for k, v in changes.items():
        if v != "default":
            try:
                parse_limit(v)
            except ValueError:
                p.error(f"argument --{k.removeprefix('retention_')}: {v!r} is not a limit (a number, "
                        "with K/M/G for bytes; -1: none; default)")
    target = resolve(a.path, "retention")
    mount = _through_mount(target, a.org_id)
    if mount is not None:
        f = _stream_file(mount, a.topic, a.partition)
        for k, v in changes.items():
            os.setxattr(f, XATTR + k, v.encode())
        shown = {k: os.getxattr(f, XATTR + k).decode() for k in ("retention_ms", "retention_bytes")}
    else:
        w = _open_data_dir(a.path, a.org_id or 1)
        try:
            _engine_topic(w, a.topic, a.partition, a.path)
            if changes:
                w.set_settings(
                    a.topic, **{k: (v if v == "default" else parse_limit(v)) for k, v in changes.items()}
                )
            pol = retention(w, a.topic)
            shown = {"retention_ms": show_limit(pol.ms), "retention_bytes": show_limit(pol.bytes)}
        finally:
            w.close()
    for k, v in shown.items():
        print(f"{k}={v}")
    return 0


main = retention_main


if __name__ == "__main__":
    module_main("retention", main)
