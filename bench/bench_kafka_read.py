"""CPU per record of the fetch's C read alone (walfs_read_kafka_batch: every stored record
located and CRC-checked, its meta parsed, the Kafka v2 batch written and its CRC), called
in a tight loop through cffi with one output buffer reused (no Python dispatch, no
allocation, no socket): what perf attributes to the C core per fetch, for
before/after runs of csrc/kafka_batch.c and csrc/reader.c:

    .venv/bin/python bench/ab_trees.py --old /work/main --new . --rounds 4 \\
        --out /tmp/ab-kread.json -- bench/bench_kafka_read.py

Each size: 8 MiB of records (1 MiB produce batches, as a producer with timestamps sends
them: meta = producer timestamp, no key, no header), in the page cache, then --fetches
reads of up to 1 MiB cycling over the 8 MiB, each from where the last ended. `--shape
mixed` stores records with keys, headers and tombstones instead (the general path).
The machine's other load moves the figures: compare trees within one run."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

from walfs._core import ffi, lib

import walfs
from walfs.wire.record_batch import (
    BATCH_OVERHEAD,
    WireRecord,
    batch_end,
    decode_for_append,
    encode_records_for_test,
    header_field,
)

MIB = 1 << 20


def thread_cpu() -> float:
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


def records(size: int, shape: str, n: int) -> list[WireRecord]:
    if shape == "plain":
        return [WireRecord(None, os.urandom(size), [], 1_700_000_000_000 + i) for i in range(n)]
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else os.urandom(size)
        headers = [] if i % 2 else [("h", b"v%d" % i), ("trace", None)]
        out.append(WireRecord(key, value, headers, 1_700_000_000_000 + i))
    return out


def fill(tmp: str, size: int, shape: str, mib: int) -> None:
    with walfs.Wal(tmp, fsync="never", segment_size=64 * MIB, block_size=MIB) as wal:
        per_batch = MIB // (size + 40)
        for _ in range(mib):
            bodies = decode_for_append(encode_records_for_test(records(size, shape, per_batch)))
            assert bodies is not None
            wal.append_bodies("t", bodies.data, bodies.meta_lens, bodies.value_lens)
        wal.sync()


def read_loop(tmp: str, fetches: int, cold: bool) -> tuple[float, float, int, int]:
    """(CPU s, wall s, records, fetches) of the timed reads, in a freshly opened log."""
    with walfs.Wal(tmp, fsync="never", segment_size=64 * MIB, block_size=MIB) as wal:
        engine = wal.engine
        stream_no = engine._stream("t", 0, False).stream_no  # type: ignore[attr-defined]
        h = engine.core._enter()  # type: ignore[attr-defined]
        try:
            end = engine.info("t", 0).high_watermark
            outlen = MIB + 4096
            out = ffi.new("uint8_t[]", outlen)
            needed = ffi.new("uint64_t *")
            if (
                cold
            ):  # one pass over the log, each fetch from where the last ended: every page touched first here
                n_recs = done = 0
                off = 0
                c0, t0 = thread_cpu(), time.perf_counter()
                while off < end:
                    rc = lib.walfs_read_kafka_batch(h, stream_no, off, end - off, MIB, out, outlen, needed)
                    assert rc > 0, rc
                    n = header_field(ffi.buffer(out, BATCH_OVERHEAD), "record_count")
                    n_recs += n
                    off += n
                    done += 1
                return thread_cpu() - c0, time.perf_counter() - t0, n_recs, done
            starts, counts = [0], []
            while True:
                s = starts[-1]
                rc = lib.walfs_read_kafka_batch(h, stream_no, s, end - s, MIB, out, outlen, needed)
                assert rc > 0, rc
                batch = ffi.buffer(out, rc)[:]
                counts.append(header_field(batch, "record_count"))
                nxt = batch_end(batch)
                if nxt >= end:
                    break
                starts.append(nxt)
            plan = [(s, end - s) for s in starts]
            for i in range(50):
                s, m = plan[i % len(plan)]
                lib.walfs_read_kafka_batch(h, stream_no, s, m, MIB, out, outlen, needed)
            n_recs = 0
            c0, t0 = thread_cpu(), time.perf_counter()
            for i in range(fetches):
                s, m = plan[i % len(plan)]
                lib.walfs_read_kafka_batch(h, stream_no, s, m, MIB, out, outlen, needed)
                n_recs += counts[i % len(plan)]
            return thread_cpu() - c0, time.perf_counter() - t0, n_recs, fetches
        finally:
            engine.core._exit()  # type: ignore[attr-defined]


def one_size(size: int, fetches: int, shape: str, cold_mib: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="walfs-kread-") as tmp:
        fill(tmp, size, shape, cold_mib or 8)
        cpu = wall = 0.0
        n_recs = n_fetches = 0
        for _ in range(3 if cold_mib else 1):  # cold: three passes, each in a log opened anew
            c, w, r, f = read_loop(tmp, fetches, bool(cold_mib))
            cpu, wall, n_recs, n_fetches = cpu + c, wall + w, n_recs + r, n_fetches + f
    return {
        "record_bytes": size,
        "shape": shape,
        "map": "first touch" if cold_mib else "warm",
        "fetches": n_fetches,
        "records_per_fetch": round(n_recs / n_fetches, 1),
        "cpu_us_per_fetch": round(cpu / n_fetches * 1e6, 1),
        "wall_us_per_fetch": round(wall / n_fetches * 1e6, 1),
        "cpu_ns_per_record": round(cpu / n_recs * 1e9, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,100", help="record sizes in bytes")
    ap.add_argument("--fetches", type=int, default=3000)
    ap.add_argument("--shape", choices=["plain", "mixed"], default="plain")
    ap.add_argument(
        "--cold-mib",
        type=int,
        default=0,
        help="instead: a log of this many MiB (in the page cache), read through once in each of "
        "three freshly opened logs (each page of the map first touched by a read, as in a live consume)",
    )
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    results = [one_size(int(s), args.fetches, args.shape, args.cold_mib) for s in args.sizes.split(",")]
    for r in results:
        print(
            f"{r['record_bytes']:6d} B {r['shape']} {r['map']}: "
            f"{r['cpu_us_per_fetch']:8.1f} us CPU per 1 MiB read "
            f"({r['records_per_fetch']} records), {r['cpu_ns_per_record']:6.1f} ns per record",
            file=sys.stderr,
        )
    if args.out:  # the lines above are the report; the JSON is for bench/ab_trees.py
        with open(args.out, "w") as f:
            json.dump({"bench": "kafka_read", "loadavg": os.getloadavg(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
