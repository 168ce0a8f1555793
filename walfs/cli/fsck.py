"""walfs fsck DATA_DIR: recovers the directory read-only, then reads every stored record and
checks its CRC and index slot. Exit 0 when clean, 1 when damage was found, 2 when the
directory cannot be opened at all."""

import argparse
import json

from walfs.errors import WalError
from walfs.wal import Wal


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="walfs fsck", description=__doc__)
    p.add_argument("data_dir")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    try:
        # Read-only: fsck works beside a running daemon and never changes a byte.
        wal = Wal(args.data_dir, read_only=True)
    except WalError as e:
        print(f"walfs fsck: {args.data_dir}: {e}")
        return 2
    try:
        problems = wal.verify()
        report = wal.recovery_report()
        streams = sum(len(wal.partitions(t)) for t in wal.topics())
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
