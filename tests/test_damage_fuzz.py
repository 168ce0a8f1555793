"""The damage fuzzer in CI (tests/damage_fuzz.py has the machinery): a few hundred seeded
damages of a closed WAL, each opened and read whole in a forked child with a time limit.
A case passes with a clear walfs exception or with every record and cursor read back as
written (but records that raise CorruptRecordError); a signal, a hang, other bytes, silently
missing records, or a refused open when only records (or one copy of metadata) were damaged
fail it. The failure
message lists every failing seed; `python tests/damage_fuzz.py --seed N` replays one.
Issue 36: damage to one copy of the metadata kept twice (the catalog, topics.conf,
cursors.manifest, a cursor file's slot; segment headers) must read back whole: 0 refused
opens (`--metadata`)."""

import json
import os

from damage_fuzz import run

CASES = int(os.environ.get("WALFS_FUZZ_CASES", "400"))


def test_damaged_wal_errors_or_reads_back_intact(tmp_path):
    summary = run(CASES, int(os.environ.get("WALFS_FUZZ_SEED", "1")), str(tmp_path))
    # The fuzzer must really exercise both outcomes, not pass by erroring on everything.
    assert summary["read_back_intact"] > 0 and summary["clear_errors"] > 0, summary
    # Damage to records alone opens (issue 36): some cases read back around corrupt records.
    assert summary["data_damage_cases"] > 0 and summary["read_back_with_corrupt_records"] > 0, summary
    assert summary["failures"] == 0, json.dumps(summary["failure_classes"], indent=1)


METADATA_CASES = int(os.environ.get("WALFS_FUZZ_METADATA_CASES", "60"))


def test_metadata_damage_with_one_intact_copy_never_refuses(tmp_path):
    """Issue 36: one copy of the catalog, segment headers, one copy of topics.conf, of the
    cursor manifest or one slot of cursor files damaged at random; the other copy intact.
    Every case opens, reads back whole, heals (a second open finds nothing)."""
    summary = run(METADATA_CASES, int(os.environ.get("WALFS_FUZZ_SEED", "1")), str(tmp_path), mode="metadata")
    assert summary["read_back_intact"] == METADATA_CASES, json.dumps(summary["failure_classes"], indent=1)


def test_damage_to_records_alone_always_opens(tmp_path):
    """Issue 36: flipped bits and zeroed pages inside runs' records, index slots and free
    space (of a closed WAL: every run sealed or under a durable frontier) never fail the open:
    the damaged records raise CorruptRecordError, every other record and cursor reads back."""
    cases = max(1, CASES // 2)
    summary = run(cases, int(os.environ.get("WALFS_FUZZ_SEED", "1")), str(tmp_path), mode="data")
    assert summary["failures"] == 0, json.dumps(summary["failure_classes"], indent=1)
    assert summary["data_damage_cases"] == cases and summary["clear_errors"] == 0, summary
    assert summary["read_back_with_corrupt_records"] > cases // 2, summary
