"""Torture (a): SIGKILL of the mount daemon at random moments while several processes append
lines of 0 bytes to 300 KiB (plus their small header) through the mount, each with fsync.
After each kill the directory is mounted again and checked: every line whose write()+fsync
returned is there, whole (untorn), exactly once, in order per writer; nothing else is there
but whole lines that were being written. Part of `make torture` (tools/torture.py);
standalone: python tools/torture_mount.py --cycles 5 --writers 3 --seed 1

Uses the mount helpers of tests/conftest_mount.py (real FUSE mount through the CLI)."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from conftest_mount import Mount  # noqa: E402

LINE = re.compile(rb"^(\d+) (\d+) (\d+) (.*)$", re.S)


def check(
    data: bytes, acked: dict[int, int], next_seq: dict[int, int]
) -> tuple[int, list[str], dict[int, int]]:
    """Checks the file's lines; returns (problems, details, highest seq found per writer)."""
    problems, details = 0, []
    seen: dict[int, list[int]] = {}
    for raw in data.split(b"\n")[:-1]:
        m = LINE.match(raw)
        if not m:
            problems += 1
            details.append(f"unparsable line of {len(raw)} bytes")
            continue
        wid, seq, n, fill = int(m[1]), int(m[2]), int(m[3]), m[4]
        if len(fill) != n or fill != bytes([97 + seq % 26]) * n:
            problems += 1
            details.append(f"torn line: writer {wid} seq {seq}")
        seen.setdefault(wid, []).append(seq)
    if data and not data.endswith(b"\n"):
        problems += 1
        details.append("file ends inside a line")
    top = {}
    for wid, seqs in seen.items():
        if seqs != sorted(set(seqs)):
            problems += 1
            details.append(f"writer {wid}: lines out of order or duplicated")
        top[wid] = max(seqs)
    for wid, hi in acked.items():
        have = set(seen.get(wid, []))
        missing = [s for s in range(next_seq.get(wid, 0), hi + 1) if s not in have]
        if missing:
            problems += 1
            details.append(f"writer {wid}: acknowledged lines missing: {missing[:5]}... ({len(missing)})")
    return problems, details, top


def read_target(target: str, acked: dict[int, int]) -> bytes:
    """The file's bytes. It may not exist yet when the daemon was killed before any writer
    created it (then nothing was acknowledged either: check() finds nothing missing);
    missing after an acknowledged line, check() reports every such line missing."""
    try:
        with open(target, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def run(cycles: int, writers: int, seed: int, workdir: str) -> dict[str, Any]:
    rng = random.Random(seed)
    m = Mount(Path(workdir))
    acked_total = lost = problems = 0
    details: list[str] = []
    first_seq = {w: 0 for w in range(writers)}
    acked: dict[int, int] = {}
    try:
        for cycle in range(cycles):
            m.start()
            target = str(m.path / "torture")
            if cycle:
                data = read_target(target, acked)
                p, d, top = check(data, acked, {w: 0 for w in acked})
                problems += p
                lost += sum(1 for x in d if "missing" in x)
                details += [f"cycle {cycle}: {x}" for x in d]
                first_seq = {w: top.get(w, -1) + 1 for w in range(writers)}
            procs = []
            for w in range(writers):
                env = dict(os.environ, TORTURE_FIRST_SEQ=str(first_seq[w]))
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            os.path.join(HERE, "torture_mount_writer.py"),
                            target,
                            str(w),
                            str(rng.randrange(1 << 30)),
                        ],
                        stdout=subprocess.PIPE,
                        env=env,
                    )
                )
            time.sleep(rng.uniform(0.3, 3.0))
            m.kill()
            for w, pr in enumerate(procs):
                out, _ = pr.communicate(timeout=60)
                oks = [int(x.split()[1]) for x in out.decode().splitlines() if x.startswith("ok ")]
                if oks:
                    acked[w] = max(acked.get(w, -1), oks[-1])
                    acked_total += len(oks)
        m.start()
        data = read_target(str(m.path / "torture"), acked)
        p, d, _top = check(data, acked, {w: 0 for w in acked})
        problems += p
        lost += sum(1 for x in d if "missing" in x)
        details += [f"final: {x}" for x in d]
        m.stop()
    finally:
        m.cleanup()
    return {
        "cycles": cycles,
        "writers": writers,
        "seed": seed,
        "lines_acknowledged": acked_total,
        "writers_with_lost_lines": lost,
        "problems": problems,
        "details": details[:20],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="walfs-torture-mount-") as wd:
        summary = run(args.cycles, args.writers, args.seed, wd)
    print(json.dumps(summary, indent=2))
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
