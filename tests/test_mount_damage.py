"""A damaged record is an error on every face, never a shorter topic (issue 33, item 2).

One byte of a sealed record's value is flipped on disk while nothing has the WAL open
(sealed runs are not re-checked at open, so the mount starts). Then, on a real mount:

- `cat` exits non-zero with "Input/output error"; what it printed is a prefix of the true
  bytes that holds at least every byte before the last 128 KiB boundary at or before the
  damaged record (a READ that reaches the record fails as a whole: the kernel's pages
  before it are still served); `wc -l` and `grep -c` fail too, `head` and `tail` (reads
  that do not reach the record) succeed, the file's size stays the true one and a second
  `cat` fails the same way (a short READ would have made the kernel believe the file ends
  there);
- the daemon logs the topic, partition and offset and `walfs fsck DATA` once, however
  many reads hit the record, and walfs_corrupt_records_total counts it;
- the consumer file fails with EIO and its group's cursor never passes the record;
- a Kafka fetch (kcat against the mount's --kafka-listen) gets CORRUPT_MESSAGE (librdkafka:
  "Invalid message") after exactly the records before it;
- Spark's `format("walfs")` (by path and through the listener) and `spark.read.text` on
  the mount fail.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest_mount import Mount, wait_until
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from segment_files import find_in_segments, flip_byte

import walfs

pytest_plugins = ["conftest_mount", "spark_fixtures"]

N = 40_000
BAD = 20_000  # the damaged record's offset: in the second of three runs (sealed)
READ_SIZE = 128 << 10  # the kernel's READ (and cat's read) size
LINES = [b"line-%05d-" % i + b"x" * 40 for i in range(N)]
TRUE = b"".join(v + b"\n" for v in LINES)
BAD_BYTE = TRUE.index(LINES[BAD])  # where the damaged record starts in the topic file


def damage(data: Path) -> None:
    """Writes the topic `t` (N lines), closes the WAL, flips a byte of record BAD's value."""
    with walfs.Wal(str(data), segment_size=16 << 20, block_size=1 << 20) as w:
        for i in range(0, N, 1000):
            w.append("t", LINES[i : i + 1000])
    path, pos = find_in_segments(data, LINES[BAD])
    flip_byte(path, pos + 20)


def damaged_mount(make_mount: Callable[[], Mount], *options: str) -> Mount:
    m = make_mount()
    assert isinstance(m.data, Path)
    damage(m.data)
    m.start(*options)
    return m


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def damage_lines(m: Mount) -> list[str]:
    return [line for line in m.log.read_text().splitlines() if "damaged record:" in line]


def assert_logged_once(m: Mount) -> None:
    (line,) = damage_lines(m)
    assert "ERROR" in line and f"topic 't' partition 0 offset {BAD}" in line, line
    assert f"walfs fsck {m.data}" in line, line


