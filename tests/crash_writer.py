"""A writer process for the SIGKILL tests: appends batches of deterministic records to a
few topics and reports each batch before ("will") and after ("done") its append returns.
A batch of one is appended with Wal.append (the single-record path).

usage: crash_writer.py DATA_DIR FSYNC SEED"""

import random
import sys

from conftest import SMALL, payload

import walfs


def main() -> None:
    path, fsync, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    w = walfs.Wal(path, fsync=fsync, fsync_interval_ms=20, **SMALL)
    topics = [f"t{i}" for i in range(4)]
    next_off = {t: w.info(t).high_watermark for t in topics}
    print("ready", " ".join(f"{t}={n}" for t, n in next_off.items()), flush=True)
    while True:
        t = rng.choice(topics)
        n = rng.choice([1, 1, 2, 7, 50, 400])
        print(f"will {t} {n}", flush=True)
        if n == 1:  # one record per call: the stream handle's path (mapped write, no lock)
            first = w.append(t, payload(t, next_off[t]))
        else:
            first = w.append(t, [payload(t, next_off[t] + i) for i in range(n)])
        assert first == next_off[t]
        next_off[t] += n
        print(f"done {t} {first} {n}", flush=True)


if __name__ == "__main__":
    main()
