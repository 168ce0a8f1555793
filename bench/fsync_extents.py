"""What one fdatasync of a ~1 MiB append costs on this disk when the blocks were only
fallocate()d (ext4 "unwritten" extents, as walfs's segment files are created: the first
write to them is a metadata change, so each fdatasync commits the journal) and when they
were written once before. Alternates the two, prints the median and max per run (ms).

    python3 bench/fsync_extents.py --dir /var/tmp --chunks 64 --runs 3 [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def one_run(directory: str, written_before: bool, chunks: int, chunk: int) -> list[float]:
    fd, path = tempfile.mkstemp(dir=directory, prefix="fsync-extents-")
    try:
        os.posix_fallocate(fd, 0, chunks * chunk)
        if written_before:
            os.pwrite(fd, b"\0" * (chunks * chunk), 0)
            os.fsync(fd)
        buf = os.urandom(chunk)
        times = []
        for i in range(chunks):
            os.pwrite(fd, buf, i * chunk)
            t = time.perf_counter()
            os.fdatasync(fd)
            times.append((time.perf_counter() - t) * 1e3)
        return times
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--chunk-bytes", type=int, default=1 << 20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    res: dict[str, list[dict[str, float]]] = {"fallocated": [], "written_before": []}
    for _ in range(args.runs):
        for name, before in (("fallocated", False), ("written_before", True)):
            t = one_run(args.dir, before, args.chunks, args.chunk_bytes)
            row = {"median_ms": round(statistics.median(t), 3), "max_ms": round(max(t), 3)}
            res[name].append(row)
            print(f"{name:15} fdatasync median {row['median_ms']:.2f} ms, max {row['max_ms']:.2f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
