"""The server's CPU per record under Kafka's own ProducerPerformance, user and system apart,
and the kernel's cost of writing into the page cache on this machine.

    .venv/bin/python bench/produce_cpu.py --size 16KiB --records 60000 --runs 3
    .venv/bin/python bench/produce_cpu.py --size 1KiB --records 300000 --recycle 1500 --perf /tmp/p
    .venv/bin/python bench/produce_cpu.py --size 1KiB --records 300000 --fsync always --producers 4
    .venv/bin/python bench/produce_cpu.py --page-cache 1024     # no server: the kernel alone

Starts `walfs serve` (the tree this process imports, as bench_vs_kafka.py does; --fsync,
default never) on a temporary directory, warms it with a short run, then per run creates a
topic and runs one ProducerPerformance (acks=all, linger.ms=5, batch.size=1 MiB, as
bench_vs_kafka.py; --producers N: N at once, the records split among them) against it,
and prints records/s, p99, and the server's user and system CPU seconds per million
records (/proc/PID/stat) over the run.

--recycle MiB writes a file of that size in the data directory's parent and deletes it
before each run, so that the run's page-cache pages are ones the kernel just had, not memory
the virtual machine touches for the first time (docs/benchmarks.md, "The produce path per
byte": on this machine the first write into never-used memory costs ~1-2 ms per MiB of
system time, a recycled page ~0.09 ms). --perf PREFIX records each run with
`perf record -g` (PREFIX.N). --page-cache MiB runs no server: it writes that many MiB with
pwrite into four new files, then again after deleting them, and prints the system time per
MiB of each (fresh memory, then recycled). --breakdown PERF_FILE... runs nothing either:
it puts each sample of those `perf record -g` files in one bucket (BUCKETS: the first of
the first six that any frame of its call chain names, system calls, faults and waits;
else the leaf function's) and prints each bucket's share. JSON with --out."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vs_kafka as bvk  # noqa: E402
import pagecache  # noqa: E402
from procstat import process_cpu_seconds, process_user_system_seconds  # noqa: E402

# (bucket, names): a sample whose call chain holds one of the names of the first six
# buckets is theirs (system calls, faults, waits); else the bucket of its leaf function.
BUCKETS = [
    (
        "page-cache write (kernel, pwritev)",
        ["generic_perform_write", "ext4_buffered_write_iter", "do_pwritev"],
    ),
    ("writeback (kernel, sync_file_range)", ["sync_file_range", "ext4_writepages", "do_writepages"]),
    ("socket receive (kernel)", ["tcp_recvmsg", "__sys_recvfrom", "sock_recvmsg"]),
    ("socket send (kernel)", ["tcp_sendmsg", "__sys_sendmsg"]),
    ("page faults", ["exc_page_fault", "do_user_addr_fault"]),
    ("epoll / scheduling", ["do_epoll_wait", "__schedule", "futex"]),
    ("CRC-32C (batch check and record seal)", ["crc_hw", "_crc32c_hw", "crc32c"]),
    ("record split (C)", ["walfs_kafka_records"]),
    ("append (C: staging, index)", ["write_chunk", "append_bodies"]),
    ("memset", ["__memset"]),
    ("memmove / memcpy", ["__memmove", "__memcpy"]),
    ("Python (interpreter, objects)", ["_Py", "Py", "libpython"]),
]


def breakdown(paths: list[str]) -> dict[str, float]:
    """Share of the samples of perf.data files per bucket (BUCKETS), in %."""
    counts: dict[str, int] = {}
    for path in paths:
        out = subprocess.run(
            ["perf", "script", "-i", path, "-F", "ip,sym,dso"], capture_output=True, text=True, check=True
        ).stdout
        for block in out.split("\n\n"):
            frames = [line.strip() for line in block.strip().splitlines() if line.strip()]
            if not frames:
                continue
            name = next((b for b, keys in BUCKETS[:6] if any(k in f for f in frames for k in keys)), None)
            if name is None:
                name = next((b for b, keys in BUCKETS[6:] if any(k in frames[0] for k in keys)), None)
            if name is None:
                name = "other kernel" if "[kernel" in frames[0] else "other user"
            counts[name] = counts.get(name, 0) + 1
    total = sum(counts.values()) or 1
    shares = {k: round(100 * v / total, 1) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}
    for k, v in shares.items():
        print(f"{v:5.1f}%  {k}")
    print(f"{total} samples")
    return shares


def page_cache(mib: int, where: Path) -> list[dict[str, Any]]:
    """System seconds per MiB of pwrite into new (fallocated) files: four files, deleted,
    then four again."""
    buf = os.urandom(1 << 20)
    rows = []
    for phase in ("first", "after delete"):
        for i in range(4):
            path = where / f"f{i}"
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            os.posix_fallocate(fd, 0, mib << 20)
            r0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            for k in range(mib):
                os.pwrite(fd, buf, k << 20)
            ms = (resource.getrusage(resource.RUSAGE_SELF).ru_stime - r0) / mib * 1e3
            os.close(fd)
            rows.append({"phase": phase, "file": i, "sys_ms_per_mib": round(ms, 3)})
            print(f"{phase:12s} file {i}: {mib} MiB, system {ms:.2f} ms per MiB", flush=True)
        for i in range(4):
            os.unlink(where / f"f{i}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="16KiB", choices=sorted(bvk.SIZES))
    ap.add_argument("--records", type=int, default=60000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fsync", default="never", choices=["never", "interval", "always"])
    ap.add_argument("--producers", type=int, default=1, help="ProducerPerformance processes at once")
    ap.add_argument("--recycle", type=int, default=0, metavar="MiB")
    ap.add_argument("--perf", default=None, metavar="PREFIX")
    ap.add_argument("--page-cache", type=int, default=0, metavar="MiB")
    ap.add_argument("--breakdown", nargs="+", default=None, metavar="PERF_FILE")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    result: dict[str, Any] = {"args": vars(args), "loadavg_before": os.getloadavg(), "runs": []}
    if args.breakdown:
        result["breakdown"] = breakdown(args.breakdown)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    with tempfile.TemporaryDirectory(prefix="walfs-produce-cpu-") as tmp:
        if args.page_cache:
            result["page_cache"] = page_cache(args.page_cache, Path(tmp))
        else:
            size = bvk.SIZES[args.size]
            cp = bvk.classpath()
            server = bvk.WalfsServer(args.fsync, Path(tmp)).start()
            try:
                bvk.create_topic(server.bootstrap, "warm", {})
                bvk.produce(cp, server.bootstrap, "warm", max(1000, args.records // 20), size, 1)
                for r in range(args.runs):
                    topic = f"t{r}"
                    bvk.create_topic(server.bootstrap, topic, {})
                    pagecache.recycle(Path(tmp), args.recycle)
                    perf = None
                    if args.perf:
                        perf = subprocess.Popen(
                            [
                                "perf",
                                "record",
                                "-g",
                                "-F",
                                "999",
                                "-p",
                                str(server.pid()),
                                "-o",
                                f"{args.perf}.{r}",
                            ],
                            stderr=subprocess.DEVNULL,
                        )
                        time.sleep(0.5)
                    u0, s0 = process_user_system_seconds(server.pid())
                    row = bvk.produce(cp, server.bootstrap, topic, args.records, size, args.producers)
                    u1, s1 = process_user_system_seconds(server.pid())
                    if perf is not None:
                        perf.send_signal(2)
                        perf.wait()
                    m = args.records / 1e6
                    run = {
                        "records_per_s": row["records_per_s"],
                        "p99_ms": row["p99_ms"],
                        "user_s_per_m": round((u1 - u0) / m, 2),
                        "sys_s_per_m": round((s1 - s0) / m, 2),
                    }
                    result["runs"].append(run)
                    print(
                        f"{args.size} --fsync {args.fsync} run {r}: {run['records_per_s']} rec/s, p99 "
                        f"{run['p99_ms']} ms; server CPU per million records: user "
                        f"{run['user_s_per_m']:.2f} s, system {run['sys_s_per_m']:.2f} s",
                        flush=True,
                    )
            finally:
                server.stop()
    result["loadavg_after"] = os.getloadavg()
    result["bench_process_cpu_s"] = round(process_cpu_seconds(os.getpid()), 2)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
