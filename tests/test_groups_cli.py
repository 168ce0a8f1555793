"""`walfs groups` (list, describe, reset, delete) on a real mount and on an unmounted data
directory, cross-checked with the consumer files, the Python API and a Kafka client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from conftest_mount import REPO, Mount, cli

import walfs

pytest_plugins = ["conftest_mount"]


def groups(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    res = cli("groups", *args, check=False)
    assert "Traceback" not in res.stderr, res.stderr
    if ok:
        assert res.returncode == 0, res.stderr
    else:
        assert res.returncode != 0, res.stdout
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr  # one line
    return res


def rows(res: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in res.stdout.splitlines()]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_groups_on_a_mount(make_mount: Callable[[], Mount]) -> None:
    m = make_mount()
    port = free_port()
    m.start("--kafka-listen", f"127.0.0.1:{port}")
    mnt = str(m.path)
    m.sh("seq 0 9 >> t; mkdir partition=2; seq 0 4 >> partition=2/t; seq 0 2 >> u")
    m.sh("mkdir .consumers/billing .consumers/empty; head -n 1 .consumers/billing/t > /dev/null")
    m.sh("setfattr -n user.walfs.committed_offset -v 3 .consumers/billing/partition=2/t")
    assert groups("list", mnt).stdout.split() == ["billing", "empty"]
    assert rows(groups("list", mnt, "--json")) == [{"group": "billing"}, {"group": "empty"}]

    described = rows(groups("describe", mnt, "billing", "--json"))
    assert described == [
        {"group": "billing", "topic": "t", "partition": 0, "committed_offset": 10, "low_watermark": 0,
         "high_watermark": 10, "lag": 0},
        {"group": "billing", "topic": "t", "partition": 2, "committed_offset": 3, "low_watermark": 0,
         "high_watermark": 5, "lag": 2},
    ]  # fmt: skip
    table = groups("describe", mnt, "billing").stdout.splitlines()
    assert table[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-START-OFFSET", "LOG-END-OFFSET", "LAG"
    ]  # fmt: skip
    assert table[2].split() == ["billing", "t", "2", "3", "0", "5", "2"]
    assert "no committed offsets" in groups("describe", mnt, "empty").stdout

    # A Kafka client of the same daemon sees the same cursors.
    kafka = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "billing"})
    try:
        got = kafka.committed([TopicPartition("t", 0), TopicPartition("t", 2)], timeout=30)
        assert [tp.offset for tp in got] == [10, 3]

        # A reset: a plan without --execute, nothing changed.
        plan = groups("reset", mnt, "billing", "--topic", "t", "--to-earliest")
        assert "--execute" in plan.stderr
        assert [line.split()[-2:] for line in plan.stdout.splitlines()[1:]] == [["10", "0"], ["3", "0"]]
        assert m.out("getfattr --only-values -n user.walfs.cursor .consumers/billing/t") == "10"
        groups("reset", mnt, "billing", "--topic", "t", "--partition", "0", "--to-offset", "4", "--execute")
        assert m.out("cat .consumers/billing/t").split() == ["4", "5", "6", "7", "8", "9"]
        groups("reset", mnt, "billing", "--topic", "t", "--to-offset", "99", "--execute")  # clamped
        got = kafka.committed([TopicPartition("t", 0), TopicPartition("t", 2)], timeout=30)
        assert [tp.offset for tp in got] == [10, 5]
        groups("reset", mnt, "billing", "--topic", "t", "--to-earliest", "--execute")
        assert m.out("cat .consumers/billing/partition=2/t").split() == ["0", "1", "2", "3", "4"]
        # --to-datetime: a time before the records -> 0; after them -> the end.
        groups("reset", mnt, "billing", "--topic", "u", "--to-datetime", "2000-01-01T00:00:00", "--execute")
        assert rows(groups("describe", mnt, "billing", "--json"))[-1]["committed_offset"] == 0
        later = datetime.fromtimestamp(time.time() + 60).isoformat(timespec="seconds")
        res = groups("reset", mnt, "billing", "--topic", "u", "--to-datetime", later, "--json", "--execute")
        assert rows(res) == [
            {"group": "billing", "topic": "u", "partition": 0, "committed_offset": 0, "new_offset": 3,
             "executed": True}
        ]  # fmt: skip
        # A reset of a group that does not exist yet makes it, as a Kafka commit would.
        groups("reset", mnt, "fresh", "--topic", "u", "--to-offset", "1", "--execute")
        assert m.out("cat .consumers/fresh/u") == "1\n2\n"
        # A Kafka commit shows in describe.
        kafka.commit(offsets=[TopicPartition("u", 0, 2)], asynchronous=False)
        assert rows(groups("describe", mnt, "billing", "--json"))[-1]["committed_offset"] == 2
    finally:
        kafka.close()

    # A reader open on the group: reset and delete are refused, in one line.
    with open(m.path / ".consumers/billing/t", "rb"):
        res = groups("reset", mnt, "billing", "--topic", "t", "--to-latest", "--execute", ok=False)
        assert "stop it first" in res.stderr
        assert "stop them first" in groups("delete", mnt, "billing", ok=False).stderr
    assert groups("delete", mnt, "billing").stdout.strip() == "deleted group 'billing'"
    assert groups("list", mnt).stdout.split() == ["empty", "fresh"]
    # Mistakes: one line, non-zero.
    assert "does not exist" in groups("describe", mnt, "billing", ok=False).stderr
    assert "does not exist" in groups("delete", mnt, "nope", ok=False).stderr
    assert "no topic" in groups("reset", mnt, "empty", "--topic", "zz", "--to-latest", ok=False).stderr
    assert "ISO 8601" in groups("reset", mnt, "empty", "--topic", "t", "--to-datetime", "x", ok=False).stderr
    m.stop()
    # What the mount did is in the data directory, for the Python API.
    with walfs.Wal(str(m.data), read_only=True) as wal:
        assert sorted(wal.groups()) == ["empty", "fresh"]
        assert wal.committed("fresh", "u") == 3  # the cat above consumed 1 and 2


def test_groups_on_a_data_directory(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with walfs.Wal(data) as wal:
        wal.append("t", [b"%d" % i for i in range(6)])
        wal.append("t", [b"x", b"y"], partition=1)
        wal.commit("g", "t", 4)
        wal.engine.create_group("idle")
    assert groups("list", data).stdout.split() == ["g", "idle"]
    assert rows(groups("describe", data, "g", "--json")) == [
        {"group": "g", "topic": "t", "partition": 0, "committed_offset": 4, "low_watermark": 0,
         "high_watermark": 6, "lag": 2}
    ]  # fmt: skip
    plan = groups("reset", data, "g", "--topic", "t", "--to-latest", "--json")
    got = [(r["partition"], r["new_offset"], r["executed"]) for r in rows(plan)]
    assert got == [(0, 6, False), (1, 2, False)]
    with walfs.Wal(data, read_only=True) as wal:
        assert wal.committed("g", "t") == 4  # a dry run
    groups("reset", data, "g", "--topic", "t", "--to-latest", "--execute")
    with walfs.Wal(data, read_only=True) as wal:
        assert (wal.committed("g", "t"), wal.committed("g", "t", 1)) == (6, 2)
    groups("delete", data, "idle")
    assert groups("list", data).stdout.split() == ["g"]
    # Other orgs' groups are not this org's.
    assert groups("list", data, "--org-id", "2").stdout == ""

    # Mistakes: one line each, no traceback, non-zero.
    assert "does not exist" in groups("describe", data, "nope", ok=False).stderr
    assert "neither" in groups("list", str(tmp_path / "missing"), ok=False).stderr
    (tmp_path / "file").write_text("x")
    groups("list", str(tmp_path / "file"), ok=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    groups("list", str(empty), ok=False)
    assert os.listdir(empty) == []  # no WAL made by a mistake


def test_groups_on_a_data_directory_a_daemon_owns(make_mount: Callable[[], Mount]) -> None:
    m = make_mount()
    m.start()
    m.sh("seq 1 3 >> t; mkdir .consumers/g; cat .consumers/g/t > /dev/null")
    data = str(m.data)
    # Reading works beside the daemon; changing names the mount point way.
    assert rows(groups("describe", data, "g", "--json"))[0]["committed_offset"] == 3
    res = groups("reset", data, "g", "--topic", "t", "--to-earliest", "--execute", ok=False)
    assert "running walfs daemon" in res.stderr and "mount" in res.stderr
    assert "running walfs daemon" in groups("delete", data, "g", ok=False).stderr
    # The verb is registered: `walfs groups` (here as `python -m walfs groups`).
    res = subprocess.run(
        [sys.executable, "-m", "walfs", "groups", "list", data], capture_output=True, text=True, cwd=REPO
    )
    assert res.returncode == 0 and res.stdout.split() == ["g"], res.stderr
    m.stop()
