"""Mount benchmark: the walfs mount side by side with a plain file in the same directory.

    python bench/mount/bench_mount.py [--quick] [--dir DIR] [--size-mib 1024] [--small-mib 64]
                                      [--out F.json] [--only append,append4k,cat,echo,tail] [--cpu N]

Every figure is measured in the same run, on the same disk, with the same tools, each
test alternating its targets for --rounds rounds (medians and per-round ratios reported):
- `dd bs=1M oflag=append conv=fsync` into a topic vs into a plain file (MB/s, durable at
  end), beside bench/mount/fuse_passthrough.c (a C libfuse server over a plain directory, the
  baseline fuse-facts.md quotes) and bench/mount/fuse_floor.py (pyfuse3 storing nothing: the
  ceiling of any pyfuse3 file system);
- the same with bs=4k (small appends, bound by FUSE requests);
- the daemon's CPU time per appended MiB during the 1 MiB test (/proc/PID/stat), which
  includes putting the written bytes into the kernel's page cache (walfs/fuse/page_push.py);
- `cat` of the topic written by the 1 MiB test vs of the plain file: cold (all caches
  dropped, root only), through the daemon (the topic's kernel pages dropped, the data in
  memory) and warm (from the kernel's page cache);
- `cat` just written: dd bs=1M into a new topic / plain file, then at once `cat` of it
  (the first read after an ingest), with the READs the daemon answered during that cat
  and the bytes they served (user.walfs.read_bytes);
- a bash loop of `echo line >> file` (one open, write, close per record): appends/s, on
  the mount, on bench/mount/fuse_floor.py and on a plain file, and the FUSE requests per echo
  the daemon counted (its metrics);
- `tail -f` latency: time from a write() returning to tail printing the line, with the
  default 1 s poll and with `-s 0.1`;
- reads (issue 33): for each of --reads-mib (256 and 1024 MiB), a new topic / plain file
  / file of bench/mount/fuse_floor.py written with 1 MiB appends and an fsync after each, then
  `cat` at once (the first read after writing), again (warm: the kernel already holds
  the bytes) and a third time; per target the medians, and per-round ratios to the plain file with their
  median, min and max; for the mount also the share of the topic's pages in the kernel's
  cache before the first `cat` (mincore) and the MiB the daemon served during it.
JSON goes to stdout and to --out (default bench/results/runs/mount-TIME.json). --quick: small
sizes and one round (64 MiB, 8 MiB, 300 echoes, reads of 32 MiB, 3 and 10 tail samples).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

import benchkit  # noqa: E402
from benchkit import process_cpu_seconds as cpu_seconds  # noqa: E402


def disk(directory: Path) -> dict[str, Any]:
    df = subprocess.run(
        ["df", "-hT", str(directory)], capture_output=True, text=True, check=False
    ).stdout.splitlines()[-1:]
    return {
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


# `taskset -c N` when --cpu pins the writers and every server to one CPU.
PIN: list[str] = []


def dd_append(src: Path, dst: Path, bs: str) -> float:
    return timed(
        [*PIN, "dd", f"if={src}", f"of={dst}", f"bs={bs}", "oflag=append", "conv=notrunc,fsync"]
        + ["status=none"]
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


def fuse_requests(mnt: Path) -> dict[str, int]:
    """The daemon's FUSE request counts by op (its metrics, the mount root's xattr)."""
    for _ in range(10):
        try:
            text = os.getxattr(mnt, "user.walfs.metrics").decode()
            break
        except OSError as exc:  # ERANGE: the text grew between the size query and the read
            if exc.errno != errno.ERANGE:
                raise
    else:
        raise RuntimeError("could not read the metrics xattr")
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith('walfs_fuse_request_seconds_count{op="'):
            op = line.split('"')[1]
            out[op] = int(float(line.rsplit(" ", 1)[1]))
    return out


def served_bytes(mnt: Path) -> int | None:
    """Bytes the daemon's READ handler has returned (None for a daemon that does not say)."""
    try:
        return int(os.getxattr(mnt, "user.walfs.read_bytes"))
    except OSError:
        return None


def mbps(mib: int, seconds: float) -> float:
    return round(mib * 1.048576 / seconds, 1)


