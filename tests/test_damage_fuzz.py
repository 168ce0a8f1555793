"""The damage fuzzer in CI (tests/damage_fuzz.py has the machinery): a few hundred seeded
damages of a closed WAL, each opened and read whole in a forked child with a time limit.
A case passes with a clear walfs exception or with every record and cursor read back as
written; a signal, a hang, other bytes or silently missing records fail it. The failure
message lists every failing seed; `python tests/damage_fuzz.py --seed N` replays one."""

import json
import os

from damage_fuzz import run

CASES = int(os.environ.get("WALFS_FUZZ_CASES", "400"))


def test_damaged_wal_errors_or_reads_back_intact(tmp_path):
    summary = run(CASES, int(os.environ.get("WALFS_FUZZ_SEED", "1")), str(tmp_path))
    # The fuzzer must really exercise both outcomes, not pass by erroring on everything.
    assert summary["read_back_intact"] > 0 and summary["clear_errors"] > 0, summary
    assert summary["failures"] == 0, json.dumps(summary["failure_classes"], indent=1)


METADATA_CASES = int(os.environ.get("WALFS_FUZZ_METADATA_CASES", "60"))


def test_metadata_damage_with_one_intact_copy_never_refuses(tmp_path):
    """Issue 36: one catalog copy and segment headers damaged at random; the other copy
    intact. Every case opens, reads back whole, heals (a second open finds nothing)."""
    summary = run(METADATA_CASES, int(os.environ.get("WALFS_FUZZ_SEED", "1")), str(tmp_path), metadata=True)
    assert summary["read_back_intact"] == METADATA_CASES, json.dumps(summary["failure_classes"], indent=1)
