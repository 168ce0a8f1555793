"""walfs info DATA_DIR: the topics of an org with their watermarks (read-only)."""

import argparse
import json

from walfs.wal import Wal


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="walfs info", description=__doc__)
    p.add_argument("data_dir")
    p.add_argument("--org-id", type=int, default=1)
    args = p.parse_args(argv)
    with Wal(args.data_dir, read_only=True, org_id=args.org_id) as wal:
        rows = [wal.stream_info(t, part) for t in wal.topics() for part in wal.partitions(t)]
    for r in rows:
        print(
            json.dumps(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "low": r.low_watermark,
                    "high": r.high_watermark,
                    "bytes": r.byte_size,
                }
            )
        )
    return 0
