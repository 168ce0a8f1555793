"""`make torture`: the long crash and damage run (not in CI; minutes to hours).

  (a) tools/torture_mount.py     SIGKILLed mount daemon, fsyncing writers, remount + check
  (b) tools/torture_powercut.py  engine power cuts with trims, reclaims and cursor commits
  (c) tests/damage_fuzz.py       the damage fuzzer at WALFS_FUZZ_CASES cases (default 10000)

Sizes come from the environment: TORTURE_MOUNT_CYCLES (default 50), TORTURE_WRITERS (4),
TORTURE_POWERCUT_CYCLES (500), WALFS_FUZZ_CASES (10000), TORTURE_SEED (1). Prints a JSON
summary to stdout and writes it to TORTURE_OUT (default torture-summary.json). Exit 1 when
any part found a problem."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import damage_fuzz  # noqa: E402
import torture_mount  # noqa: E402
import torture_powercut  # noqa: E402


def env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def main() -> int:
    seed = env("TORTURE_SEED", 1)
    out: dict[str, object] = {"seed": seed}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="walfs-torture-") as wd:
        for name, fn in (
            (
                "mount_sigkill",
                lambda d: torture_mount.run(
                    env("TORTURE_MOUNT_CYCLES", 50), env("TORTURE_WRITERS", 4), seed, d
                ),
            ),
            (
                "engine_power_cut",
                lambda d: torture_powercut.run(env("TORTURE_POWERCUT_CYCLES", 500), seed, d),
            ),
            (
                "damage_fuzz",
                lambda d: damage_fuzz.run(env("WALFS_FUZZ_CASES", 10000), seed, d, progress=True),
            ),
        ):
            d = os.path.join(wd, name)
            os.makedirs(d)
            print(f"torture: {name} ...", file=sys.stderr)
            out[name] = fn(d)
    out["seconds"] = round(time.monotonic() - t0, 1)
    text = json.dumps(out, indent=2)
    print(text)
    with open(os.environ.get("TORTURE_OUT", "torture-summary.json"), "w") as f:
        f.write(text + "\n")
    bad = [
        k
        for k, v in out.items()
        if isinstance(v, dict)
        and (v.get("problems") or v.get("failures") or v.get("records_lost") or v.get("refused_opens"))
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
