"""The Fetch round trip as a consumer sees it, against `walfs serve` and Apache Kafka in one
run: a raw-socket client replays what Kafka's Java consumer (ConsumerPerformance) sends -
one fetch in flight, fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB, max wait
500 ms, min bytes 1, a 64 KiB receive buffer (receive.buffer.bytes) - and times every
response: request sent -> first byte -> last byte. Per server and record size it reports
the medians and p90 of those times, bytes and whole records per response (Kafka may end a
response with a partial batch, which the client drops), responses per second, the
client's recv calls per response, the server's CPU per response (/proc) and the server
socket's buffers as `ss -tmi` shows them (skmem: rb = receive, tb = send buffer).

    .venv/bin/python bench/kafka/bench_fetch_rtt.py --sizes 1024,16384 --mib 64 --out rtt.json
    .venv/bin/python bench/kafka/bench_fetch_rtt.py --servers walfs --mib 32      # no JVM
    .venv/bin/python bench/ab_trees.py --old OLD_TREE --new . --rounds 3 --out ab.json \\
        -- bench/kafka/bench_fetch_rtt.py --servers walfs --mib 32

Records are produced with raw produce requests of ~1 MiB batches (acks=1, as
ProducerPerformance's batch.size=1 MiB makes them), before the clock starts; the walfs
server runs `--fsync never` (Kafka's default does not fsync either), or the policy --fsync
names (`always` writes the log as the flush1 pair's server does: each request's records
synced before its answer)."""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import benchkit  # noqa: E402
from bench_kafka_wire import (  # noqa: E402
    FETCH_V,
    PRODUCE_V,
    Server,
    cpu_seconds,
    decode_response,
    fetch_frame,
    produce_frame,
    recv_frame,
)
from bench_vs_kafka import create_topic  # noqa: E402

from walfs.wire.record_batch import LOG_OVERHEAD, WireRecord, encode_records_for_test, header_field  # noqa: E402

JAVA_RCVBUF = 64 * 1024  # the Java consumer's receive.buffer.bytes


def whole_batches(records: bytes | memoryview) -> tuple[int, int, int]:
    """(records in whole batches, next offset, bytes of a partial last batch)."""
    view = memoryview(records)
    pos = count = 0
    nxt = -1
    while pos + LOG_OVERHEAD <= len(view):
        length = header_field(view, "batch_length", pos)
        if pos + LOG_OVERHEAD + length > len(view):
            break
        count += header_field(view, "last_offset_delta", pos) + 1
        nxt = header_field(view, "base_offset", pos) + header_field(view, "last_offset_delta", pos) + 1
        pos += LOG_OVERHEAD + length
    return count, nxt, len(view) - pos


def timed_fetch(s: socket.socket, frame: bytes) -> tuple[float, float, int, memoryview]:
    """(seconds to the first byte, seconds to the last, recv calls, payload)."""
    t0 = time.perf_counter()
    s.sendall(frame)
    head = bytearray(4)
    got = s.recv_into(head)
    t1 = time.perf_counter()
    if not got:
        raise ConnectionError("server closed the connection")
    calls = 1
    while got < 4:
        n = s.recv_into(memoryview(head)[got:])
        if not n:
            raise ConnectionError("server closed the connection")
        got += n
        calls += 1
    (size,) = struct.unpack(">i", head)
    body = bytearray(size)
    view = memoryview(body)
    got = 0
    while got < size:
        n = s.recv_into(view[got:])
        if not n:
            raise ConnectionError("server closed the connection")
        got += n
        calls += 1
    return t1 - t0, time.perf_counter() - t0, calls, view.toreadonly()