def drop_page_cache(path: Path | None = None) -> bool:
    """Drops one file's cached pages (fadvise), or every clean page of the machine (root:
    drop_caches). Returns False when the whole-machine drop is not allowed."""
    if path is not None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        return True
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def summary(samples: dict[str, list[float]], base: str) -> dict[str, Any]:
    """Median MB/s per target over the rounds, and the median of the per-round ratios
    (each round ran its targets back to back, so a ratio compares like with like)."""
    out: dict[str, Any] = {f"{k}_MBps": round(statistics.median(v), 1) for k, v in samples.items()}
    out["rounds"] = {k: v for k, v in samples.items()}
    for k, v in samples.items():
        if k != base:
            ratios = [a / b for a, b in zip(v, samples[base], strict=True)]
            out[f"ratio_{k}_vs_{base}"] = round(statistics.median(ratios), 2)
    return out


def start_passthrough(backing: Path, mnt: Path, build_dir: Path) -> subprocess.Popen[bytes]:
    """bench/mount/fuse_passthrough.c: a C libfuse server over a plain directory (the baseline
    fuse-facts.md quotes), built here with the installed libfuse headers."""
    exe = build_dir / "fuse_passthrough"
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True, check=True
    ).stdout.split()
    src = HERE / "fuse_passthrough.c"
    subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-D_FILE_OFFSET_BITS=64", str(src), "-o", str(exe), *flags],
        check=True,
    )
    return start_server([str(exe), str(backing), str(mnt)], mnt)


