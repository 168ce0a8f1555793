"""Where a Kafka produce and a Kafka fetch spend their time inside `walfs serve`, stage by
stage, without a client or a socket: the request frames are built here (as Kafka's
ProducerPerformance sends them: one v2 batch of N records, no key, producer timestamps)
and each stage of the listener's path is timed on its own, then the whole `dispatch`.

    .venv/bin/python bench/profile_kafka_paths.py            # 100 B and 16 KiB records
    .venv/bin/python bench/profile_kafka_paths.py --json     # the same as JSON

Produce stages: frame copy (the listener's read buffer into the request), request
decode (kio), batch CRC, record split (C), the whole check and split of an idempotent
producer's batch as the produce handler does it (`decode_for_append` and the producer
section added to the first record), append, sync (the acks=all fsync), response encode.
Fetch stages: request decode, read + batch build (C), response encode, frame,
the whole dispatch (wall time, and CPU of all threads: the read runs on the event loop
or in a worker thread, walfs/kafka/fetch.py). Each figure is the median of --repeat
calls (the CPU figure a mean), in microseconds per request and nanoseconds per record;
the machine's other load moves them, so compare stages within one run. malloc is set as
`walfs serve` sets it (walfs/cli/malloc_tuning.py). --out writes the JSON to a file (for
bench/ab_trees.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import trio
from crc32c import crc32c

import walfs
from walfs.cli.malloc_tuning import keep_freed_buffers
from walfs.engine.records import with_producer
from walfs.kafka.api import Later
from walfs.kafka.broker import Broker, Connection
from walfs.kafka.dispatch import SUPPORTED, dispatch
from walfs.kafka.framing import frame
from walfs.kafka.messages import decode_request
from walfs.wire.batch_codec import decode_kafka_records
from walfs.wire.record_batch import (
    BATCH_OVERHEAD,
    CRC_START,
    WireRecord,
    decode_for_append,
    encode_records_for_test,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_kafka_wire import FETCH_V, PRODUCE_V, fetch_frame, produce_frame  # noqa: E402


def produce_request(topic: str, batch: bytes) -> bytes:
    return produce_frame(topic, batch, -1, 7)[4:]  # a request without its size


def fetch_request(topic: str, offset: int, max_bytes: int) -> bytes:
    return fetch_frame(topic, offset, 7, max_bytes)[4:]


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of fn() over repeat calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def process_cpu() -> float:
    """CPU seconds of this process, every thread (the worker threads' reads included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed_dispatch(broker: Broker, payload: bytes, repeat: int, cpu: list[float] | None = None) -> float:
    """Median seconds of one `dispatch` of payload, all calls in one trio run; appends the
    mean CPU seconds per call (all threads) to `cpu` when given."""
    conn = Connection(peer="prof", host="127.0.0.1", port=0)

    async def one() -> None:
        response = await dispatch(broker, conn, payload)
        if isinstance(response, Later):  # acks=all: the answer after the sync
            await response.finish()

    async def run() -> float:
        await one()
        times = []
        c0 = process_cpu()
        for _ in range(repeat):
            t0 = time.perf_counter()
            await one()
            times.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append((process_cpu() - c0) / repeat)
        return statistics.median(times)

    return trio.run(run)


def profile(size: int, batch_bytes: int, repeat: int, data_dir: str) -> dict[str, Any]:
    n = max(1, batch_bytes // (size + 10))
    value = os.urandom(size)
    now = int(time.time() * 1000)
    batch = encode_records_for_test([WireRecord(None, value, [], now) for _ in range(n)])
    # What ProducerPerformance sends since Kafka 3.0: an idempotent producer's batch.
    records = [WireRecord(None, value, [], now) for _ in range(n)]
    idempotent = encode_records_for_test(records, producer=(7, 0, 0))
    produce = produce_request("prof", batch)
    out: dict[str, Any] = {"record_bytes": size, "records_per_request": n, "request_bytes": len(produce)}
    stages: dict[str, float] = {}
    with walfs.Wal(data_dir, fsync="never") as wal:
        broker = Broker(wal.engine, api_versions=dict(SUPPORTED))  # as `walfs serve` runs it
        conn = Connection(peer="prof", host="127.0.0.1", port=0)
        wire = bytearray(len(produce).to_bytes(4, "big") + produce)
        stages["produce.frame_copy"] = timed(lambda: bytes(wire[4:]), repeat)
        stages["produce.decode_request"] = timed(lambda: decode_request(0, PRODUCE_V, produce), repeat)
        body = batch[BATCH_OVERHEAD:]
        stages["produce.batch_crc"] = timed(lambda: crc32c(batch[CRC_START:]), repeat)
        stages["produce.record_split"] = timed(lambda: decode_kafka_records(body, n, now), repeat)
        stages["produce.split_idempotent"] = timed(lambda: split_idempotent(idempotent, n), repeat)
        produced = decode_for_append(batch)
        assert produced is not None
        stages["produce.append"] = timed(
            lambda: wal.append_bodies("prof", produced.data, produced.meta_lens, produced.value_lens), repeat
        )

        def append_sync() -> None:
            wal.append_bodies("prof", produced.data, produced.meta_lens, produced.value_lens)
            wal.sync()

        stages["produce.append_and_sync"] = timed(append_sync, repeat)
        stages["produce.dispatch_whole"] = timed_dispatch(broker, produce, repeat)
        wal.sync()
        # Fetch: 1 MiB per partition, as ConsumerPerformance's default --fetch-size asks.
        fetch = fetch_request("prof", 0, 1 << 20)
        stages["fetch.decode_request"] = timed(lambda: decode_request(1, FETCH_V, fetch), repeat)
        stages["fetch.read_and_build"] = timed(
            lambda: wal.engine.read_kafka_batch("prof", 0, 0, 100_000, 1 << 20), repeat
        )
        records = wal.engine.read_kafka_batch("prof", 0, 0, 100_000, 1 << 20)

        async def one_fetch() -> bytes | None:
            return await dispatch(broker, conn, fetch)

        fetched = trio.run(one_fetch)
        assert fetched is not None and not isinstance(fetched, Later)
        if isinstance(fetched, bytes):
            stages["fetch.frame"] = timed(lambda: frame(fetched), repeat)
        else:  # the batch is sent as it is, by reference (framing.send_frame): no frame copy
            fetched = b"".join(fetched)
        cpu: list[float] = []
        stages["fetch.dispatch_whole"] = timed_dispatch(broker, fetch, repeat, cpu)
        stages["fetch.dispatch_cpu"] = cpu[0]  # mean CPU per fetch, the worker thread's too
        out["fetch_records"] = int.from_bytes(bytes(records[57:61]), "big")
        out["fetch_response_bytes"] = len(fetched)
    out["us_per_request"] = {k: round(v * 1e6, 1) for k, v in stages.items()}
    out["ns_per_record"] = {
        k: round(v * 1e9 / (n if k.startswith("produce") else out["fetch_records"]), 1)
        for k, v in stages.items()
    }
    return out


def split_idempotent(batch: bytes, n: int) -> None:
    """decode_for_append and the producer section, as walfs/kafka/produce.py adds it."""
    produced = decode_for_append(batch)
    assert produced is not None
    if hasattr(produced, "add_producer"):
        produced.add_producer((7, 0, 0, n))
    else:  # a tree before h/kprod (bench/ab_trees.py runs this script against it)
        m0 = produced.meta_lens[0]
        meta = with_producer(bytes(produced.data[:m0]), (7, 0, 0, n))
        produced.data[:m0] = meta
        produced.meta_lens[0] = len(meta)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,16384", help="record sizes in bytes")
    ap.add_argument("--batch-bytes", type=int, default=1 << 20, help="bytes per produce batch (batch.size)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="write the JSON to this file")
    args = ap.parse_args()
    keep_freed_buffers()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="walfs-prof-") as tmp:
            results.append(profile(size, args.batch_bytes, args.repeat, tmp))
    doc = {"loadavg": os.getloadavg(), "results": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    for r in results:
        print(
            f"{r['record_bytes']} B records, {r['records_per_request']} per produce request "
            f"({r['request_bytes']} bytes); fetch of {r['fetch_records']} records "
            f"({r['fetch_response_bytes']} bytes)"
        )
        for k, us in r["us_per_request"].items():
            print(f"  {k:28s} {us:10.1f} us/request {r['ns_per_record'][k]:10.1f} ns/record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
