"""Mount benchmark: the walfs mount side by side with a plain file in the same directory.

    python bench/bench_mount.py [--dir DIR] [--size-mib 1024] [--small-mib 64] [--out F.json]

Every figure is measured in the same run, on the same disk, with the same tools:
- `dd bs=1M oflag=append conv=fsync` into a topic vs into a plain file (MB/s, durable at end);
- the same with bs=4k (small appends, bound by FUSE requests);
- `cat` of the topic written by the 1 MiB test vs of the plain file (first pass through
  the daemon, second pass from the kernel's page cache);
- a bash loop of `echo line >> file` (one open, write, close per record): appends/s;
- `tail -f` latency: time from a write() returning to tail printing the line, with the
  default 1 s poll and with `-s 0.1`.
JSON goes to stdout (and --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def machine(directory: Path) -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    df = subprocess.run(
        ["df", "-hT", str(directory)], capture_output=True, text=True, check=False
    ).stdout.splitlines()[-1:]
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "disk": df[0] if df else "",
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }


def make_source(path: Path, size: int) -> None:
    """Text lines of ~100 bytes, as logs are: each newline makes one record."""
    line = b"%08d " + b"x" * 90 + b"\n"
    block = b"".join(line % i for i in range(10_000))
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(block)
            written += len(block)
        f.truncate(size)
        f.seek(size - 1)
        f.write(b"\n")  # whole lines: the topic's view then equals the file byte for byte


def timed(cmd: list[str] | str, **kw: Any) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t0


def dd_append(src: Path, dst: Path, bs: str) -> float:
    return timed(
        ["dd", f"if={src}", f"of={dst}", f"bs={bs}", "oflag=append", "conv=notrunc,fsync", "status=none"]
    )


def echo_loop(path: Path, n: int) -> float:
    script = f'for i in $(seq {n}); do echo "record $i" >> "{path}"; done'
    return timed(["bash", "-c", script])


def tail_latency(path: Path, samples: int, poll: str | None) -> dict[str, float]:
    args = ["tail", "-n", "0", "-f", str(path)]
    if poll:
        args[1:1] = ["-s", poll]
    with open(path, "ab") as f:
        f.write(b"start\n")  # tail needs the file to exist
    tail = subprocess.Popen(args, stdout=subprocess.PIPE)
    assert tail.stdout is not None
    try:
        time.sleep(1.5)  # let tail reach its polling loop
        lat = []
        for i in range(samples):
            with open(path, "ab", buffering=0) as f:
                t0 = time.perf_counter()
                f.write(b"tail sample %d\n" % i)
            line = tail.stdout.readline()
            lat.append(time.perf_counter() - t0)
            assert line == b"tail sample %d\n" % i, line
            time.sleep(0.013 * (i % 7))  # spread the writes over the poll period
        return {
            "samples": samples,
            "median_ms": round(statistics.median(lat) * 1000, 1),
            "max_ms": round(max(lat) * 1000, 1),
        }
    finally:
        tail.kill()
        tail.wait()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", default=None, help="where data dir, mount and plain files go")
    p.add_argument("--size-mib", type=int, default=1024, help="1 MiB test and cat size")
    p.add_argument("--small-mib", type=int, default=64, help="4 KiB test size")
    p.add_argument("--echo-count", type=int, default=2000)
    p.add_argument("--fsync", default="interval", choices=("always", "interval", "never"))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    base = Path(args.dir or tempfile.mkdtemp(prefix="walfs-bench-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    data, mnt, plain = base / "data", base / "mnt", base / "plain"
    for d in (mnt, plain):
        d.mkdir(exist_ok=True)
    shm = Path(tempfile.mkdtemp(prefix="walfs-bench-src-", dir="/dev/shm"))
    big, small = shm / "big.txt", shm / "small.txt"
    make_source(big, args.size_mib << 20)
    make_source(small, args.small_mib << 20)

    mount_cmd = [sys.executable, "-m", "walfs.cli.mount", str(data), str(mnt), "--fsync", args.fsync]
    subprocess.run(mount_cmd, check=True, cwd=REPO)
    results: dict[str, Any] = {"machine": machine(base), "fsync": args.fsync}
    try:
        mib = args.size_mib
        t_mount = dd_append(big, mnt / "big", "1M")
        t_plain = dd_append(big, plain / "big", "1M")
        results["append_1MiB"] = {
            "mib": mib,
            "mount_MBps": round(mib * 1.048576 / t_mount, 1),
            "plain_MBps": round(mib * 1.048576 / t_plain, 1),
            "ratio": round(t_plain / t_mount, 2),
        }
        smib = args.small_mib
        t_mount = dd_append(small, mnt / "small", "4k")
        t_plain = dd_append(small, plain / "small", "4k")
        results["append_4KiB"] = {
            "mib": smib,
            "mount_MBps": round(smib * 1.048576 / t_mount, 1),
            "plain_MBps": round(smib * 1.048576 / t_plain, 1),
            "ratio": round(t_plain / t_mount, 2),
        }
        assert os.stat(mnt / "big").st_size == os.stat(plain / "big").st_size
        cat = {}
        for name, path in (("mount", mnt / "big"), ("plain", plain / "big")):
            first = timed(["cat", str(path)])
            second = timed(["cat", str(path)])
            cat[f"{name}_first_MBps"] = round(mib * 1.048576 / first, 1)
            cat[f"{name}_cached_MBps"] = round(mib * 1.048576 / second, 1)
        cat["ratio_first"] = round(cat["mount_first_MBps"] / cat["plain_first_MBps"], 2)
        cat["ratio_cached"] = round(cat["mount_cached_MBps"] / cat["plain_cached_MBps"], 2)
        results["cat"] = {"mib": mib, **cat}
        n = args.echo_count
        t_mount = echo_loop(mnt / "echo", n)
        t_plain = echo_loop(plain / "echo", n)
        results["echo_per_open"] = {
            "records": n,
            "mount_per_s": round(n / t_mount),
            "plain_per_s": round(n / t_plain),
        }
        results["tail_f_latency"] = {
            "default_1s_poll": tail_latency(mnt / "tailed", 10, None),
            "poll_0.1s": tail_latency(mnt / "tailed", 30, "0.1"),
        }
    finally:
        subprocess.run([sys.executable, "-m", "walfs.cli.umount", str(mnt)], cwd=REPO, check=False)
        shutil.rmtree(shm, ignore_errors=True)
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