def start_server(cmd: list[str], mnt: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd)
    for _ in range(100):
        if os.path.ismount(mnt):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not mount")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", default=None, help="where data dir, mount and plain files go")
    p.add_argument("--size-mib", type=int, default=1024, help="1 MiB test and cat size")
    p.add_argument("--small-mib", type=int, default=64, help="4 KiB test size")
    p.add_argument("--rounds", type=int, default=3, help="each test alternates its targets this often")
    p.add_argument("--echo-count", type=int, default=2000)
    p.add_argument("--reads-mib", default="256,1024", help="sizes (MiB) of the reads test, comma-separated")
    p.add_argument("--fsync", default="interval", choices=("always", "interval", "never"))
    p.add_argument("--out", default=None, help="JSON file (default bench/results/runs/mount-TIME.json)")
    p.add_argument("--quick", action="store_true", help="small sizes, one round: a smoke run")
    p.add_argument(
        "--cpu",
        type=int,
        default=None,
        help="pin dd, the walfs daemon, the C passthrough and the floor server to this CPU "
        "(the same placement for every target: small appends move 2-5x with placement)",
    )
    p.add_argument(
        "--only",
        default="append,cat,echo,tail,reads",
        help="comma-separated tests to run: append (1 MiB and 4 KiB), append4k (4 KiB only), "
        "cat (needs append), echo, tail, reads",
    )
    p.add_argument(
        "--walfs-src",
        # bench/ab_trees.py picks the tree through PYTHONPATH: follow it.
        default=os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or str(REPO),
        help="the walfs checkout the mount runs from (default: PYTHONPATH's first entry, else this checkout)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.size_mib, args.small_mib, args.rounds, args.echo_count, args.reads_mib = 64, 8, 1, 300, "32"
    only = set(args.only.split(","))
    if "cat" in only and "append" not in only:
        raise SystemExit("--only cat needs append (cat reads what the 1 MiB test wrote)")

    base = Path(args.dir or tempfile.mkdtemp(prefix="walfs-bench-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    data, mnt, plain, floor = base / "data", base / "mnt", base / "plain", base / "floor"
    pt, pt_back = base / "passthrough", base / "passthrough-backing"
    for d in (mnt, plain, floor, pt, pt_back):
        d.mkdir(exist_ok=True)
    shm = Path(tempfile.mkdtemp(prefix="walfs-bench-src-", dir="/dev/shm"))
    big, small = shm / "big.txt", shm / "small.txt"
    make_source(big, args.size_mib << 20)
    make_source(small, args.small_mib << 20)

    src_env = {**os.environ, "PYTHONPATH": args.walfs_src}
    mount_cmd = [sys.executable, "-m", "walfs.cli.mount", str(data), str(mnt), "--fsync", args.fsync]
    mount_cmd.append("--allow-delete")  # the reads test removes its topics after each round
    subprocess.run(mount_cmd, check=True, cwd=args.walfs_src, env=src_env)
    servers: list[tuple[subprocess.Popen[bytes], Path]] = []
    results: dict[str, Any] = {
        "run": benchkit.run_info(base),
        "uptime_before": uptime(),
        "disk": disk(base),
        "fsync": args.fsync,
        "rounds": args.rounds,
        "walfs_src": args.walfs_src,
    }
    try:
        floor_cmd = [sys.executable, str(HERE / "fuse_floor.py"), str(floor)]
        servers.append((start_server(floor_cmd, floor), floor))
        servers.append((start_passthrough(pt_back, pt, shm), pt))
        mib, smib = args.size_mib, args.small_mib
        daemon = int(os.getxattr(mnt, "user.walfs.pid"))
        if args.cpu is not None:
            PIN[:] = ["taskset", "-c", str(args.cpu)]
            for pid in (daemon, *(server.pid for server, _ in servers)):
                pin = ["taskset", "-a", "-cp", str(args.cpu), str(pid)]
                subprocess.run(pin, check=True, stdout=subprocess.DEVNULL)
            results["cpu_pinned"] = args.cpu
        # Appends: a new topic / file per round, the targets back to back.
        appends = (("append_1MiB", big, "1M", mib), ("append_4KiB", small, "4k", smib))
        for label, src, bs, size in appends:
            if "append" not in only and not (label == "append_4KiB" and "append4k" in only):
                continue
            runs: dict[str, list[float]] = {"mount": [], "passthrough": [], "floor": [], "plain": []}
            cpu: list[float] = []
            for r in range(args.rounds):
                name = f"{label}_{r}"
                cpu0 = cpu_seconds(daemon)
                runs["mount"].append(mbps(size, dd_append(src, mnt / name, bs)))
                time.sleep(0.2)  # the page push after the last write
                cpu.append(round((cpu_seconds(daemon) - cpu0) / size * 1000, 2))
                runs["passthrough"].append(mbps(size, dd_append(src, pt / name, bs)))
                runs["floor"].append(mbps(size, dd_append(src, floor / "f", bs)))
                runs["plain"].append(mbps(size, dd_append(src, plain / name, bs)))
            results[label] = {"mib": size, **summary(runs, "plain"), "daemon_cpu_ms_per_MiB": cpu}
        if "cat" in only:
            results["cat"] = cat_tests(args, big, mnt, plain, pt, floor, mib)
        if "echo" in only:
            results["echo_per_open"] = echo_test(args, mnt, plain, floor)
        if "reads" in only:
            results["reads"] = {
                f"{m}MiB": reads_test(args, m, mnt, plain, floor)
                for m in (int(x) for x in args.reads_mib.split(","))
            }
            results["uptime_after"] = uptime()
        if "tail" in only:
            results["tail_f_latency"] = {
                "default_1s_poll": tail_latency(mnt / "tailed", 3 if args.quick else 10, None),
                "poll_0.1s": tail_latency(mnt / "tailed", 10 if args.quick else 30, "0.1"),
            }
    finally:
        for server, where in servers:
            subprocess.run(["fusermount3", "-u", str(where)], check=False)
            server.wait(timeout=30)
        subprocess.run(
            [sys.executable, "-m", "walfs.cli.umount", str(mnt)], cwd=args.walfs_src, env=src_env, check=False
        )
        shutil.rmtree(shm, ignore_errors=True)
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    stamp = time.strftime("mount-%Y%m%dT%H%M%S.json", time.gmtime())
    benchkit.write_json(results, args.out or HERE.parent / "results" / "runs" / stamp)
    return 0


def cat_tests(
    args: argparse.Namespace, big: Path, mnt: Path, plain: Path, pt: Path, floor: Path, mib: int
) -> dict[str, Any]:
    topic, plain_file = mnt / "append_1MiB_0", plain / "append_1MiB_0"
    assert os.stat(topic).st_size == os.stat(plain_file).st_size
    assert subprocess.run(["cmp", str(topic), str(plain_file)], check=False).returncode == 0

    # cat, three ways: cold (every cache dropped: the first read of old data), through
    # the daemon (the topic's kernel pages dropped, its segments and the plain file in
    # memory), and warm (the second cat, from the kernel's page cache).
    cold: dict[str, list[float]] = {"mount": [], "plain": []}
    through_daemon: dict[str, list[float]] = {"mount": [], "passthrough": [], "floor": [], "plain": []}
    warm: dict[str, list[float]] = {"mount": [], "plain": []}
    can_drop = True
    for _ in range(args.rounds):
        for name, path in (("mount", topic), ("plain", plain_file)):
            can_drop = drop_page_cache() and can_drop
            cold[name].append(mbps(mib, timed(["cat", str(path)])))
        through = (("mount", topic), ("passthrough", pt / "append_1MiB_0"), ("floor", floor / "f"))
        for name, path in (*through, ("plain", plain_file)):
            timed(["cat", str(path)])  # in memory
            if name != "plain":
                drop_page_cache(path)
            size_mib = os.stat(path).st_size / 2**20  # the floor's file holds every test's bytes
            through_daemon[name].append(round(size_mib * 1.048576 / timed(["cat", str(path)]), 1))
        for name, path in (("mount", topic), ("plain", plain_file)):
            timed(["cat", str(path)])
            warm[name].append(mbps(mib, timed(["cat", str(path)])))
    # The first read after an ingest: a new topic / file, written and read at once.
    # The daemon's READs during that cat, and the bytes they served (a mount whose pushed
    # pages were all kept and used serves none).
    fresh: dict[str, list[float]] = {"mount": [], "plain": []}
    served: dict[str, list[float | None]] = {"reads": [], "MiB": []}
    for r in range(args.rounds):
        for name, where in (("mount", mnt), ("plain", plain)):
            path = where / f"fresh_{r}"
            dd_append(big, path, "1M")
            if name == "mount":
                reads0, bytes0 = fuse_requests(mnt).get("read", 0), served_bytes(mnt)
            fresh[name].append(mbps(mib, timed(["cat", str(path)])))
            if name == "mount":
                served["reads"].append(fuse_requests(mnt).get("read", 0) - reads0)
                bytes1 = served_bytes(mnt)
                served["MiB"].append(None if bytes1 is None else round((bytes1 - bytes0) / 2**20, 1))
    return {
        "mib": mib,
        "cold": summary(cold, "plain") if can_drop else "not measured: needs root for drop_caches",
        "through_daemon": summary(through_daemon, "plain"),
        "warm": summary(warm, "plain"),
        "just_written": {**summary(fresh, "plain"), "served_by_daemon": served},
    }


_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def uptime() -> str:
    return Path("/proc/loadavg").read_text().strip()


def resident_share(path: Path) -> float:
    """The share of `path`'s pages in the kernel's page cache (mincore of a mapping)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0.0
        # A private writable mapping gives ctypes an address; nothing is written or read.
        with mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) as m:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            addr = ctypes.addressof(ctypes.c_char.from_buffer(m))  # the export ends here
            if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return round(sum(v & 1 for v in vec) / pages, 4)
    finally:
        os.close(fd)


def write_fsync_each(path: Path, mib: int) -> float:
    """`mib` appends of 1 MiB of text lines (whole lines), an fsync after each."""
    line = b"%08d " + b"x" * 90 + b"\n"
    block = b"".join(line % i for i in range(10_600))
    block = block[: block.rfind(b"\n", 0, 1 << 20) + 1]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    t0 = time.perf_counter()
    try:
        for _ in range(mib):
            os.write(fd, block)
            os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def spread(samples: dict[str, list[float]], base: str) -> dict[str, Any]:
    """Median MB/s per target, and the per-round ratios to `base` with median, min, max."""
    out: dict[str, Any] = {f"{k}_MBps": round(statistics.median(v), 1) for k, v in samples.items()}
    out["rounds"] = samples
    for k, v in samples.items():
        if k != base:
            r = [a / b for a, b in zip(v, samples[base], strict=True)]
            out[f"ratio_{k}_vs_{base}"] = {
                "median": round(statistics.median(r), 2),
                "min": round(min(r), 2),
                "max": round(max(r), 2),
                "rounds": [round(x, 2) for x in r],
            }
    return out


def reads_test(args: argparse.Namespace, mib: int, mnt: Path, plain: Path, floor: Path) -> dict[str, Any]:
    """Issue 33: the first `cat` after writing with 1 MiB appends + fsync each, and the
    warm `cat` after it, on the mount, a plain file and the pyfuse3 floor, same rounds."""
    first: dict[str, list[float]] = {"mount": [], "floor": [], "plain": []}
    warm: dict[str, list[float]] = {"mount": [], "floor": [], "plain": []}
    third: dict[str, list[float]] = {"mount": [], "floor": [], "plain": []}
    write_s: dict[str, list[float]] = {"mount": [], "floor": [], "plain": []}
    resident: list[float] = []
    served: list[float | None] = []
    for r in range(args.rounds):
        for name, where in (("mount", mnt), ("plain", plain), ("floor", floor)):
            path = where / f"reads_{mib}_{r}"
            write_s[name].append(round(write_fsync_each(path, mib), 2))
            time.sleep(0.5)  # the page push after the last write, as a user's next command
            size_mib = os.stat(path).st_size / 2**20
            if name == "mount":
                resident.append(resident_share(path))
                bytes0 = served_bytes(mnt)
            first[name].append(round(size_mib * 1.048576 / timed(["cat", str(path)]), 1))
            if name == "mount":
                bytes1 = served_bytes(mnt)
                gone = None if bytes0 is None or bytes1 is None else round((bytes1 - bytes0) / 2**20, 1)
                served.append(gone)
            warm[name].append(round(size_mib * 1.048576 / timed(["cat", str(path)]), 1))
            third[name].append(round(size_mib * 1.048576 / timed(["cat", str(path)]), 1))
            if name != "floor":  # the floor stores nothing; its files cost no disk
                path.unlink()
    return {
        "mib": mib,
        "first_cat": spread(first, "plain"),
        "warm_cat": spread(warm, "plain"),
        # The kernel moves a FUSE file's 4 KiB pages to its active list at their second
        # access: a file filled by READs (the floor) pays that in its second `cat`, so
        # its third is the ceiling of a cached FUSE read (docs/benchmarks.md, issue 33).
        "third_cat": spread(third, "plain"),
        "write_seconds": write_s,
        "mount_resident_before_first_cat": resident,
        "mount_MiB_served_by_daemon_in_first_cat": served,
    }


def echo_test(args: argparse.Namespace, mnt: Path, plain: Path, floor: Path) -> dict[str, Any]:
    n = args.echo_count
    echo_loop(mnt / "echo", 10)  # the topic exists and its name is cached
    before = fuse_requests(mnt)
    daemon = int(os.getxattr(mnt, "user.walfs.pid"))
    echo: dict[str, list[float]] = {"mount": [], "floor": [], "plain": []}
    cpu: list[float] = []
    for _ in range(args.rounds):
        cpu0 = cpu_seconds(daemon)
        echo["mount"].append(round(n / echo_loop(mnt / "echo", n)))
        time.sleep(0.1)  # the page push and invalidations after the last echo
        cpu.append(round((cpu_seconds(daemon) - cpu0) / n * 1e6, 1))
        echo["floor"].append(round(n / echo_loop(floor / "f", n)))
        echo["plain"].append(round(n / echo_loop(plain / "echo", n)))
    after = fuse_requests(mnt)
    per_echo = {op: round((after.get(op, 0) - before.get(op, 0)) / (n * args.rounds), 2) for op in after}
    return {
        "records": n,
        **{f"{k}_per_s": round(statistics.median(v)) for k, v in echo.items()},
        "rounds": echo,
        "ratio_mount_vs_floor": round(
            statistics.median(a / b for a, b in zip(echo["mount"], echo["floor"], strict=True)), 2
        ),
        # the daemon's CPU (all its threads) per echo: steadier than rates on a busy machine
        "daemon_cpu_us_per_echo": cpu,
        # metrics reads themselves are getxattr requests: not the echo's
        "fuse_requests_per_echo": {op: v for op, v in per_echo.items() if v and op != "getxattr"},
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
