"""What the Kafka face of `walfs serve` costs per byte, with the client taken out: a raw
socket client sends produce requests of one ~1 MiB v2 batch each (built once, before the
clock starts, as ProducerPerformance sends them with batch.size=1 MiB) with five in
flight, then fetches everything back with one fetch in flight and 1 MiB per partition
(ConsumerPerformance's defaults). Per record size it reports MB/s and the server's CPU
seconds per GB of records (/proc/PID/stat, all its threads): the figure the copies on the
produce and fetch paths move, and the one that stays steady on a shared machine.

    .venv/bin/python bench/kafka/bench_kafka_wire.py --sizes 1024,16384 --mib 256 --out wire.json
    .venv/bin/python bench/ab_trees.py --old /path/to/main --new . --rounds 3 --out ab.json \\
        -- bench/kafka/bench_kafka_wire.py --mib 128

The server is `python -m walfs.cli.serve` of the tree under test (PYTHONPATH), with
`--fsync never` and acks=1 by default, so that no fsync is timed (--acks all adds the
listener's sync rounds). --connections N produces over N connections at once, each with
five in flight and its share of the requests (four ProducerPerformance processes, without
their CPU)."""

from __future__ import annotations

import argparse
import datetime
import io
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from walfs.kafka.messages import build

try:
    from walfs.wire.record_batch import WireRecord, encode_records_for_test
except ImportError:  # a tree before issue 34 (bench/ab_trees.py runs this script on both)
    from walfs.kafka.record_batch import WireRecord, encode_records_for_test  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import benchkit  # noqa: E402
from benchkit import process_cpu_seconds as cpu_seconds  # noqa: E402

PRODUCE_V, FETCH_V = 9, 12
IN_FLIGHT = 5  # the Java producer's max.in.flight.requests.per.connection


def request(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    header_cls = type(body).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="wire",
        ),
    )
    entity_writer(type(body))(buf, body)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def produce_frame(topic: str, batch: bytes, acks: int, correlation_id: int) -> bytes:
    m = load_payload_module(0, PRODUCE_V, EntityType.request)
    req = build(
        m.ProduceRequest,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            build(
                m.TopicProduceData,
                name=topic,
                partition_data=(build(m.PartitionProduceData, index=0, records=batch),),
            ),
        ),
    )
    return request(0, PRODUCE_V, correlation_id, req)


