"""walfs info PATH: the topics of an org with their watermarks and sizes, and the disk the
data directory takes. PATH is a data directory (opened read-only: this works beside a live
daemon and changes nothing) or a walfs mount point (asked through the mount's xattrs, so
the daemon answers with what it serves now).

A table for people by default; --json prints one JSON object per topic and partition
({"topic", "partition", "low", "high", "bytes"}) for scripts."""

from __future__ import annotations

import errno
import json
import os

from walfs.cli.common import XATTR, CliError, Parser, module_main, mount_of, open_read_only, resolve
from walfs.common.sizes import human
from walfs.engine.names import CONSUMERS_DIR, PARTITION_PREFIX
from walfs.engine.targets import is_local

Row = tuple[str, int, int, int, int]  # topic, partition, low, high, bytes


def _xattr(path: str, key: str) -> str:
    return os.getxattr(path, XATTR + key).decode()


def mount_rows(mount: str) -> list[Row]:
    """Every topic file of the mount (partition 0 at the root, the others in their
    `partition=N` directories), with the watermarks its xattrs give."""
    files: list[tuple[str, int]] = []
    with os.scandir(mount) as entries:
        for e in entries:
            if e.name.startswith(PARTITION_PREFIX):
                part = int(e.name.removeprefix(PARTITION_PREFIX))
                if part != 0:  # partition=0/ holds the root's files again
                    with os.scandir(e.path) as inner:
                        files += [(f.path, part) for f in inner if f.is_file()]
            elif e.name != CONSUMERS_DIR and e.is_file():
                files.append((e.path, 0))
    rows: list[Row] = []
    for path, part in files:
        try:
            rows.append(
                (
                    _xattr(path, "topic"),
                    part,
                    int(_xattr(path, "low_watermark")),
                    int(_xattr(path, "high_watermark")),
                    int(_xattr(path, "byte_size")),
                )
            )
        except FileNotFoundError:
            continue  # deleted since the listing
    return sorted(rows)


def disk_use(data_dir: str) -> int:
    """Bytes the data directory's files take on disk (what `du` counts)."""
    total = 0
    with os.scandir(data_dir) as entries:
        for e in entries:
            try:
                total += e.stat(follow_symlinks=False).st_blocks * 512
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
    return total


def main(argv: list[str]) -> int:
    p = Parser(prog="walfs info", description=__doc__)
    p.add_argument("path", metavar="PATH", help="a data directory or a walfs mount point")
    p.add_argument(
        "--org-id", type=int, default=None, help="for a data directory: the org to list (default 1)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per topic and partition")
    args = p.parse_args(argv)
    target = resolve(args.path, "info")
    if target.mount is not None:
        org = int(_xattr(target.mount, "org_id"))
        if args.org_id is not None and args.org_id != org:
            raise CliError(
                f"{target.mount} shows org {org}, not {args.org_id}: give the data directory "
                f"({_xattr(target.mount, 'data_dir')}) for another org"
            )
        rows = mount_rows(target.mount)
        data_dir = _xattr(target.mount, "data_dir")
        pid = _xattr(target.mount, "pid")
        title = f"{target.mount}: walfs mount of {data_dir} (org {org}, daemon pid {pid})"
    else:
        assert target.data_dir is not None
        data_dir = target.data_dir
        org = args.org_id if args.org_id is not None else 1
        engine = open_read_only(data_dir, org_id=org)
        try:
            rows = sorted(
                (r.topic, r.partition, r.low_watermark, r.high_watermark, r.byte_size)
                for r in (engine.info(t, part) for t, part in engine.streams())
            )
        finally:
            engine.close()
        mp = mount_of(data_dir) if is_local(data_dir) else None
        title = f"{data_dir}: walfs data directory (org {org}{f', mounted on {mp}' if mp else ''})"
    if args.json:
        for topic, part, low, high, size in rows:
            print(json.dumps({"topic": topic, "partition": part, "low": low, "high": high, "bytes": size}))
        return 0
    print(title)
    if is_local(data_dir):
        used = disk_use(data_dir)
        print(f"disk: {human(used)} ({used} bytes) in {data_dir}")
    if rows:
        table = [("TOPIC", "PARTITION", "LOW", "HIGH", "RECORDS", "BYTES")]
        table += [(t, str(p), str(lo), str(hi), str(hi - lo), str(b)) for t, p, lo, hi, b in rows]
        widths = [max(len(r[i]) for r in table) for i in range(6)]
        for r in table:
            cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
            print("  ".join(cells).rstrip())
    topics = len({r[0] for r in rows})
    records = sum(r[3] - r[2] for r in rows)
    lines = human(sum(r[4] for r in rows))
    print(f"{topics} topics, {len(rows)} streams, {records} records, {lines} of lines")
    return 0


if __name__ == "__main__":
    module_main("info", main)
