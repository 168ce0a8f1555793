"""Turns of trio's run loop per Kafka fetch inside the listener: a trio Instrument counts
task steps and I/O waits (each an `epoll_wait`) while a raw-socket client sends Fetch
requests one at a time, as the Java consumer does (1 MiB each, over 64 MiB of 1 KiB
records in the page cache). A count, not a time: the machine's load does not move it.
For before/after runs (it imports nothing newer than `serve_kafka`):

    .venv/bin/python bench/ab_trees.py --old OLD_TREE --new . --rounds 1 --out /tmp/turns.json \\
        -- bench/fetch_loop_turns.py
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time

import trio

import walfs
from walfs.kafka.listener import serve_kafka

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_kafka_wire import fetch_frame, recv_frame  # noqa: E402

MIB = 1 << 20


class Turns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0
        self.waits = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def before_io_wait(self, timeout: float) -> None:
        self.waits += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fetches", type=int, default=200)
    ap.add_argument("--out", help="write the JSON here (else stdout)")
    args = ap.parse_args()
    turns = Turns()
    with (
        tempfile.TemporaryDirectory(prefix="walfs-turns-") as tmp,
        walfs.Wal(tmp, fsync="never", segment_size=64 * MIB, block_size=MIB) as wal,
    ):
        for _ in range(64):
            wal.append_batch("t", [os.urandom(1024) for _ in range(1000)])
        wal.sync()
        ports: list[int] = []
        done = threading.Event()

        async def serve() -> None:
            async with trio.open_nursery() as nursery:
                ports.append(await nursery.start(serve_kafka, wal.engine, "127.0.0.1", 0))
                await trio.to_thread.run_sync(done.wait)
                nursery.cancel_scope.cancel()

        server = threading.Thread(target=lambda: trio.run(serve, instruments=[turns]))
        server.start()
        try:
            while not ports:
                time.sleep(0.01)
            with socket.create_connection(("127.0.0.1", ports[0])) as s:
                s.sendall(fetch_frame("t", 0, 1, MIB))
                recv_frame(s)
                steps, waits = turns.steps, turns.waits
                for i in range(args.fetches):
                    s.sendall(fetch_frame("t", (i * 1000) % 60_000, i + 2, MIB))
                    recv_frame(s)
                steps, waits = turns.steps - steps, turns.waits - waits
        finally:
            done.set()
            server.join()
    doc = {
        "bench": "fetch_loop_turns",
        "fetches": args.fetches,
        "task_steps_per_fetch": round(steps / args.fetches, 2),
        "io_waits_per_fetch": round(waits / args.fetches, 2),
    }
    print(
        f"{doc['task_steps_per_fetch']} task steps, {doc['io_waits_per_fetch']} loop waits per fetch",
        file=sys.stderr,
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    else:
        print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
