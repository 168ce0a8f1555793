"""Where each produce request's time goes inside the Kafka listener, under Kafka's own
ProducerPerformance (acks=all, linger.ms=5, batch.size=1 MiB, as bench_vs_kafka.py runs it).

    .venv/bin/python bench/trace_produce.py --size 1KiB --records 100000 --fsync never
    .venv/bin/python bench/trace_produce.py --size 16KiB --records 10000 --fsync interval --out t.json

The listener (walfs.kafka.serve_kafka on a LocalEngine in a temporary directory) runs in
this process with timestamps taken at the seams of a request's path (the listener's own
functions wrapped here, nothing changed in them), and the producer is the real JVM tool.
Per Produce request, in milliseconds:

  wait     the previous request handled -> this one's first bytes in the read buffer
           (the connection idle, waiting for the client; 0 when read ahead)
  read     first bytes -> the whole frame read
  ready    the whole frame read -> its handling starts (a frame read ahead waits here for
           the one before it)
  decode   kio's request decode (on the event loop)
  hop_in   the append handed to a worker thread -> the worker runs it
  check    batch CRC-32C and record split (decode_for_append, in the worker)
  append   the engine's append (in the worker)
  hop_out  the worker done -> the event loop runs the connection again
  handled  handling started -> the handler returned (decode + hop_in + check + append + hop_out)
  queued   handler returned -> the answer's turn in the connection's response pipe
  sync     wait for the covering sync round (interval, always; 0 under never)
  send     the answer written to the socket
  total    first bytes -> answer sent
  appended first bytes -> the handler returned (the records in the log)
  durable  first bytes -> the answer's sync returned (= appended under never)
  rounds   wal.sync() calls started while the answer waited for its sync
  inflight produce requests of the connection read and not yet answered when this one's
           first bytes arrived (the producer's window as the server sees it; the Java
           producer keeps up to max.in.flight.requests.per.connection=5)
  recvs    receive calls that returned bytes for this frame (each a wake-up of the reading
           task or a retry right after one; a frame's first call may also hold the end of
           the frame before it)

Printed as median / p90 / p99 / max per phase, with the requests' size, the server's CPU
seconds (this process, all threads) per million records and per GiB, and the tool's own
summary line (rec/s, latency percentiles). --producers N runs N tools at once (records
split among them; records/s in all over the longest one's time, as bench_vs_kafka.py).
The server sets malloc as `walfs serve` does (walfs/cli/malloc_tuning.py). JSON with every
request's phases with --out.
With --kafka the same tool also runs against Apache Kafka (a single KRaft node, default
settings, 1 GiB heap) in the same run, just before the walfs run, and its own summary line
(rec/s, average and p50/p99 latency) is printed beside walfs's.
The figures are for comparing phases within one run: the machine's other load moves them.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import re
import resource
import socket
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # walfs itself: this tree, or PYTHONPATH (ab_trees.py)

from real_kafka import KafkaBroker, classpath  # noqa: E402

import walfs.kafka.dispatch as dispatch_mod  # noqa: E402
import walfs.kafka.framing as framing  # noqa: E402
import walfs.kafka.pipeline as pipeline  # noqa: E402
import walfs.kafka.produce as produce  # noqa: E402
from walfs.engine.contract import open_engine  # noqa: E402
from walfs.kafka import serve_kafka  # noqa: E402
from walfs.kafka.broker import Broker  # noqa: E402
from walfs.kafka.group_sync import GroupSync  # noqa: E402
from walfs.kafka.listener import api_name  # noqa: E402

SIZES = {"100B": 100, "1KiB": 1024, "16KiB": 16384}
PHASES = (
    "wait",
    "read",
    "ready",
    "decode",
    "hop_in",
    "check",
    "append",
    "hop_out",
    "handled",
    "queued",
    "sync",
    "send",
    "total",
    "appended",
    "durable",
    "rounds",
    "inflight",
    "recvs",
)

_RATE = re.compile(r"([\d.]+) records/sec")
now = time.perf_counter
current: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("current", default=None)
pipe_queue: contextvars.ContextVar[deque[dict[str, Any]] | None] = contextvars.ContextVar(
    "pipe_queue", default=None
)
requests: list[dict[str, Any]] = []
unanswered = [0]  # produce requests read and not yet answered (one connection produces)
sync_calls: list[float] = []  # ms inside each wal.sync() the listener's group sync made
group_syncs: list[Any] = []  # the listener's GroupSync objects (their thread hops: `chains`)
by_payload: dict[int, dict[str, Any]] = {}  # frames read, not yet dispatched
recv_counts: dict[int, int] = {}  # receive calls per socket since its last frame ended


def instrument() -> None:
    """Wraps the listener's seams with timestamps (this process only)."""
    reader = framing.FrameReader
    orig_next, orig_fill = reader.next_frame, reader._fill

    async def _fill(self: Any, n: int) -> bool:
        ok = await orig_fill(self, n)
        if n == 4 and getattr(self, "_t_first", None) is None:
            self._t_first = now()
        return ok

    async def next_frame(self: Any) -> Any:
        self._t_first = None
        payload = await orig_next(self)
        if payload is not None:
            rec = {"api": api_name(payload), "bytes": len(payload), "first": self._t_first, "read": now()}
            sock = getattr(self._stream, "socket", None)
            rec["recvs"] = recv_counts.pop(id(sock), 0)
            if rec["api"] == "Produce":
                rec["inflight"] = unanswered[0]
                unanswered[0] += 1
            by_payload[id(payload)] = rec
            requests.append(rec)
        return payload

    reader._fill = _fill  # type: ignore[method-assign]
    reader.next_frame = next_frame  # type: ignore[method-assign]

    # Receive calls that returned bytes, per socket (trio's recv and recv_into: each one a
    # wake-up of the reading task, or a retry after one), counted into the frame they end.
    with socket.socket() as plain:
        sock_cls = type(trio.socket.from_stdlib_socket(plain))
    orig_recv, orig_recv_into = sock_cls.recv, sock_cls.recv_into

    async def recv(self: Any, *a: Any, **k: Any) -> Any:
        got = await orig_recv(self, *a, **k)
        recv_counts[id(self)] = recv_counts.get(id(self), 0) + 1
        return got

    async def recv_into(self: Any, *a: Any, **k: Any) -> Any:
        got = await orig_recv_into(self, *a, **k)
        recv_counts[id(self)] = recv_counts.get(id(self), 0) + 1
        return got

    sock_cls.recv = recv  # type: ignore[method-assign]
    sock_cls.recv_into = recv_into  # type: ignore[method-assign]

    orig_decode = dispatch_mod.decode_request

    def decode_request(*a: Any) -> Any:
        t = now()
        try:
            return orig_decode(*a)
        finally:
            rec = current.get()
            if rec is not None:
                rec["decode"] = (now() - t) * 1e3

    dispatch_mod.decode_request = decode_request

    orig_blocking = Broker.blocking

    async def blocking(self: Any, fn: Any, *args: Any) -> Any:
        rec = current.get()
        if rec is None or fn is not produce._append_partition:
            return await orig_blocking(self, fn, *args)
        t_sub = now()
        marks: dict[str, float] = {}

        def run(*a: Any) -> Any:
            marks["w0"] = now()
            try:
                return fn(*a)
            finally:
                marks["w1"] = now()

        try:
            return await orig_blocking(self, run, *args)
        finally:
            t_back = now()
            rec["hop_in"] = rec.get("hop_in", 0.0) + (marks.get("w0", t_back) - t_sub) * 1e3
            rec["hop_out"] = rec.get("hop_out", 0.0) + (t_back - marks.get("w1", t_back)) * 1e3

    Broker.blocking = blocking  # type: ignore[method-assign]

    orig_dfa, orig_append = produce.decode_for_append, produce._append

    def decode_for_append(data: Any) -> Any:
        t = now()
        try:
            return orig_dfa(data)
        finally:
            rec = current.get()
            if rec is not None:
                rec["check"] = rec.get("check", 0.0) + (now() - t) * 1e3

    def _append(*a: Any) -> Any:
        t = now()
        try:
            return orig_append(*a)
        finally:
            rec = current.get()
            if rec is not None:
                rec["append"] = rec.get("append", 0.0) + (now() - t) * 1e3

    produce.decode_for_append = decode_for_append
    produce._append = _append

    orig_dispatch = dispatch_mod.dispatch

    async def dispatch(broker: Any, conn: Any, payload: Any) -> Any:
        # The frame was read by this connection's task or its read-ahead task: found by id.
        rec = by_payload.pop(id(payload), None)
        current.set(rec)
        if rec is not None:
            rec["dispatch_at"] = now()
            rec["prev_handled"] = getattr(conn, "_t_handled", None)
        try:
            return await orig_dispatch(broker, conn, payload)
        finally:
            conn._t_handled = now()
            if rec is not None:
                rec["handled_at"] = conn._t_handled

    import walfs.kafka.listener as listener

    listener.dispatch = dispatch

    pipe_cls = pipeline.ResponsePipe
    orig_send, orig_run = pipe_cls.send, pipe_cls._run

    async def send(self: Any, response: Any, *a: Any) -> None:
        rec = current.get()
        if response is not None and rec is not None:
            self._trace.append(rec)
        # A ready answer with nothing owed ahead of it is sent by the connection's own task
        # (ResponsePipe.send): its send_frame finds the queue here.
        pipe_queue.set(self._trace)
        await orig_send(self, response, *a)

    async def _run(self: Any) -> None:
        pipe_queue.set(self._trace)
        await orig_run(self)

    orig_init = pipe_cls.__init__

    def __init__(self: Any, *a: Any, **k: Any) -> None:
        orig_init(self, *a, **k)
        self._trace = deque()

    pipe_cls.__init__ = __init__  # type: ignore[method-assign]
    pipe_cls.send = send  # type: ignore[method-assign]
    pipe_cls._run = _run  # type: ignore[method-assign]

    orig_gs_init = GroupSync.__init__

    def gs_init(self: Any, sync_fn: Any, *a: Any, **k: Any) -> None:
        def timed() -> None:
            t = now()
            try:
                sync_fn()
            finally:
                sync_calls.append((now() - t) * 1e3)

        orig_gs_init(self, timed, *a, **k)
        group_syncs.append(self)

    GroupSync.__init__ = gs_init  # type: ignore[method-assign]

    # The answer's wait: GroupSync.wait(mark); before h/kprod4 (an A/B's old tree)
    # GroupSync.sync(need).
    name = "wait" if hasattr(GroupSync, "wait") else "sync"
    orig_wait = getattr(GroupSync, name)

    async def wait(self: Any, *a: Any) -> None:
        q = pipe_queue.get()
        t = now()
        started = self.rounds
        try:
            await orig_wait(self, *a)
        finally:
            if q:
                q[0]["sync"] = (now() - t) * 1e3
                q[0]["synced_at"] = now()
                q[0]["rounds"] = self.rounds - started

    setattr(GroupSync, name, wait)

    orig_send_frame = pipeline.send_frame

    async def send_frame(stream: Any, payload: Any, *direct: Any) -> None:
        q = pipe_queue.get()
        rec = q[0] if q else None
        t = now()
        await orig_send_frame(stream, payload, *direct)
        if rec is not None:
            q.popleft()  # type: ignore[union-attr]
            rec["send_start"], rec["sent"] = t, now()
            if rec["api"] == "Produce":
                unanswered[0] -= 1

    pipeline.send_frame = send_frame


