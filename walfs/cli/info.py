"""walfs info DATA_DIR: the topics of an org with their watermarks (read-only)."""

import argparse
import json

from walfs.engine_api import open_engine


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="walfs info", description=__doc__)
    p.add_argument("data_dir")
    p.add_argument("--org-id", type=int, default=1)
    args = p.parse_args(argv)
    wal = open_engine(args.data_dir, read_only=True, org_id=args.org_id)
    try:
        rows = [wal.info(t, part) for t, part in wal.streams()]
    finally:
        wal.close()
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
