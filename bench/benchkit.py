"""What every benchmark in bench/ shares: where it ran, its JSON, its spreads, and CPU time.

    run_info(directory)        the run's date (UTC), commit, command, machine (cpu, cores,
                               kernel, python, load, the filesystem of `directory`)
    write_json(result, out)    the result (with run_info under "run") to stdout and to `out`
    spread(values)             {median, min, max} of one measurement's rounds
    BENCH, REPO                bench/ and the repository; `face(name)` puts bench/NAME on
                               sys.path (a benchmark that borrows another face's helpers)

CPU time from /proc:

    process_cpu_seconds(pid)   utime + stime of all of pid's threads (/proc/PID/stat)
    thread_cpu(pid)            {tid: (comm, CPU seconds, run-queue seconds, runs)} from
                               /proc/PID/task/TID/stat (utime + stime) and .../schedstat
                               (time spent runnable, waiting for a CPU; times run on one)
    machine_cpu()              (all, idle) jiffies of the machine (/proc/stat's "cpu" line;
                               idle counts idle + iowait: a CPU waiting for a disk runs nothing)
    Sampler                    a thread reading the above every `interval` seconds for a set
                               of pids, so that a thread's CPU inside a window of wall time
                               (the tool's own measured phase) can be read after the process
                               has gone, and the machine's idle share inside the same window

A thread's name is its `comm`: the kernel keeps 15 characters of it, so the JVM's
`kafka-producer-network-thread` reads `kafka-producer-`.

Page-cache state, for a virtual machine that hands free memory back. The machines these
benchmarks run on are Firecracker guests booted with free page reporting
(`page_reporting.page_reporting_order` on the kernel command line): memory the guest has
not touched lately belongs to the host again, and the guest's next write into it faults on
the host inside whatever instruction touched it. A page-cache write into such memory costs
1.4-2.2 ms of system time per MiB, one into a page the kernel freed lately 0.09-0.16 ms
(docs/notes/2026-11-24-recycled-pages.md). Which writer of a benchmark meets such memory
depends on what ran before it, so a run's figures would say more about the order of its
writes than about the writers.

    recycle(where, mib)        writes `mib` MiB into a file under `where` and deletes it: the
                               next writes of up to that size take pages the kernel has just
                               freed, as on a machine whose page cache is full and recycles
    state()                    the reporting parameters, when the kernel has them
"""

from __future__ import annotations

import bisect
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def batch_append(wal: Any) -> Any:
    """The Wal's call that appends a list of values as one batch: `wal.append` (a tree from
    before issue 34 names it `append_batch`), so that bench/ab_trees.py can run a benchmark
    against both trees. Marks are read as `wal.engine.info(...)`, which both trees have."""
    return getattr(wal, "append_batch", None) or wal.append


def face(name: str) -> None:
    """Put bench/NAME on sys.path: a benchmark using another face's helpers imports them."""
    where = str(BENCH / name)
    if where not in sys.path:
        sys.path.insert(0, where)


