"""The mount's own cost per request, without the kernel: the daemon's request handlers
(walfs.fuse.operations.WalOperations with the daemon's wiring: every request guarded and timed by
walfs/fuse/requests.py, the watcher subscribed to the engine) called directly in a trio
loop, on a fresh engine (fsync interval).

    python bench/bench_fuse_handlers.py [--count 20000] [--repeat 5] [--dir D] [--out F.json]

- echo: the five requests of one `echo line >> t` (OPEN, WRITE of one line, FLUSH, FLUSH,
  RELEASE), CPU microseconds per echo;
- append4k: WRITEs of 4 KiB pieces of ~100-byte lines to one open file (what `dd bs=4k
  oflag=append` sends), CPU microseconds per WRITE;
- and for each, the Python function calls it makes (cProfile), which do not vary between
  runs.

Best of --repeat runs of --count each (the machine's noise only ever adds). A FUSE round
trip costs far more (bench_mount.py's fuse_floor), but what the daemon adds to it is this,
and unlike the mount's rates it can be compared across trees on a busy machine:

    python bench/ab_trees.py --old /work/main --new . --rounds 2 --out ab-handlers.json -- \\
        bench/bench_fuse_handlers.py
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from typing import Any

import pyfuse3
import trio


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=20000, help="echoes / WRITEs per run")
    p.add_argument("--repeat", type=int, default=5, help="runs; the best is reported")
    p.add_argument("--dir", default=None, help="where the data directory goes (default: a temp dir)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    # The tree under test (bench/ab_trees.py sets PYTHONPATH), imported after argument parsing.
    from walfs.fuse.operations import WalOperations
    from walfs.open import open_engine

    base = tempfile.mkdtemp(prefix="walfs-handlers-", dir=args.dir)
    wal = open_engine(os.path.join(base, "data"), fsync="interval", segment_size=64 << 20)
    try:
        ops = WalOperations(wal, os.path.join(base, "data"))
        # As the daemon does: each append notifies the watcher, every request is timed (a
        # tree from before walfs.common.metrics.LoopLatency times only once the daemon sets it).
        wal.watch(ops.watcher.poke)
        if getattr(ops, "request_latency", None) is None:
            from walfs.service.metrics import Metrics

            ops.request_latency = Metrics(wal).fuse
        results: dict[str, Any] = trio.run(_measure, ops, args.count, args.repeat)
    finally:
        wal.close()
        shutil.rmtree(base, ignore_errors=True)
    results["walfs"] = os.path.dirname(sys.modules["walfs"].__file__ or "")
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


async def _measure(ops: Any, count: int, repeat: int) -> dict[str, Any]:
    ctx = pyfuse3.RequestContext()
    append = os.O_WRONLY | os.O_APPEND
    info, attrs = await ops.create(pyfuse3.ROOT_INODE, b"echo", 0o644, append | os.O_CREAT, ctx)
    await ops.release(info.fh)
    ino = attrs.st_ino
    line = b"%08d " + b"x" * 90 + b"\n"
    source = b"".join(line % i for i in range(2000))
    pieces = [source[i : i + 4096] for i in range(0, 40 * 4096, 4096)]

    async def echoes() -> None:
        for i in range(count):
            fh = (await ops.open(ino, append, ctx)).fh
            await ops.write(fh, 0, b"record %d\n" % i)
            await ops.flush(fh)
            await ops.flush(fh)
            await ops.release(fh)

    async def writes() -> None:
        fh = (await ops.open(ino, append, ctx)).fh
        for i in range(count):
            await ops.write(fh, 0, pieces[i % len(pieces)])
        await ops.flush(fh)
        await ops.release(fh)

    out: dict[str, Any] = {"count": count, "repeat": repeat}
    for name, run in (("echo", echoes), ("append4k_write", writes)):
        runs = []
        for _ in range(repeat):
            c0 = time.process_time()
            await run()
            runs.append(round((time.process_time() - c0) / count * 1e6, 2))
        out[name + "_cpu_us"] = min(runs)
        out[name + "_cpu_us_runs"] = runs
        # Python function calls per echo / WRITE (cProfile's count): the same in every run,
        # so it shows a change where the CPU figures drown in a busy machine's noise.
        profile = cProfile.Profile()
        profile.enable()
        await run()
        profile.disable()
        out[name + "_python_calls"] = round(pstats.Stats(profile).total_calls / count, 1)  # type: ignore[attr-defined]
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
