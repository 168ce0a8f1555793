"""bench/benchkit.py's page-cache helpers: the write-and-delete that makes a benchmark's
next writes take recycled page-cache pages leaves nothing behind, reports what it cost, and records the
kernel's page-reporting parameters when the kernel has them. No speed is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import benchkit  # noqa: E402


def test_recycle_writes_then_deletes_and_reports_its_cost(tmp_path):
    (tmp_path / "keep").write_bytes(b"x")
    cost = benchkit.recycle(tmp_path, 4)
    assert cost >= 0.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
    assert benchkit.recycle(tmp_path, 0) == 0.0


def test_recycle_into_a_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        benchkit.recycle(tmp_path / "missing", 1)


def test_state_reads_the_reporting_parameters():
    state = benchkit.state()
    if benchkit.REPORTING.is_dir():
        assert "page_reporting_order" in state
    else:
        assert state == {}