def _commit() -> str:
    """The commit of the walfs under test (its tree: PYTHONPATH's first entry, else this one)."""
    tree = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or str(REPO)
    got = subprocess.run(
        ["git", "-C", tree, "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    return got or "unknown"


def run_info(directory: str | Path | None = None) -> dict[str, Any]:
    """Where and when this run happened, and the command that made it."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": _commit(),
        "command": shlex.join([os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]]),
        "machine": {
            "cpu": cpu,
            "nproc": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
        },
    }
    if directory is not None:
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(directory)], capture_output=True, text=True)
        info["machine"]["filesystem"] = fs.stdout.strip()
    return info


def write_json(result: dict[str, Any], out: str | Path | None, stdout: bool = True) -> str:
    """`result` with run_info() under "run" (unless it has one) as JSON: to stdout, and to `out`."""
    if "run" not in result:
        result = {"run": run_info(), **result}
    text = json.dumps(result, indent=2)
    if stdout:
        print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    return text


def spread(values: list[float]) -> dict[str, float | None]:
    """{median, min, max} of one measurement's rounds (None when there was none)."""
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


REPORTING = Path("/sys/module/page_reporting/parameters")
BLOCK = 1 << 20


def recycle(where: Path, mib: int) -> float:
    """Write `mib` MiB under `where`, delete it; the system ms per MiB the write cost."""
    if mib <= 0:
        return 0.0
    junk = Path(where) / ".recycle"
    block = os.urandom(BLOCK)
    fd = os.open(junk, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        r0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        for k in range(mib):
            os.pwrite(fd, block, k * BLOCK)
        spent = resource.getrusage(resource.RUSAGE_SELF).ru_stime - r0
    finally:
        os.close(fd)
        junk.unlink()
    return round(spent / mib * 1e3, 3)


def state() -> dict[str, Any]:
    """The kernel's page-reporting parameters (empty without the module)."""
    out: dict[str, Any] = {}
    if REPORTING.is_dir():
        for p in sorted(REPORTING.iterdir()):
            try:
                out[p.name] = p.read_text().strip()
            except OSError:
                continue
    return out


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(text: str) -> tuple[str, list[str]]:
    """(comm, the fields after it) of a /proc/.../stat line; comm may hold spaces and ')'."""
    head, tail = text.rsplit(")", 1)
    return head.split("(", 1)[1], tail.split()


def process_user_system_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of every thread of pid, in seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        _, fields = _stat_fields(f.read())
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of pid."""
    return sum(process_user_system_seconds(pid))


def thread_cpu(pid: int) -> dict[int, tuple[str, float, float, int]] | None:
    """{tid: (comm, utime + stime seconds, run-queue wait seconds, times run on a CPU)} of
    pid's live threads; None when pid is gone or a zombie (its threads' times are no longer
    listed one by one). Wait and runs are 0 on a kernel without schedstat (CONFIG_SCHED_INFO)."""
    out: dict[int, tuple[str, float, float, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return None
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                comm, fields = _stat_fields(f.read())
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    sched = f.read().split()
                wait, runs = int(sched[1]) / 1e9, int(sched[2])
            except (FileNotFoundError, IndexError):
                wait, runs = 0.0, 0
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        if int(t) == pid and fields[0] in ("Z", "X"):
            return None
        out[int(t)] = (comm, (int(fields[11]) + int(fields[12])) / CLK_TCK, wait, runs)
    return out or None


def machine_cpu() -> tuple[int, int]:
    """(all, idle + iowait) jiffies over every CPU since boot, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        first = f.readline().split()
    if first[0] != "cpu":
        raise RuntimeError(f"/proc/stat starts with {first[0]!r}, not the cpu line")
    # user nice system idle iowait irq softirq steal (guest and guest_nice are inside user/nice)
    values = [int(v) for v in first[1:9]]
    return sum(values), values[3] + values[4]


def _at(series: list[tuple[float, float]], t: float, before: float | None = 0.0) -> float:
    """A cumulative counter at time t, linear between samples; its last value after its last
    sample (a thread that had ended), and `before` ahead of its first (0: a thread that did
    not exist yet; None: the first value)."""
    if not series:
        return 0.0
    if t < series[0][0]:
        return series[0][1] if before is None else before
    i = bisect.bisect_right([s[0] for s in series], t)
    if i >= len(series):
        return series[-1][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1


class Sampler:
    """Samples the threads of the pids it is given, and the machine, every `interval` s."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self._pids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # (pid, tid) -> comm, and its (time, cumulative CPU s) series
        self.names: dict[tuple[int, int], str] = {}
        self.series: dict[tuple[int, int], list[tuple[float, float]]] = {}
        self.waits: dict[tuple[int, int], list[tuple[float, float]]] = {}  # run-queue s
        self.runs: dict[tuple[int, int], list[tuple[float, float]]] = {}  # times on a CPU
        self.machine: list[tuple[float, int, int]] = []
        self.last_alive: dict[int, float] = {}
        self._thread = threading.Thread(target=self._run, name="procstat-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def watch(self, pid: int) -> None:
        with self._lock:
            self._pids.add(pid)
        self.sample()

    def forget(self, pid: int) -> None:
        with self._lock:
            self._pids.discard(pid)

    def sample(self) -> float:
        """One sample now (also called at a phase's edges); returns its time."""
        with self._lock:
            pids = list(self._pids)
            now = time.monotonic()
            total, idle = machine_cpu()
            self.machine.append((now, total, idle))
            for pid in pids:
                threads = thread_cpu(pid)
                if threads is None:
                    continue
                self.last_alive[pid] = now
                for tid, (comm, cpu, wait, runs) in threads.items():
                    self.names[(pid, tid)] = comm
                    self.series.setdefault((pid, tid), []).append((now, cpu))
                    self.waits.setdefault((pid, tid), []).append((now, wait))
                    self.runs.setdefault((pid, tid), []).append((now, float(runs)))
        return now

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def threads_in(self, pid: int, t0: float, t1: float) -> list[tuple[str, float, float, float]]:
        """(comm, CPU seconds, run-queue seconds, times run on a CPU, inside [t0, t1]) of each
        thread of pid, busiest (most CPU) first."""

        def delta(series: list[tuple[float, float]]) -> float:
            return _at(series, t1) - _at(series, t0)

        with self._lock:
            rows = [
                (self.names[key], delta(s), delta(self.waits[key]), delta(self.runs[key]))
                for key, s in self.series.items()
                if key[0] == pid
            ]
        return sorted(rows, key=lambda r: -r[1])

    def idle_share(self, t0: float, t1: float) -> float | None:
        """The machine's idle fraction of all CPU time inside [t0, t1]."""
        with self._lock:
            total = [(t, float(a)) for t, a, _ in self.machine]
            idle = [(t, float(i)) for t, _, i in self.machine]
        if len(total) < 2:
            return None
        d_all = _at(total, t1, None) - _at(total, t0, None)
        return (_at(idle, t1, None) - _at(idle, t0, None)) / d_all if d_all > 0 else None
