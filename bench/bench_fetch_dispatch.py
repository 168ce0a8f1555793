"""CPU of one Kafka fetch inside `walfs serve`, without a client or a socket: the Fetch
request a ConsumerPerformance sends (1 MiB per partition) dispatched as the listener
dispatches it (decode, read + batch build, worker thread or not, response encode), over
records in the page cache, and the process's CPU (every thread) divided by the fetches.
For before/after runs of the fetch path (it imports nothing newer than the listener's
`dispatch`, so an older tree runs it too):

    .venv/bin/python bench/ab_trees.py --old /work/main --new . --rounds 3 \\
        --out /tmp/ab-fetch.json -- bench/bench_fetch_dispatch.py

Each size: 8 MiB of records in 1 MiB produce batches, 50 warm-up fetches, then --fetches
fetches of 1 MiB cycling over the 8 MiB, each one from where the last ended (but the
first of each cycle), as a consumer asks. After each answer, what the listener runs once
an answer is out runs too (the read-ahead of walfs/kafka/fetch_ahead.py): `answer_us` is
the answers' own wall time, what a consumer waits for; `wall_us` and `cpu_us` count both.
The machine's other load moves the figures: compare trees within one run."""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from typing import Any

import trio

import walfs
from walfs.kafka.broker import Broker, Connection
from walfs.kafka.dispatch import SUPPORTED, dispatch
from walfs.wire.record_batch import WireRecord, batch_end, decode_for_append, encode_records_for_test

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_kafka_wire import fetch_frame  # noqa: E402

MIB = 1 << 20


def process_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_size(size: int, fetches: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="walfs-fetch-") as tmp,
        walfs.Wal(tmp, fsync="never", segment_size=64 * MIB, block_size=MIB) as wal,
    ):
        broker = Broker(wal.engine, api_versions=dict(SUPPORTED))  # as `walfs serve` runs it
        conn = Connection(peer="bench", host="127.0.0.1", port=0)
        per_batch = MIB // (size + 10)
        batch = encode_records_for_test([WireRecord(None, os.urandom(size), [], 1) for _ in range(per_batch)])
        for _ in range(8):
            bodies = decode_for_append(batch)
            assert bodies is not None
            wal.append_bodies("t", bodies.data, bodies.meta_lens, bodies.value_lens)
        wal.sync()
        # Each fetch from where the one before ended (a 1 MiB answer holds fewer records
        # than a 1 MiB produce batch: the last record that does not fit waits).
        starts = [0]
        end = wal.engine.info("t", 0).high_watermark
        while True:
            batch = wal.engine.read_kafka_batch("t", 0, starts[-1], end - starts[-1], MIB)
            nxt = batch_end(batch)
            if nxt >= end:
                break
            starts.append(nxt)
        frames = [fetch_frame("t", off, 7, MIB)[4:] for off in starts]

        answer_s = [0.0]  # the answers' time: what the consumer waits for

        async def run(n: int) -> None:
            for i in range(n):
                t = time.perf_counter()
                await dispatch(broker, conn, frames[i % len(frames)])
                answer_s[0] += time.perf_counter() - t
                # What the listener runs once the answer is out (the read-ahead of
                # walfs/kafka/fetch_ahead.py; trees before it leave nothing).
                job = getattr(conn, "after_answer", None)
                if job is not None:
                    conn.after_answer = None
                    job()

        trio.run(run, 50)
        answer_s[0] = 0.0
        c0, t0 = process_cpu(), time.perf_counter()
        trio.run(run, fetches)
        cpu, wall = process_cpu() - c0, time.perf_counter() - t0
    return {
        "record_bytes": size,
        "fetches": fetches,
        "cpu_us_per_fetch": round(cpu / fetches * 1e6, 1),
        "wall_us_per_fetch": round(wall / fetches * 1e6, 1),
        "answer_us_per_fetch": round(answer_s[0] / fetches * 1e6, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,16384", help="record sizes in bytes")
    ap.add_argument("--fetches", type=int, default=400)
    ap.add_argument("--out", help="write the JSON here (else stdout)")
    args = ap.parse_args()
    results = [one_size(int(s), args.fetches) for s in args.sizes.split(",")]
    for r in results:
        print(
            f"{r['record_bytes']:6d} B: {r['cpu_us_per_fetch']:8.1f} us CPU, "
            f"{r['wall_us_per_fetch']:8.1f} us wall per 1 MiB fetch, "
            f"{r['answer_us_per_fetch']:8.1f} us of it answering",
            file=sys.stderr,
        )
    doc = {"bench": "fetch_dispatch", "loadavg": os.getloadavg(), "results": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    else:
        json.dump(doc, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
