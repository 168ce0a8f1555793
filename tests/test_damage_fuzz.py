"""The damage fuzzer in CI (tests/damage_fuzz.py has the machinery): a few hundred seeded
damages of a closed WAL, each opened and read whole in a forked child with a time limit.
A case passes with a clear walfs exception or with every record and cursor read back as
written; a signal, a hang, other bytes or silently missing records fail it. The failure
message lists every failing seed; `python tests/damage_fuzz.py --seed N` replays one.
Issue 36: damage to one copy of the metadata files kept twice (topics.conf, cursors.manifest,
a cursor file's slot) must read back whole: 0 refused opens (`--one-copy`)."""

import json
import os

from damage_fuzz import run

CASES = int(os.environ.get("WALFS_FUZZ_CASES", "400"))


def test_damaged_wal_errors_or_reads_back_intact(tmp_path):
    summary = run(CASES, int(os.environ.get("WALFS_FUZZ_SEED", "1")), str(tmp_path))
    # The fuzzer must really exercise both outcomes, not pass by erroring on everything.
    assert summary["read_back_intact"] > 0 and summary["clear_errors"] > 0, summary
    assert summary["failures"] == 0, json.dumps(summary["failure_classes"], indent=1)


ONE_COPY_CASES = int(os.environ.get("WALFS_FUZZ_ONE_COPY_CASES", "100"))


def test_one_damaged_copy_of_each_metadata_file_reads_back_whole(tmp_path):
    summary = run(ONE_COPY_CASES, int(os.environ.get("WALFS_FUZZ_SEED", "1")), str(tmp_path), one_copy=True)
    assert summary["read_back_intact"] == ONE_COPY_CASES, json.dumps(summary["failure_classes"], indent=1)
    assert summary["failures"] == 0, json.dumps(summary["failure_classes"], indent=1)