def socket_view(port: int) -> str:
    """`ss -tmi` of the server side of connections on `port` (skmem, cwnd, ...)."""
    out = subprocess.run(
        ["ss", "-tmin", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    return " ".join(out.split()[5:]) if out else ""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_one(name: str, host: str, port: int, pid: int, size: int, mib: int, rcvbuf: int) -> dict[str, Any]:
    n = max(1, (1 << 20) // (size + 12))  # records per ~1 MiB produced batch
    requests = max(1, (mib << 20) // (n * size))
    topic = f"rtt{size}"
    create_topic(f"{host}:{port}", topic, {})
    batch = encode_records_for_test(
        [WireRecord(None, os.urandom(size), [], int(time.time() * 1000)) for _ in range(n)]
    )
    with socket.create_connection((host, port), timeout=60) as s:
        for i in range(requests):
            s.sendall(produce_frame(topic, batch, 1, i))
            resp = decode_response(0, PRODUCE_V, recv_frame(s))
            code = int(resp.responses[0].partition_responses[0].error_code)
            if code:
                raise RuntimeError(f"{name}: produce failed with error {code}")
    end = n * requests
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect, as Java
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(60)
        s.connect((host, port))
        offset, cid = 0, 1
        first: list[float] = []
        total: list[float] = []
        calls: list[int] = []
        sizes: list[int] = []
        records: list[int] = []
        partial: list[int] = []
        ss = ""
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        while offset < end:
            f, t, c, payload = timed_fetch(s, fetch_frame(topic, offset, cid))
            cid += 1
            part = decode_response(1, FETCH_V, payload).responses[0].partitions[0]
            if int(part.error_code):
                raise RuntimeError(f"{name}: fetch failed with error {int(part.error_code)}")
            got, nxt, tail = whole_batches(part.records or b"")
            if got == 0:
                continue
            first.append(f)
            total.append(t)
            calls.append(c)
            sizes.append(len(payload) + 4)
            records.append(got)
            partial.append(tail)
            offset = nxt
            if not ss:
                ss = socket_view(port)
        wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    us = 1e6
    return {
        "server": name,
        "record_bytes": size,
        "records": end,
        "responses": len(total),
        "responses_per_s": round(len(total) / wall, 1),
        "records_per_s": round(end / wall),
        "first_byte_us": {"p50": round(statistics.median(first) * us), "p90": round(pct(first, 0.9) * us)},
        "last_byte_us": {"p50": round(statistics.median(total) * us), "p90": round(pct(total, 0.9) * us)},
        "transfer_us_p50": round(statistics.median([b - a for a, b in zip(first, total, strict=True)]) * us),
        "response_bytes_p50": statistics.median(sizes),
        "records_per_response_p50": statistics.median(records),
        "partial_batch_bytes_p50": statistics.median(partial),
        "recv_calls_per_response_p50": statistics.median(calls),
        "server_cpu_us_per_response": round(cpu / len(total) * us),
        "server_socket": ss,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,16384", help="record sizes in bytes")
    ap.add_argument("--mib", type=int, default=64, help="MiB of records per size")
    ap.add_argument("--servers", default="walfs,kafka", help="walfs, kafka or both")
    ap.add_argument("--rcvbuf", type=int, default=JAVA_RCVBUF, help="client SO_RCVBUF (0: kernel default)")
    ap.add_argument(
        "--fsync", choices=("never", "always", "interval"), default="never", help="walfs serve's policy"
    )
    ap.add_argument("--out", help="write the JSON here (else stdout)")
    ap.add_argument("--quick", action="store_true", help="8 MiB per size: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.mib = 8
    servers = args.servers.split(",")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="walfs-rtt-") as tmp:
        walfs = Server(os.path.join(tmp, "data"), args.fsync) if "walfs" in servers else None
        kafka = None
        try:
            if "kafka" in servers:
                from real_kafka import KafkaBroker

                kafka = KafkaBroker(heap="1g").start()
            for size in (int(x) for x in args.sizes.split(",")):
                # Alternating, the order flipping with the size.
                order = [("walfs", walfs), ("kafka", kafka)]
                if size % 2:
                    order.reverse()
                for name, srv in order:
                    if srv is None:
                        continue
                    if name == "walfs":
                        assert walfs is not None
                        port, pid = walfs.port, walfs.proc.pid
                    else:
                        assert kafka is not None and kafka.proc is not None
                        port, pid = kafka.port, kafka.proc.pid
                    r = run_one(name, "127.0.0.1", port, pid, size, args.mib, args.rcvbuf)
                    results.append(r)
                    print(
                        f"{name:>5} {size:>6} B: {r['responses_per_s']} resp/s, {r['records_per_s']} rec/s, "
                        f"first byte {r['first_byte_us']['p50']} us, last {r['last_byte_us']['p50']} us "
                        f"(p90 {r['last_byte_us']['p90']}), {r['response_bytes_p50']} B and "
                        f"{r['records_per_response_p50']} records per response (partial "
                        f"{r['partial_batch_bytes_p50']} B), {r['recv_calls_per_response_p50']} recvs, "
                        f"server {r['server_cpu_us_per_response']} us CPU; {r['server_socket']}",
                        file=sys.stderr,
                    )
        finally:
            if walfs is not None:
                walfs.stop()
            if kafka is not None:
                kafka.stop()
    out = {
        "run": benchkit.run_info(),
        "bench": "fetch_rtt",
        "rcvbuf": args.rcvbuf,
        "fsync": args.fsync,
        "results": results,
    }
    benchkit.write_json(out, args.out, stdout=not args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
