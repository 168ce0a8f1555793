"""One writer of torture (a) (tools/torture_mount.py): appends lines to FILE through a walfs
mount, each write() followed by fsync(), and prints "ok SEQ" once both returned. Runs until
the mount dies under it (the daemon is SIGKILLed) or it is killed.

A line is "W SEQ LEN " + LEN filler bytes (the filler byte is derived from SEQ) + "\\n", so
the checker can tell a torn, duplicated or misplaced line. LEN runs from 0 to 300 KiB.

usage: torture_mount_writer.py FILE WRITER_ID SEED"""

import os
import random
import sys


def line(wid: int, seq: int, n: int) -> bytes:
    return f"{wid} {seq} {n} ".encode() + bytes([97 + seq % 26]) * n + b"\n"


def main() -> int:
    path, wid, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    seq = int(os.environ.get("TORTURE_FIRST_SEQ", "0"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while True:
            n = rng.choice((0, 1, 1, 10, 100, 4000, 70_000, 300 * 1024 - 40))
            data = line(wid, seq, n)
            if os.write(fd, data) != len(data):
                return 3
            os.fsync(fd)
            print(f"ok {seq}", flush=True)
            seq += 1
    except OSError:
        return 0  # the mount went away: expected


if __name__ == "__main__":
    sys.exit(main())
