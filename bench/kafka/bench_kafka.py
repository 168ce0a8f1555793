"""How much does the Kafka wire cost? confluent-kafka producer and consumer throughput
against `walfs serve`, beside the engine's own append_batch and read in the same run.

    .venv/bin/python bench/kafka/bench_kafka.py [--quick] [--records-100 N] [--records-1k N] > out.json

Prints one JSON object. The listener runs in its own process (`walfs serve`, fsync
interval, acks=1), as it does in production; the engine figures come from this
process on a separate data directory.

Consume is measured with two clients, so that the figure is the server's and not one
client's loop: confluent-kafka's batch call (`consume(10000)`, records counted per batch)
and kcat (`-C -e -c N`, librdkafka in C, output to /dev/null), one after the other on
the same topic. Each figure comes with the CPU seconds the server and the client spent
(/proc/PID/stat; the client's includes librdkafka's threads): both sides of the wire.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

import walfs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import benchkit  # noqa: E402
from benchkit import process_cpu_seconds as cpu_seconds  # noqa: E402


def cpu_of(server: int, client: int | None = None) -> tuple[float, float]:
    return cpu_seconds(server), cpu_seconds(client if client is not None else os.getpid())


def rate(n: int, size: int, seconds: float) -> dict[str, float]:
    return {
        "records": n,
        "seconds": round(seconds, 3),
        "records_per_s": round(n / seconds),
        "mb_per_s": round(n * size / seconds / 1e6, 1),
    }


def engine(data_dir: Path, n: int, size: int) -> dict[str, Any]:
    payload = os.urandom(size)
    batch = 1000
    with walfs.Wal(str(data_dir), fsync="interval") as wal:
        append = benchkit.batch_append(wal)
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            append("bench", [payload] * min(batch, n - i))
        wal.sync()
        appended = time.perf_counter() - t0
        t0 = time.perf_counter()
        off = got = 0
        while got < n:
            vals = wal.read("bench", off, max_records=10_000)
            got += len(vals)
            off += len(vals)
        read = time.perf_counter() - t0
    return {"append_batch": rate(n, size, appended), "read": rate(n, size, read)}


def start_server(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "walfs.cli.serve",
            str(data_dir),
            "--kafka-listen",
            "127.0.0.1:0",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(walfs.__file__).resolve().parent.parent,  # `-m` imports walfs from the cwd first
    )
    assert proc.stdout is not None
    m = re.search(r"listening on (\S+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit("walfs serve did not start")
    return proc, m.group(1)


def kafka(bootstrap: str, topic: str, n: int, size: int, server: int) -> dict[str, Any]:
    payload = os.urandom(size)
    s0, c0 = cpu_of(server)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.01)  # local queue full: let deliveries drain
    if p.flush(300) != 0:
        raise SystemExit("producer did not flush")
    produced = time.perf_counter() - t0
    s1, c1 = cpu_of(server)

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    t0 = time.perf_counter()
    got = 0
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(10_000, 1.0)
        got += sum(1 for m in msgs if not m.error())
    consumed = time.perf_counter() - t0
    s2, c2 = cpu_of(server)
    c.close()
    if got < n:
        raise SystemExit(f"consumer got {got} of {n}")
    kcat, kcat_cpu = consume_with_kcat(bootstrap, topic, n, server)
    return {
        "produce": {
            **rate(n, size, produced),
            "server_cpu_s": round(s1 - s0, 2),
            "client_cpu_s": round(c1 - c0, 2),
        },
        "consume": {
            **rate(n, size, consumed),
            "server_cpu_s": round(s2 - s1, 2),
            "client_cpu_s": round(c2 - c1, 2),
        },
        "consume_kcat": {**rate(n, size, kcat), **kcat_cpu},
    }


def consume_with_kcat(bootstrap: str, topic: str, n: int, server: int) -> tuple[float, dict[str, float]]:
    """kcat reads the topic's n records from the start (librdkafka in C: the client's own
    cost per record is small next to the Python client's)."""
    cmd = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-c", str(n)]
    s0 = cpu_seconds(server)
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU figures
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"kcat failed ({proc.returncode})")
    return seconds, {
        "server_cpu_s": round(cpu_seconds(server) - s0, 2),
        "client_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records-100", type=int, default=200_000)
    ap.add_argument("--records-1k", type=int, default=100_000)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--quick", action="store_true", help="20,000 and 10,000 records: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.records_100, args.records_1k = 20_000, 10_000
    result: dict[str, Any] = {
        "run": benchkit.run_info(),
        "settings": {"fsync": "interval", "acks": "1", "producer_linger_ms": 5},
        "sizes": {},
    }
    with tempfile.TemporaryDirectory(prefix="walfs-bench-") as tmp:
        proc, bootstrap = start_server(Path(tmp) / "served")
        try:
            for label, size, n in (("100B", 100, args.records_100), ("1KiB", 1024, args.records_1k)):
                eng = engine(Path(tmp) / f"engine-{label}", n, size)
                wire = kafka(bootstrap, f"bench-{label}", n, size, proc.pid)
                result["sizes"][label] = {
                    "engine": eng,
                    "kafka": wire,
                    "wire_cost": {
                        "produce_vs_append_batch": round(
                            eng["append_batch"]["records_per_s"] / wire["produce"]["records_per_s"], 2
                        ),
                        "consume_vs_read": round(
                            eng["read"]["records_per_s"] / wire["consume"]["records_per_s"], 2
                        ),
                        "kcat_consume_vs_read": round(
                            eng["read"]["records_per_s"] / wire["consume_kcat"]["records_per_s"], 2
                        ),
                    },
                }
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    benchkit.write_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
