"""The project's mount tests on the Kafka cluster engine (issue 16): the same test
functions as for the local engine (imported from their modules, so one copy of each), with
a `mount` fixture that mounts a fresh namespace of a real Kafka broker
(tests/real_kafka.py) instead of a data directory: echo, cat, wc, grep, partial lines,
binary bytes, dd/cp/mv, append-only refusals and their errnos, partitions, xattrs,
consumer files (commits, partial reads, tail -f), tail -f of a topic, concurrent writers,
a trimmed topic read from its first kept record.
Engine-specific ones (statfs of the data directory, power cuts, ENOSPC) stay local."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_mount import Mount, wait_until
from real_kafka import fresh_target
from test_mount_concurrency import (  # noqa: F401 (collected here, on this module's fixtures)
    test_concurrent_appenders_never_tear_lines,
    test_tail_follows_appends,
)
from test_mount_consumers import (  # noqa: F401
    test_cat_consumes_and_commits_at_close,
    test_consumer_partitions_and_refusals,
    test_partial_read_commits_only_whole_records,
    test_tail_follows_a_consumer_file,
)
from test_mount_files import (  # noqa: F401
    test_binary_bytes,
    test_dd_cp_and_mv_from_outside,
    test_echo_cat_wc_grep,
    test_negative_lookups_then_create,
    test_partial_line_commits_at_close,
    test_partial_line_held_until_newline,
    test_partitions,
    test_refused_calls_errnos,
    test_refused_calls_keep_data,
    test_xattrs_and_ls_stat,
)
from test_mount_trim_read import test_a_trimmed_topic_reads_from_its_first_kept_record  # noqa: F401

from walfs.cluster.engine import KafkaEngine
from walfs.engine.rules import committed_offset


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    m = Mount(tmp_path, target=fresh_target())
    try:
        m.start()
        yield m
    finally:
        m.cleanup()


def test_two_mounts_of_one_namespace_see_each_other(tmp_path: Path) -> None:
    """Several mounts, one log: `echo >>` on one shows on the other, in one order, and a
    consumer group committed through one mount is where the other continues."""
    target = fresh_target()
    a, b = Mount(tmp_path, "a", target), Mount(tmp_path, "b", target)
    try:
        a.start()
        b.start()
        a.sh("for i in $(seq 1 50); do echo a$i >> t; done")
        b.sh("for i in $(seq 1 50); do echo b$i >> t; done")
        for m in (a, b):  # each sees the other's appends once its replay fetched them
            wait_until(lambda m=m: m.out("wc -l < t").strip() == "100", 30, "both mounts at 100 lines")
        seen_a = a.out("cat t").splitlines()
        seen_b = b.out("cat t").splitlines()
        assert seen_a == seen_b and len(seen_a) == 100
        assert [x for x in seen_a if x.startswith("a")] == [f"a{i}" for i in range(1, 51)]
        a.sh("mkdir -p .consumers/g && head -c $(( $(head -n 30 t | wc -c) )) .consumers/g/t > /dev/null")
        observer = KafkaEngine(target, read_only=True)  # a third engine sees the commit
        try:
            wait_until(lambda: committed_offset(observer, "g", "t") == 30, 30, "the commit on the cluster")
        finally:
            observer.close()
        wait_until(lambda: "g" in os.listdir(b.path / ".consumers"), 30, "the group on mount b")
        assert b.out("cat .consumers/g/t").splitlines() == seen_a[30:]
    finally:
        a.cleanup()
        b.cleanup()
