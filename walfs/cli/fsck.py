"""walfs fsck DATA_DIR: recovers the directory read-only, then reads every stored record and
checks its CRC and index slot. Exit 0 when clean, 1 when damage was found, 2 when the
directory cannot be opened at all.

walfs fsck --repair DAMAGED_DIR --into NEW_DIR: salvage (engine_api.repair: walfs/salvage.py). Copies every
intact record and cursor of DAMAGED_DIR, which may not even open, into the new data
directory NEW_DIR; DAMAGED_DIR is never written. Lists what could not be kept. Exit 0 when
everything was kept, 1 when anything was lost or renumbered, 2 when nothing could be read."""

import argparse
import json

from walfs.engine_api import open_engine, repair
from walfs.errors import WalError


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="walfs fsck", description=__doc__)
    p.add_argument("data_dir")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--repair", action="store_true",
                   help="salvage DATA_DIR into the new directory given with --into (DATA_DIR is not changed)")
    p.add_argument("--into", metavar="NEW_DIR", help="with --repair: the new data directory to write")
    args = p.parse_args(argv)
    if args.repair or args.into:
        if not (args.repair and args.into):
            p.error("--repair and --into go together")
        return _repair(args.data_dir, args.into, args.json)
    try:
        # Read-only: fsck works beside a running daemon and never changes a byte.
        wal = open_engine(args.data_dir, read_only=True)
    except WalError as e:
        print(f"walfs fsck: {args.data_dir}: {e}")
        print(f"walfs fsck: to copy what is intact: walfs fsck --repair {args.data_dir} --into NEW_DIR")
        return 2
    try:
        problems = wal.verify()
        report = wal.report()
        streams = len(wal.streams())
    finally:
        wal.close()
    if args.json:
        print(json.dumps({"recovery": report, "streams": streams, "problems": problems}, indent=2))
    else:
        print(
            f"{args.data_dir}: {report['segments']} segments, {report['records']} records "
            f"in {streams} streams (org {wal.org_id}); tail records verified: {report['verified_records']}, "
            f"incomplete tail records ignored: {report['cut_records']}"
        )
        for topic, partition, offset, what in problems:
            print(f"  {topic}[{partition}] offset {offset}: {what}")
        print("clean" if not problems else f"{len(problems)} damaged records")
    return 1 if problems else 0


def _repair(src: str, dst: str, as_json: bool) -> int:
    try:
        report = repair(src, dst)
    except (WalError, OSError, ValueError) as e:
        print(f"walfs fsck --repair: {e}")
        return 2
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(f"{src} -> {dst}: {report.records} records in {report.streams} streams, "
              f"{report.cursors} cursors salvaged")
        for loss in report.lost:
            print(f"  LOST {loss}")
        for line in report.renumbered:
            print(f"  RENUMBERED {line}")
        print("everything kept" if not report.lost and not report.renumbered
              else f"{len(report.lost)} losses: see above")
    return 1 if report.lost or report.renumbered else 0