def phases(rec: dict[str, Any]) -> dict[str, float] | None:
    if rec["api"] != "Produce" or "sent" not in rec or rec.get("first") is None:
        return None
    prev = rec.get("prev_handled")
    ms = {
        "wait": max(0.0, (rec["first"] - prev) * 1e3) if prev else 0.0,
        "read": (rec["read"] - rec["first"]) * 1e3,
        "ready": (rec["dispatch_at"] - rec["read"]) * 1e3,
        "handled": (rec["handled_at"] - rec["dispatch_at"]) * 1e3,
        "sync": rec.get("sync", 0.0),
        "send": (rec["sent"] - rec["send_start"]) * 1e3,
        "total": (rec["sent"] - rec["first"]) * 1e3,
        "appended": (rec["handled_at"] - rec["first"]) * 1e3,
        "durable": (rec.get("synced_at", rec["handled_at"]) - rec["first"]) * 1e3,
        "rounds": float(rec.get("rounds", 0)),
        "inflight": float(rec.get("inflight", 0)),
        "recvs": float(rec.get("recvs", 0)),
    }
    for k in ("decode", "hop_in", "check", "append", "hop_out"):
        ms[k] = rec.get(k, 0.0)
    ms["queued"] = max(0.0, (rec["send_start"] - rec["handled_at"]) * 1e3 - ms["sync"])
    ms["bytes"] = rec["bytes"]
    return ms


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for k in (*PHASES, "bytes"):
        xs = [r[k] for r in rows]
        out[k] = {
            "median": round(statistics.median(xs), 3),
            "p90": round(pct(xs, 0.9), 3),
            "p99": round(pct(xs, 0.99), 3),
            "max": round(max(xs), 3),
            "mean": round(statistics.fmean(xs), 3),
        }
    return out