def fetch_frame(topic: str, offset: int, correlation_id: int, max_bytes: int = 1 << 20) -> bytes:
    m = load_payload_module(1, FETCH_V, EntityType.request)
    part = build(
        m.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    req = build(
        m.FetchRequest,
        cluster_id=None,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(build(m.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    return request(1, FETCH_V, correlation_id, req)


def recv_frame(s: socket.socket) -> memoryview:
    head = bytearray(4)
    view = memoryview(head)
    got = 0
    while got < 4:
        n = s.recv_into(view[got:])
        if not n:
            raise ConnectionError("server closed the connection")
        got += n
    (size,) = struct.unpack(">i", head)
    body = bytearray(size)
    view = memoryview(body)
    got = 0
    while got < size:
        n = s.recv_into(view[got:])
        if not n:
            raise ConnectionError("server closed the connection")
        got += n
    return view.toreadonly()


def decode_response(api_key: int, version: int, frame: memoryview) -> Any:
    cls = load_payload_module(api_key, version, EntityType.response)
    name = {0: "ProduceResponse", 1: "FetchResponse"}[api_key]
    resp_cls = getattr(cls, name)
    _header, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(resp_cls)(frame, used)
    return body


class Server:
    def __init__(self, data_dir: str, fsync: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "walfs.cli.serve",
                data_dir,
                "--kafka-listen",
                "127.0.0.1:0",
                "--fsync",
                fsync,
                "--segment-size",
                "256M",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            # Not the repository: `-m` puts the working directory first on sys.path, and
            # the walfs under test is the one PYTHONPATH names (bench/ab_trees.py).
            cwd=os.path.dirname(data_dir),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"walfs serve did not start: {line!r}")
        self.port = int(m.group(1))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def produce_on(s: socket.socket, frames: list[bytes], acks: int) -> None:
    """Sends the frames on one connection with IN_FLIGHT in flight and reads every answer."""
    sent = answered = 0
    while answered < len(frames):
        while sent < len(frames) and sent - answered < IN_FLIGHT:
            s.sendall(frames[sent])
            sent += 1
        if acks == 0:
            answered = sent
            continue
        resp = decode_response(0, PRODUCE_V, recv_frame(s))
        code = int(resp.responses[0].partition_responses[0].error_code)
        if code:
            raise RuntimeError(f"produce failed with error {code}")
        answered += 1


def produce_share(port: int, frames: list[bytes], acks: int, errors: list[BaseException]) -> None:
    """produce_on over a connection of its own (a thread of --connections)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            produce_on(s, frames, acks)
    except BaseException as e:
        errors.append(e)


def run_size(size: int, mib: int, acks: int, fsync: str, connections: int = 1) -> dict[str, Any]:
    n = max(1, (1 << 20) // (size + 12))  # records per ~1 MiB batch
    requests = max(1, (mib << 20) // (n * size))
    value = os.urandom(size)
    batch = encode_records_for_test([WireRecord(None, value, [], int(time.time() * 1000)) for _ in range(n)])
    topic = f"wire{size}"
    frames = [produce_frame(topic, batch, acks, i) for i in range(requests)]
    total = n * requests
    with tempfile.TemporaryDirectory(prefix="walfs-wire-") as tmp:
        srv = Server(os.path.join(tmp, "data"), fsync)
        try:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # Warm-up: the topic exists and the first request's one-time costs are paid.
                s.sendall(produce_frame(topic, batch, 1, 0))
                decode_response(0, PRODUCE_V, recv_frame(s))
                c0, t0 = cpu_seconds(srv.proc.pid), time.perf_counter()
                if connections == 1:
                    produce_on(s, frames, acks)
                else:  # each connection its share of the requests, all at once
                    shares = [frames[i::connections] for i in range(connections)]
                    errors: list[BaseException] = []
                    threads = [
                        threading.Thread(target=produce_share, args=(srv.port, share, acks, errors))
                        for share in shares
                    ]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    if errors:
                        raise errors[0]
                produce_s, produce_cpu = time.perf_counter() - t0, cpu_seconds(srv.proc.pid) - c0
                end = total + n  # with the warm-up batch
                offset, fetched, cid = 0, 0, 1
                c0, t0 = cpu_seconds(srv.proc.pid), time.perf_counter()
                while offset < end:
                    s.sendall(fetch_frame(topic, offset, cid))
                    cid += 1
                    part = decode_response(1, FETCH_V, recv_frame(s)).responses[0].partitions[0]
                    if int(part.error_code):
                        raise RuntimeError(f"fetch failed with error {int(part.error_code)}")
                    records = part.records or b""
                    if not records:
                        continue
                    base = struct.unpack_from(">q", records, 0)[0]
                    last_delta = struct.unpack_from(">i", records, 23)[0]
                    fetched += len(records)
                    offset = base + last_delta + 1
                fetch_s, fetch_cpu = time.perf_counter() - t0, cpu_seconds(srv.proc.pid) - c0
        finally:
            srv.stop()
    produced_bytes = total * size
    return {
        "record_bytes": size,
        "records_per_request": n,
        "produce": {
            "connections": connections,
            "requests": requests,
            "records": total,
            "mb_per_s": round(produced_bytes / produce_s / 1e6, 1),
            "server_cpu_s_per_gb": round(produce_cpu / produced_bytes * 1e9, 2),
        },
        "fetch": {
            "records": end,
            "response_bytes": fetched,
            "mb_per_s": round(end * size / fetch_s / 1e6, 1),
            "server_cpu_s_per_gb": round(fetch_cpu / (end * size) * 1e9, 2),
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,16384", help="record sizes in bytes")
    ap.add_argument("--mib", type=int, default=256, help="MiB of records produced (and fetched) per size")
    ap.add_argument("--acks", choices=("0", "1", "all"), default="1")
    ap.add_argument("--fsync", choices=("never", "interval", "always"), default="never")
    ap.add_argument(
        "--connections", type=int, default=1, help="produce over this many connections at once (fetch: one)"
    )
    ap.add_argument("--out", help="write the JSON here (else stdout)")
    ap.add_argument("--quick", action="store_true", help="16 MiB per size: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.mib = 16
    acks = -1 if args.acks == "all" else int(args.acks)
    results = [run_size(int(s), args.mib, acks, args.fsync, args.connections) for s in args.sizes.split(",")]
    out = {
        "run": benchkit.run_info(),
        "bench": "kafka_wire",
        "acks": args.acks,
        "fsync": args.fsync,
        "results": results,
    }
    benchkit.write_json(out, args.out, stdout=not args.out)
    for r in results:
        print(
            f"{r['record_bytes']:>6} B: produce {r['produce']['mb_per_s']} MB/s, "
            f"{r['produce']['server_cpu_s_per_gb']} CPU s/GB; fetch {r['fetch']['mb_per_s']} MB/s, "
            f"{r['fetch']['server_cpu_s_per_gb']} CPU s/GB",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
