"""kcat (librdkafka's command-line client, Debian package) against the listener."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kafka_harness import listener


def kcat(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_kcat_produce_consume_with_keys_and_headers(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        b = lst.bootstrap
        kcat(
            "-b",
            b,
            "-P",
            "-t",
            "events",
            "-K",
            ":",
            "-H",
            "source=kcat",
            stdin="k1:first\nk2:second\n:no key\n",
        )
        got = kcat("-b", b, "-C", "-t", "events", "-e", "-Z", "-f", "%o|%k|%s|%h\n").splitlines()
        assert got == [
            "0|k1|first|source=kcat",
            "1|k2|second|source=kcat",
            # kcat sends an empty key here, and -Z shows empty keys as NULL too
            "2|NULL|no key|source=kcat",
        ]
        # The same records, through the engine
        recs = lst.wal.read_records("events", 0)
        assert [r.value for r in recs] == [b"first", b"second", b"no key"]
        assert [r.key for r in recs] == [b"k1", b"k2", b""]


def test_kcat_reads_plain_appends_with_null_keys(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("lines", b"appended by the engine")
        lst.wal.append("lines", [b"a", b"b"])
        got = kcat("-b", lst.bootstrap, "-C", "-t", "lines", "-e", "-Z", "-f", "%k:%s\n").splitlines()
        assert got == ["NULL:appended by the engine", "NULL:a", "NULL:b"]


def test_kcat_metadata_lists_topics_and_partitions(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("t1", b"x")
        lst.wal.append("t1", b"y", partition=2)
        out = kcat("-b", lst.bootstrap, "-L")
        assert "1 brokers:" in out
        assert f"broker 0 at 127.0.0.1:{lst.port}" in out
        assert 'topic "t1" with 3 partitions' in out


def test_kcat_offsets_start_and_end(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        lst.wal.append("o", [b"r%d" % i for i in range(10)])
        tail = kcat("-b", lst.bootstrap, "-C", "-t", "o", "-o", "-3", "-e", "-f", "%s\n")
        assert tail.split() == ["r7", "r8", "r9"]
        mid = kcat("-b", lst.bootstrap, "-C", "-t", "o", "-o", "5", "-c", "2", "-f", "%s\n")
        assert mid.split() == ["r5", "r6"]