def tool_cmd(cp: str, bootstrap: str, records: int, size: int) -> list[str]:
    return [
        "java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", cp,
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", "t", "--num-records", str(records), "--record-size", str(size),
        "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
        "acks=all", "linger.ms=5", "batch.size=1048576",
    ]  # fmt: skip


def kafka_run(args: argparse.Namespace, cp: str) -> str:
    """The tool's summary line against Apache Kafka (one producer, same settings)."""
    import subprocess

    with KafkaBroker(heap="1g") as broker:
        proc = subprocess.run(
            tool_cmd(cp, broker.bootstrap, args.records, SIZES[args.size]),
            capture_output=True,
            text=True,
            timeout=args.timeout,
            check=False,
        )
    lines = [ln for ln in proc.stdout.splitlines() if "records sent" in ln]
    if proc.returncode != 0 or not lines:
        why = f"ProducerPerformance against Kafka failed ({proc.returncode})"
        raise SystemExit(f"{why}:\n{proc.stderr[-2000:]}")
    return lines[-1]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run(args: argparse.Namespace, cp: str) -> dict[str, Any]:
    size = SIZES[args.size]
    with tempfile.TemporaryDirectory(prefix="trace-produce-") as d:
        wal = open_engine(d, fsync=args.fsync)
        try:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(serve_kafka, wal, "127.0.0.1", 0)
                shares = [
                    args.records // args.producers + (i < args.records % args.producers)
                    for i in range(args.producers)
                ]
                procs: list[Any] = [None] * args.producers

                async def producer(i: int) -> None:
                    cmd = tool_cmd(cp, f"127.0.0.1:{port}", shares[i], size)
                    procs[i] = await trio.run_process(
                        cmd, capture_stdout=True, capture_stderr=True, check=False
                    )

                report = getattr(wal, "report", dict)
                s0 = report().get("syncs", 0)
                c0, t0 = cpu(), now()
                with trio.fail_after(args.timeout):
                    async with trio.open_nursery() as producers:
                        for i in range(args.producers):
                            producers.start_soon(producer, i)
                c1, t1 = cpu(), now()
                fsync_rounds = report().get("syncs", 0) - s0
                nursery.cancel_scope.cancel()
        finally:
            wal.close()
    tools = []
    for proc in procs:
        out = proc.stdout.decode()
        lines = [ln for ln in out.splitlines() if "records sent" in ln]
        if proc.returncode != 0 or not lines:
            err = proc.stderr.decode()[-2000:]
            raise SystemExit(f"ProducerPerformance failed ({proc.returncode}):\n{out[-2000:]}\n{err}")
        tools.append(lines[-1])
    # All records over the longest producer's own time (as bench_vs_kafka.py counts them).
    seconds = max(n / float(_RATE.search(t).group(1)) for n, t in zip(shares, tools, strict=True))  # type: ignore[union-attr]
    rows = [p for p in (phases(r) for r in requests) if p is not None]
    nbytes = sum(r["bytes"] for r in rows)
    return {
        "size": args.size,
        "records": args.records,
        "fsync": args.fsync,
        "producers": args.producers,
        "tool": tools[0],
        "tools": tools,
        "records_per_s": round(args.records / seconds),
        "produce_requests": len(rows),
        "seconds": round(t1 - t0, 2),
        "server_cpu_s": round(c1 - c0, 2),
        "server_cpu_s_per_M": round((c1 - c0) / args.records * 1e6, 2),
        "server_cpu_s_per_GiB": round((c1 - c0) / max(nbytes, 1) * 2**30, 2),
        "busy_share": round(sum(r["handled"] for r in rows) / 1e3 / (t1 - t0), 3),
        "phases_ms": summary(rows) if rows else {},
        "sync_calls": len(sync_calls),
        # Worker threads the group sync started (one per chain of calls, h/kprod4; before
        # it one per call).
        "sync_threads": sum(getattr(g, "chains", g.rounds) for g in group_syncs),
        "fsync_rounds": fsync_rounds,
        "sync_call_ms": {
            "median": round(statistics.median(sync_calls), 3),
            "p90": round(pct(sync_calls, 0.9), 3),
            "p99": round(pct(sync_calls, 0.99), 3),
        }
        if sync_calls
        else None,
        "requests": rows if args.out else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=SIZES, default="1KiB")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--fsync", choices=("never", "interval", "always"), default="never")
    ap.add_argument("--producers", type=int, default=1, help="ProducerPerformance processes at once")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", help="JSON with every request's phases")
    ap.add_argument("--kafka", action="store_true", help="also run the tool against Apache Kafka first")
    args = ap.parse_args()
    cp = classpath()
    kafka_line = kafka_run(args, cp) if args.kafka else None
    try:  # as `walfs serve` does (an old tree, for ab_trees.py, may not have it)
        from walfs.cli.malloc_tuning import keep_freed_buffers
    except ImportError:
        pass
    else:
        keep_freed_buffers()
    instrument()
    res = trio.run(run, args, cp)
    res["kafka_tool"] = kafka_line
    print(
        f"{res['size']} x {res['records']} --fsync {res['fsync']}, {res['producers']} producer(s):",
        file=sys.stderr,
    )
    for line in res["tools"]:
        print(f"  {line}", file=sys.stderr)
    if kafka_line:
        print(f"  Apache Kafka (default settings), same tool: {kafka_line}", file=sys.stderr)
    print(
        f"  {res['records_per_s']} records/s in all, {res['produce_requests']} produce requests, "
        f"server CPU {res['server_cpu_s']} s "
        f"({res['server_cpu_s_per_M']} s/M records, {res['server_cpu_s_per_GiB']} s/GiB), "
        f"handling {res['busy_share']:.0%} of the wall time",
        file=sys.stderr,
    )
    ph = res["phases_ms"]
    print(f"  {'phase (ms)':10} {'median':>8} {'p90':>8} {'p99':>8} {'max':>8} {'mean':>8}", file=sys.stderr)
    for k in (*PHASES, "bytes"):
        s = ph[k]
        print(
            f"  {k:10} {s['median']:8.2f} {s['p90']:8.2f} {s['p99']:8.2f} {s['max']:8.2f} {s['mean']:8.2f}",
            file=sys.stderr,
        )
    if res["sync_call_ms"]:
        c = res["sync_call_ms"]
        print(
            f"  {res['sync_calls']} wal.sync() calls by the group sync (in {res['sync_threads']} worker "
            f"thread runs), {res['fsync_rounds']} fsync rounds "
            "in the core (every leader), ms inside each call: "
            f"median {c['median']:.2f}, p90 {c['p90']:.2f}, p99 {c['p99']:.2f}",
            file=sys.stderr,
        )
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    else:
        print(json.dumps({k: v for k, v in res.items() if k != "requests"}))


if __name__ == "__main__":
    main()
