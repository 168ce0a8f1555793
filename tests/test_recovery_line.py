"""Every open of a local WAL logs one summary line (issue 33): streams, records, segments,
what recovery cut and how long it took, from the core's recovery report; when a writer's
open cut a tail, the line is a warning and the core names each stream it cut."""

from __future__ import annotations

import logging
import os
import re

import pytest
from conftest import SMALL
from conftest_mount import Mount, cli, is_mounted
from test_wal_recovery import check_after_kill, crash_after, find, poke, run_and_kill, seg_files

import walfs

pytest_plugins = ["conftest_mount"]

LINE = re.compile(
    r"recovered (?P<path>\S+)(?P<ro> \(read-only: nothing changed on disk\))?: (?P<streams>\d+) streams, "
    r"(?P<records>\d+) records in (?P<segments>\d+) segments \((?P<runs>\d+) runs, (?P<verified>\d+) records "
    r"checked by CRC\); (?:nothing cut|cut (?P<cut>\d+) torn or unfinished records "
    r"\((?P<cut_bytes>\d+) bytes; (?P<freed>\d+) blocks freed\))"
    r"(?:; (?P<quarantined>\d+) damaged records quarantined \(each read of one fails\))?; took \d+ ms"
)


def summaries(caplog: pytest.LogCaptureFixture) -> list[tuple[logging.LogRecord, re.Match[str]]]:
    out = []
    for r in caplog.records:
        if r.name == "walfs.recovery":
            m = LINE.fullmatch(r.getMessage())
            assert m, r.getMessage()
            out.append((r, m))
    return out


def open_logged(
    caplog: pytest.LogCaptureFixture, wal_dir: str, **kw: object
) -> tuple[walfs.Wal, logging.LogRecord, re.Match[str]]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="walfs"):
        w = walfs.Wal(wal_dir, **{**SMALL, **kw})  # type: ignore[arg-type]
    [(record, m)] = summaries(caplog)
    assert m["path"] == wal_dir
    return w, record, m


def test_open_after_a_clean_close(wal_dir: str, caplog: pytest.LogCaptureFixture) -> None:
    w = walfs.Wal(wal_dir, **SMALL)  # type: ignore[arg-type]
    counts = {"a": 3, "b": 250, "c": 1}
    for t, n in counts.items():
        w.append(t, [b"%s-%d" % (t.encode(), i) for i in range(n)])
    w.close()
    w, record, m = open_logged(caplog, wal_dir)
    try:
        assert record.levelno == logging.INFO
        assert int(m["streams"]) == 3
        assert int(m["records"]) == sum(counts.values())
        assert int(m["segments"]) == len(seg_files(wal_dir))
        assert m["cut"] is None  # nothing cut
        report = w.engine.report()
        assert (int(m["runs"]), int(m["verified"])) == (report["blocks"], report["verified_records"])
    finally:
        w.close()
    w, record, m = open_logged(caplog, wal_dir, read_only=True)
    w.close()
    assert m["ro"] and record.levelno == logging.INFO
    assert int(m["records"]) == sum(counts.values())


def test_open_after_a_torn_tail_names_what_it_cut(wal_dir: str, caplog: pytest.LogCaptureFixture) -> None:
    w = walfs.Wal(wal_dir, test_mode=True, fsync="never", **SMALL)  # type: ignore[arg-type]
    w.append("t", [b"rec-%04d" % i for i in range(99)])
    w.sync()
    w.append("t", b"LAST-RECORD-PAYLOAD")
    crash_after(w)
    path, pos = find(wal_dir, b"LAST-RECORD-PAYLOAD")
    poke(path, pos + 10, b"\0\0\0")  # the tail write was torn
    w, record, m = open_logged(caplog, wal_dir)
    try:
        assert w.info("t").high_watermark == 99
        assert record.levelno == logging.WARNING
        assert (int(m["streams"]), int(m["records"]), int(m["cut"])) == (1, 99, 1)
        # The core's line before it says which stream and where it ends now.
        core = [r.getMessage() for r in caplog.records if r.name == "walfs.core"]
        assert any(
            re.search(r"stream 0 \(t, partition 0\): cut 1 torn or unfinished .* ends at offset 99", c)
            for c in core
        ), core
    finally:
        w.close()


@pytest.mark.parametrize("seed", range(3))
def test_open_after_a_sigkilled_writer(wal_dir: str, caplog: pytest.LogCaptureFixture, seed: int) -> None:
    lines = run_and_kill(wal_dir, "never", seed, 0.3 + 0.2 * seed)
    w, record, m = open_logged(caplog, wal_dir)
    try:
        acked = check_after_kill(w, lines, {})
        report = w.engine.report()
        assert int(m["streams"]) == len(w.topics())
        assert int(m["records"]) == sum(acked.values()) > 0
        assert int(m["segments"]) == report["segments"] == len(seg_files(wal_dir))
        cut = report["cut_records"] or report["cut_bytes"] or report["freed_blocks"]
        if cut:
            assert record.levelno == logging.WARNING
            assert (int(m["cut"]), int(m["cut_bytes"]), int(m["freed"])) == (
                report["cut_records"],
                report["cut_bytes"],
                report["freed_blocks"],
            )
        else:
            assert record.levelno == logging.INFO and m["cut"] is None
    finally:
        w.close()


def test_the_mount_logs_it_at_its_default_level(make_mount) -> None:
    """The mount's default log level is warning; the summary shows all the same, at the
    first mount and at the one after the daemon was SIGKILLed."""
    m: Mount = make_mount()

    def mount() -> None:
        res = cli("mount", str(m.data), str(m.path), "--log-file", str(m.log), *m.options, check=False)
        assert res.returncode == 0, res.stderr
        assert is_mounted(m.path)
        m.pid = int(os.getxattr(m.path, "user.walfs.pid"))

    mount()
    m.sh("for i in $(seq 30); do echo line $i >> t; done; echo x >> u")
    m.kill()
    mount()
    try:
        got = [LINE.search(line) for line in m.log.read_text().splitlines() if "walfs.recovery" in line]
        assert len(got) == 2 and all(got), m.read_log()
        assert (got[0] and int(got[0]["records"])) == 0
        assert got[1] and (int(got[1]["streams"]), int(got[1]["records"])) == (2, 31)
        assert m.out("wc -l < t").strip() == "30"
    finally:
        m.stop()
