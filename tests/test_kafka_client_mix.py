"""Every client at once against one `walfs serve` (issue 12): kcat (lz4), confluent-kafka
(zstd, idempotent), kafka-python (gzip), aiokafka (snappy) and KafkaJS (every codec, a
group, its admin client) produce at the same time while a raw client sends requests walfs
does not support. The listener answers those with Kafka's error codes, keeps serving, and
the WAL holds every record each client was told was written, once and in order."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

from kafka_harness import REPO, SMALL_WAL_ARGS, ServeProcess, check_alive, raw_connect, recv_frame

import walfs

N = 2000
JS = REPO / "tests" / "js"

PRODUCERS = {
    "confluent": """
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": B, "compression.type": "zstd", "enable.idempotence": True,
                      "linger.ms": 2})
        for i in range(N):
            p.produce("mix-confluent", b"confluent %d" % i)
        assert p.flush(60) == 0
    """,
    "kafka-python": """
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=B, compression_type="gzip", acks="all")
        for i in range(N):
            p.send("mix-kpy", b"kafka-python %d" % i)
        p.flush(60)
        p.close()
    """,
    "aiokafka": """
        import asyncio
        from aiokafka import AIOKafkaProducer
        async def main():
            p = AIOKafkaProducer(bootstrap_servers=B, compression_type="snappy", enable_idempotence=True)
            await p.start()
            try:
                for i in range(N):
                    await p.send("mix-aio", b"aiokafka %d" % i)
                await p.flush()
            finally:
                await p.stop()
        asyncio.run(main())
    """,
}


def unsupported_requests(port: int) -> list[int]:
    """ApiVersions at a version no broker has: Kafka answers UNSUPPORTED_VERSION (35) in a
    version-0 body; then the listener still answers a good request on a new connection."""
    codes = []
    for corr in range(5):
        with raw_connect(port) as s:
            payload = struct.pack(">hhi", 18, 99, 100 + corr) + b"\x00\x00\x00"
            s.sendall(struct.pack(">i", len(payload)) + payload)
            resp = recv_frame(s)
            got_corr, code = struct.unpack(">ih", resp[:6])
            assert got_corr == 100 + corr
            codes.append(code)
    return codes


def test_every_client_at_once(tmp_path: Path) -> None:
    assert (JS / "node_modules" / "kafkajs").is_dir(), "run `make testdeps` (npm install in tests/js)"
    serve = ServeProcess(tmp_path / "data", *SMALL_WAL_ARGS)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        b = serve.bootstrap
        lines = "".join(f"kcat {i}\n" for i in range(N))
        procs["kcat"] = subprocess.Popen(
            ["kcat", "-P", "-b", b, "-t", "mix-kcat", "-z", "lz4", "-X", "acks=all"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, body in PRODUCERS.items():
            code = f"B, N = {b!r}, {N}\n" + textwrap.dedent(body)
            procs[name] = subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        procs["kafkajs"] = subprocess.Popen(
            ["node", str(JS / "kafkajs_client.js"), b, str(tmp_path / "js.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert unsupported_requests(serve.port) == [35] * 5
        out, err = procs["kcat"].communicate(lines, timeout=180)
        assert procs["kcat"].returncode == 0, err
        for name, p in procs.items():
            if name != "kcat":
                out, err = p.communicate(timeout=180)
                assert p.returncode == 0, f"{name}: {err[-3000:]}"
        check_alive(serve.port)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        code, log = serve.stop()
    assert code == 0, log[-3000:]
    js = json.loads((tmp_path / "js.json").read_text())
    assert all(len(v) == 200 for v in js["consumed"].values()) and len(js["consumed"]) == 5
    with walfs.Wal(str(tmp_path / "data"), read_only=True) as wal:
        for topic, prefix in [
            ("mix-kcat", b"kcat"),
            ("mix-confluent", b"confluent"),
            ("mix-kpy", b"kafka-python"),
            ("mix-aio", b"aiokafka"),
        ]:
            got = wal.read(topic, 0, max_records=N + 1)
            assert got == [b"%s %d" % (prefix, i) for i in range(N)], topic
