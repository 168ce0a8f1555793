"""What sets a producer's pace on loopback: the socket of Kafka's own ProducerPerformance
against `walfs serve --fsync never` and Apache Kafka (default settings), in one run.

    .venv/bin/python bench/produce_pace.py --size 1KiB --records 60000
    .venv/bin/python bench/produce_pace.py --size 16KiB --records 6000 --strace --out pace.json

Per server (the same tool and settings as bench_vs_kafka.py: acks=all, linger.ms=5,
batch.size=1 MiB; one producer, or --producers N at once, the records split among them),
while the tools run:

- `ss -tinm` of each producer's connection, sampled every --every seconds, both ends: the
  client's tcp_info counters (busy, rwnd_limited: time its sending was held by the
  server's receive window, sndbuf_limited: by its own send buffer; the rest of busy is
  neither), the server's receive buffer (skmem rb) and receive queue (Recv-Q) over the
  run, its rcv_space (the kernel's autotuning estimate);
- with --strace, every receive system call of the server process (`strace -f -T`;
  read/recvfrom/recvmsg): on the connection that received most, calls, how many found
  nothing (EAGAIN), bytes per call and calls per MiB. strace slows the server; read the
  counts, not the rates, of a --strace run.

The tool's own line (records/s, latency) is printed for each server; with several
producers, records/s in all is every record over the longest producer's own time (as
bench_vs_kafka.py counts them), the metrics and `socket` are the first producer's and
`sockets` has every producer's connection. JSON with --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from bench_vs_kafka import PRODUCER_PROPS, SIZES, TOOL_JVM, WalfsServer, create_topic  # noqa: E402
from real_kafka import KafkaBroker, classpath  # noqa: E402

_RATE = re.compile(r"([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency")
_KV = re.compile(r"(\w+):(\S+)")
_LIMITED = re.compile(r"(\d+)ms(?:\(([\d.]+)%\))?")
_SKMEM = re.compile(r"skmem:\(r(\d+),rb(\d+),t(\d+),tb(\d+),f\d+,w\d+,o\d+,bl\d+,d(\d+)\)")
_COUNTS = (
    "bytes_received",
    "bytes_acked",
    "bytes_sent",
    "bytes_retrans",
    "rcv_space",
    "snd_wnd",
    "dsack_dups",
)
_RETRANS = re.compile(r" retrans:\d+/(\d+)")
# pid time call(fd, ...) = result <seconds>
_SYSCALL = re.compile(
    r"^(?:\[pid\s+)?(\d+)\]?\s+(\S+)\s+(read|recvfrom|recvmsg)\((\d+),.*\)\s+=\s+(-?\d+)(?:\s+(\w+))?.*<([\d.]+)>$"
)


def ss_sample(port: int) -> list[dict[str, Any]]:
    """One `ss -tinmHO` line per established connection to or from ``port``."""
    out = subprocess.run(
        ["ss", "-tinmHO", "state", "established", f"( sport = :{port} or dport = :{port} )"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        recv_q, send_q = int(parts[0]), int(parts[1])
        # The JVM's addresses are v4-mapped v6 ([::ffff:127.0.0.1]:port): as the server's.
        local, peer = (re.sub(r"^\[(?:::ffff:)?(.*)\]", r"\1", a) for a in parts[2:4])
        row: dict[str, Any] = {"recv_q": recv_q, "send_q": send_q, "local": local, "peer": peer}
        m = _SKMEM.search(line)
        if m:
            row["rmem"], row["rcvbuf"], row["wmem"], row["sndbuf"], row["drops"] = map(int, m.groups())
        m = _RETRANS.search(line)
        row["retrans"] = int(m.group(1)) if m else 0
        for k, v in _KV.findall(line):
            if k in ("busy", "rwnd_limited", "sndbuf_limited"):
                lm = _LIMITED.match(v)
                if lm:
                    row[k + "_ms"] = int(lm.group(1))
            elif k in _COUNTS:
                with contextlib.suppress(ValueError):
                    row[k] = int(v)
        rows.append(row)
    return rows


class Sampler:
    """Samples ss for ``port`` in a thread until stopped; keeps per connection the last
    sample and the server side's largest receive queue and buffer."""

    def __init__(self, port: int, every: float) -> None:
        self.port, self.every = port, every
        self.last: dict[tuple[str, str], dict[str, Any]] = {}
        self.peaks: dict[tuple[str, str], dict[str, list[int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for row in ss_sample(self.port):
                key = (row["local"], row["peer"])
                self.last[key] = row
                p = self.peaks.setdefault(key, {"recv_q": [], "rcvbuf": []})
                p["recv_q"].append(row["recv_q"])
                p["rcvbuf"].append(row.get("rcvbuf", 0))
            self._stop.wait(self.every)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def produce_connections(self, n: int) -> list[dict[str, Any]]:
        """Both ends of the n connections whose server ends received most (the producers'
        connections to the partition leader), most first."""
        server_ends = [(k, r) for k, r in self.last.items() if k[0].endswith(f":{self.port}")]
        server_ends.sort(key=lambda kr: kr[1].get("bytes_received", 0), reverse=True)
        return [self._both_ends(key, server) for key, server in server_ends[:n]]

    def _both_ends(self, key: tuple[str, str], server: dict[str, Any]) -> dict[str, Any]:
        client = self.last.get((key[1], key[0]), {})
        q = self.peaks[key]
        busy = client.get("busy_ms", 0)
        return {
            "server_bytes_received": server.get("bytes_received"),
            "client_busy_ms": busy,
            "client_rwnd_limited_ms": client.get("rwnd_limited_ms", 0),
            "client_sndbuf_limited_ms": client.get("sndbuf_limited_ms", 0),
            "client_sndbuf": client.get("sndbuf"),
            "client_retrans": client.get("retrans", 0),
            "client_bytes_retrans": client.get("bytes_retrans", 0),
            "client_dsack_dups": client.get("dsack_dups", 0),
            "server_drops": server.get("drops", 0),
            "server_rcvbuf_median": int(statistics.median(q["rcvbuf"])),
            "server_rcvbuf_max": max(q["rcvbuf"]),
            "server_recv_q_median": int(statistics.median(q["recv_q"])),
            "server_recv_q_max": max(q["recv_q"]),
            "server_rcv_space": server.get("rcv_space"),
            "samples": len(q["recv_q"]),
        }


# Kernel TCP counters (/proc/net/netstat, /proc/net/snmp) worth a look on loopback.
COUNTERS = (
    "RetransSegs", "TCPLossProbes", "TCPLossProbeRecovery", "TCPTimeouts", "TCPSpuriousRTOs",
    "TCPSpuriousRtxHostQueues", "TCPRcvQDrop", "TCPBacklogDrop", "PruneCalled", "RcvPruned",
    "TCPRcvCollapsed", "DelayedACKs", "TCPDSACKRecv", "TCPOFOQueue", "TCPFastRetrans",
)  # fmt: skip


# The producer's own metrics (--print-metrics, printed at its end) compared here.
METRICS = (
    "batch-size-avg", "records-per-request-avg", "request-size-avg", "request-latency-avg",
    "record-queue-time-avg", "bufferpool-wait-time-ns-total", "metadata-wait-time-ns-total",
    "flush-time-ns-total", "io-wait-time-ns-avg", "io-time-ns-avg", "select-rate",
)  # fmt: skip
_METRIC = re.compile(r"^producer-metrics:([\w-]+):\{[^}]*\}\s*:\s*(\S+)$")


def producer_metrics(stdout: str) -> dict[str, float]:
    out = {}
    for line in stdout.splitlines():
        m = _METRIC.match(line.strip())
        if m and m.group(1) in METRICS:
            with contextlib.suppress(ValueError):
                out[m.group(1)] = float(m.group(2))
    return out


def tcp_counters() -> dict[str, int]:
    """The machine's TCP counters now (all connections: other load adds to them)."""
    out: dict[str, int] = {}
    for name in ("/proc/net/netstat", "/proc/net/snmp"):
        lines = Path(name).read_text().splitlines()
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            keys, nums = head.split()[1:], vals.split()[1:]
            for k, v in zip(keys, nums, strict=False):
                if k in COUNTERS:
                    out[k] = int(v)
    return out


def strace_summary(path: Path) -> dict[str, Any] | None:
    """Receive calls of the fd that received most (all threads of the server)."""
    per_fd: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for line in path.read_text(errors="replace").splitlines():
        m = _SYSCALL.match(line)
        if not m:
            continue
        _pid, _t, _call, fd, result, _err, secs = m.groups()
        per_fd.setdefault(("", int(fd)), []).append((int(result), float(secs)))
    if not per_fd:
        return None
    calls = max(per_fd.values(), key=lambda cs: sum(n for n, _ in cs if n > 0))
    got = [n for n, _ in calls if n > 0]
    total = sum(got)
    return {
        "calls": len(calls),
        "eagain": sum(1 for n, _ in calls if n < 0),
        "bytes": total,
        "calls_per_mib": round(len(calls) / (total / 2**20), 1) if total else None,
        "bytes_per_call_median": int(statistics.median(got)) if got else 0,
        "bytes_per_call_p90": sorted(got)[int(0.9 * len(got))] if got else 0,
        "share_at_least_64k": round(sum(1 for n in got if n >= 65536) / len(got), 3) if got else 0,
    }


def run_tool(cp: str, bootstrap: str, records: int, size: int, server_pid: int, args: argparse.Namespace,
             port: int, work: Path, label: str) -> dict[str, Any]:  # fmt: skip
    create_topic(bootstrap, "pace", {})
    tracer = None
    trace_file = work / f"{label}.strace"
    if args.strace:
        tracer = subprocess.Popen(
            ["strace", "-f", "-qq", "-tt", "-T", "-s", "0", "-e", "trace=read,recvfrom,recvmsg",
             "-o", str(trace_file), "-p", str(server_pid)],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)  # attached to every thread
    shares = [records // args.producers + (i < records % args.producers) for i in range(args.producers)]
    cmds = [
        [
            *TOOL_JVM, "-cp", cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", "pace",
            "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
            "--print-metrics", "--producer-props", f"bootstrap.servers={bootstrap}", *PRODUCER_PROPS,
        ]
        for n in shares
    ]  # fmt: skip
    k0 = tcp_counters()
    try:
        with Sampler(port, args.every) as sampler:
            procs = [
                subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds
            ]
            outs = [p.communicate(timeout=args.timeout) for p in procs]
        k1 = tcp_counters()
    finally:
        if tracer is not None:
            tracer.terminate()
            tracer.wait(timeout=30)
    tools = []
    for p, (out, err) in zip(procs, outs, strict=True):
        lines = [ln for ln in out.splitlines() if "records sent" in ln]
        if p.returncode != 0 or not lines:
            raise SystemExit(f"ProducerPerformance failed ({p.returncode}):\n{err[-2000:]}")
        m = _RATE.search(lines[-1])
        assert m is not None
        tools.append((lines[-1], float(m.group(1)), float(m.group(3)), out))
    # All records over the longest producer's own time (as bench_vs_kafka.py counts them).
    seconds = max(n / rate for n, (_, rate, _, _) in zip(shares, tools, strict=True))
    sockets = sampler.produce_connections(args.producers)
    return {
        "tool": tools[0][0],
        "tools": [t[0] for t in tools],
        "records_per_s": round(records / seconds, 1),
        "mb_per_s": round(records * size / seconds / 1e6, 2),
        "avg_ms": round(statistics.fmean(t[2] for t in tools), 2),
        "producer_metrics": producer_metrics(tools[0][3]),
        "socket": sockets[0] if sockets else None,
        "sockets": sockets,
        "tcp_counters": {k: k1[k] - k0.get(k, 0) for k in k1 if k1[k] != k0.get(k, 0)},
        "recv_calls": strace_summary(trace_file) if args.strace else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=SIZES, default="1KiB")
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--servers", default="kafka,walfs", help="which, in this order: kafka,walfs")
    ap.add_argument("--producers", type=int, default=1, help="ProducerPerformance processes at once")
    ap.add_argument("--every", type=float, default=0.02, help="seconds between ss samples")
    ap.add_argument("--strace", action="store_true", help="count the server's receive calls")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args()
    cp = classpath()
    size = SIZES[args.size]
    results: dict[str, Any] = {"size": args.size, "records": args.records}
    with tempfile.TemporaryDirectory(prefix="produce-pace-") as d:
        work = Path(d)
        for label in args.servers.split(","):
            if label == "kafka":
                with KafkaBroker(heap="1g") as broker:
                    assert broker.proc is not None
                    pid = broker.proc.pid
                    results[label] = run_tool(
                        cp, broker.bootstrap, args.records, size, pid, args, broker.port, work, label
                    )
            elif label == "walfs":
                server = WalfsServer("never", work).start()
                try:
                    port = int(server.bootstrap.rsplit(":", 1)[1])
                    results[label] = run_tool(
                        cp, server.bootstrap, args.records, size, server.pid(), args, port, work, label
                    )
                finally:
                    server.stop()
            else:
                raise SystemExit(f"unknown server {label!r}")
            r = results[label]
            print(f"{label}: {r['records_per_s']} records/s in all; {r['tool']}", file=sys.stderr)
            print(f"  producer metrics: {r['producer_metrics']}", file=sys.stderr)
            print(f"  socket: {r['socket']}", file=sys.stderr)
            print(f"  TCP counters (whole machine): {r['tcp_counters']}", file=sys.stderr)
            if r["recv_calls"]:
                print(f"  receive calls: {r['recv_calls']}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    else:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