def corrupt_total(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    (value,) = re.findall(r"^walfs_corrupt_records_total (\S+)$", text, re.M)
    return float(value)


def test_cat_of_a_damaged_topic_fails_with_eio_after_the_records_before_it(make_mount) -> None:
    port = free_port()
    m = damaged_mount(make_mount, "--metrics-listen", f"127.0.0.1:{port}")
    assert corrupt_total(port) == 0
    for attempt in range(2):  # a second cat must not find a shorter file
        res = m.sh("cat t", check=False)
        assert res.returncode != 0, attempt
        assert b"Input/output error" in res.stderr, res.stderr
        out = res.stdout
        assert TRUE.startswith(out), attempt
        assert len(out) >= BAD_BYTE - BAD_BYTE % READ_SIZE, (len(out), BAD_BYTE)
        assert len(out) <= BAD_BYTE
        assert os.stat(m.path / "t").st_size == len(TRUE)

    for script in ("wc -l t", "grep -c line-39999 t", "cat t | wc -l", "sort t > /dev/null"):
        res = m.sh(script, check=False)
        assert res.returncode != 0 and b"Input/output error" in res.stderr, (script, res)

    # Reads that end before the damaged record, or start after it, succeed (the kernel
    # reads whole pages: a page that holds a byte of the damaged record fails).
    assert m.sh("head -n 100 t").stdout == TRUE[: TRUE.index(LINES[100])]
    assert m.sh("tail -n 3 t").stdout == b"".join(v + b"\n" for v in LINES[-3:])
    with open(m.path / "t", "rb") as f:
        assert os.pread(f.fileno(), 4096, 0) == TRUE[:4096]
        after = -(-(BAD_BYTE + len(LINES[BAD]) + 1) // 4096) * 4096  # the next page after it
        assert os.pread(f.fileno(), 1000, after) == TRUE[after : after + 1000]
        with pytest.raises(OSError) as exc:
            os.pread(f.fileno(), 4096, BAD_BYTE - 100)
    assert exc.value.errno == 5  # EIO

    assert_logged_once(m)
    assert corrupt_total(port) == 1


def test_consumer_file_fails_and_its_cursor_never_passes_the_damage(make_mount) -> None:
    m = damaged_mount(make_mount)
    m.sh("mkdir .consumers/g")
    start = 0  # the group's first record
    for attempt in range(2):
        res = m.sh("cat .consumers/g/t", check=False)
        assert res.returncode != 0 and b"Input/output error" in res.stderr, (attempt, res.stderr)
        assert TRUE[TRUE.index(LINES[start]) :].startswith(res.stdout), attempt
        # Nothing at or past the damaged record is committed, whatever was read before it.
        with walfs.Wal(str(m.data), read_only=True) as w:
            committed = w.engine.committed("g", "t")
        if committed is not None:
            assert start <= committed[0] <= BAD, (attempt, committed)
            start = committed[0]
    assert_logged_once(m)


def test_kafka_fetch_of_a_damaged_topic_is_an_error(make_mount) -> None:
    port = free_port()
    m = damaged_mount(make_mount, "--kafka-listen", f"127.0.0.1:{port}")
    res = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{port}", "-C", "-t", "t", "-e", "-f", "%o\n"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0, res
    # librdkafka names Kafka's CORRUPT_MESSAGE (2) "Invalid message".
    assert "Invalid message" in res.stderr, res.stderr
    assert res.stdout.split() == [str(i) for i in range(BAD)]
    # The records after it are served to a consumer that starts past it.
    res = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{port}", "-C", "-t", "t", "-o", str(BAD + 1), "-c", "2", "-f", "%s\n"],
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 0 and res.stdout == LINES[BAD + 1] + b"\n" + LINES[BAD + 2] + b"\n", res
    wait_until(lambda: len(damage_lines(m)) > 0, what="the damage log line")
    assert_logged_once(m)


def test_spark_reads_of_a_damaged_topic_fail(spark: SparkSession, make_mount) -> None:
    port = free_port()
    m = damaged_mount(make_mount, "--kafka-listen", f"127.0.0.1:{port}")
    by_path = spark.read.format("walfs").option("path", str(m.data)).option("topic", "t").load()
    with pytest.raises(PySparkException, match=f"CorruptRecordError.*offset {BAD} of 't' partition 0"):
        by_path.count()
    remote = spark.read.format("walfs").option("bootstrap", f"127.0.0.1:{port}").option("topic", "t").load()
    with pytest.raises(PySparkException, match="(?i)corrupt_message"):
        remote.count()
    # Hadoop's FSError reaches Python as py4j's error, not a PySparkException.
    with pytest.raises((PySparkException, Py4JJavaError), match="Input/output error"):
        spark.read.text(str(m.path / "t")).count()
    # The daemon saw the damage (the listener and the mount; the by-path read logs in
    # Spark's worker, which opened the directory itself).
    assert_logged_once(m)
