"""A real Apache Kafka 4.1.1 cluster on this machine for trying walfs's cluster engine
(docs/cluster.md): `make cluster` / `make cluster-stop` call this.

    python tools/kafka_cluster.py start DIR [--nodes 3] [--port 19092]   # prints the bootstrap
    python tools/kafka_cluster.py bootstrap DIR
    python tools/kafka_cluster.py stop DIR

Each node is its own JVM (KRaft, broker + controller), replication factor 3 and
min.insync.replicas=2 with three nodes; the jars come from Maven Central through
kafka/pom.xml (`make kafka`). The nodes outlive this command; DIR/cluster.json records their
ports and pids.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from real_kafka import KafkaCluster, wait_for_port  # noqa: E402


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def start(d: Path, nodes: int, port: int) -> int:
    state = d / "cluster.json"
    if state.exists():
        s = json.loads(state.read_text())
        if all(alive(p) for p in s["pids"]):
            print(s["bootstrap"])
            return 0
        print(f"a stopped cluster is in {d}: `stop` it first (its data is kept there)", file=sys.stderr)
        return 1
    d.mkdir(parents=True, exist_ok=True)
    c = KafkaCluster(nodes, directory=d, base_port=port)
    c.start()
    state.write_text(json.dumps({"bootstrap": c.bootstrap, "pids": [c.pid(i) for i in range(nodes)]}))
    for p in c.ports:
        wait_for_port(p, 120)
    print(c.bootstrap)
    return 0


def stop(d: Path) -> int:
    state = d / "cluster.json"
    if not state.exists():
        return 0
    pids = json.loads(state.read_text())["pids"]
    for p in pids:
        if alive(p):
            os.killpg(p, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    for p in pids:
        if alive(p):
            os.killpg(p, signal.SIGKILL)
    state.unlink()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=("start", "stop", "bootstrap"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--port", type=int, default=19092)
    a = ap.parse_args()
    if a.command == "start":
        return start(a.dir, a.nodes, a.port)
    if a.command == "stop":
        return stop(a.dir)
    print(json.loads((a.dir / "cluster.json").read_text())["bootstrap"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
