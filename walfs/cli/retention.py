"""`walfs trim` and `walfs retention`: lifecycle of a topic, on a mounted WAL (through the
mount's xattrs, so the daemon that holds the data directory does the work) or on an
unmounted data directory (through the engine interface, walfs.engine_api).

    walfs trim PATH TOPIC OFFSET [--partition N]
    walfs retention PATH TOPIC [--ms MS] [--bytes SIZE] [--partition N]

PATH is a mount point or a data directory. Without --ms/--bytes, `retention` prints the
topic's policy. -1 means no limit, "default" the WAL's default.
"""

from __future__ import annotations

import argparse
import os
import sys

from walfs.retention import parse_limit, show_limit

XATTR = "user.walfs."


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


def trim_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="walfs trim", description="raise a topic's low watermark")
    p.add_argument("path", help="a walfs mount point or an unmounted data directory")
    p.add_argument("topic")
    p.add_argument("offset", type=int, help="records below this offset go")
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--org-id", type=int, default=1, help="for a data directory (a mount has its own)")
    a = p.parse_args(argv)
    try:
        if is_mount(a.path):
            f = topic_file(a.path, a.topic, a.partition)
            os.setxattr(f, XATTR + "low_watermark", str(a.offset).encode())
        else:
            from walfs.engine_api import open_engine

            w = open_engine(a.path, org_id=a.org_id)
            try:
                w.trim(a.topic, a.partition, a.offset)
            finally:
                w.close()
    except (OSError, ValueError) as e:
        print(f"walfs trim: {e}", file=sys.stderr)
        return 1
    return 0


def retention_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="walfs retention", description="show or set a topic's retention")
    p.add_argument("path", help="a walfs mount point or an unmounted data directory")
    p.add_argument("topic")
    p.add_argument("--ms", default=None, help="retention by age in ms (-1: none, default: the WAL's)")
    p.add_argument("--bytes", default=None, help="retention by size (-1: none, default: the WAL's)")
    p.add_argument("--partition", type=int, default=0, help="(a mount sets the topic through this file)")
    p.add_argument("--org-id", type=int, default=1, help="for a data directory (a mount has its own)")
    a = p.parse_args(argv)
    changes = {k: v for k, v in (("retention_ms", a.ms), ("retention_bytes", a.bytes)) if v is not None}
    try:
        for v in changes.values():
            if v != "default":
                parse_limit(v)
        if is_mount(a.path):
            f = topic_file(a.path, a.topic, a.partition)
            for k, v in changes.items():
                os.setxattr(f, XATTR + k, v.encode())
            shown = {k: os.getxattr(f, XATTR + k).decode() for k in ("retention_ms", "retention_bytes")}
        else:
            from walfs.engine_api import open_engine

            w = open_engine(a.path, org_id=a.org_id)
            try:
                if changes:
                    w.set_retention(
                        a.topic, **{k: (v if v == "default" else parse_limit(v)) for k, v in changes.items()}
                    )
                pol = w.retention(a.topic)
                shown = {"retention_ms": show_limit(pol.ms), "retention_bytes": show_limit(pol.bytes)}
            finally:
                w.close()
    except (OSError, ValueError) as e:
        print(f"walfs retention: {e}", file=sys.stderr)
        return 1
    for k, v in shown.items():
        print(f"{k}={v}")
    return 0


main = retention_main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
