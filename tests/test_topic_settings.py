"""The per-topic settings file (topics.conf, walfs/engine/settings.py) with the Kafka topic configs
walfs honours: version 3 holds them (version 2 with a sequence, kept twice: issue 36), version 1
and 2 files are still read, bad values are refused, a deleted topic's settings go, and a version
walfs does not know is refused, not ignored."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import blake3
import pytest

import walfs
from walfs.local.settings_file import TopicSettings


def write_settings(path: Path, version: int, topics: dict[str, dict[str, object]]) -> None:
    body = json.dumps({"topics": topics}).encode()
    head = struct.pack("<8sII", b"WALFSTOP", version, len(body)) + body
    path.write_bytes(head + blake3.blake3(head).digest(length=16))


def test_kafka_configs_persist(tmp_path: Path) -> None:
    s = TopicSettings(str(tmp_path))
    s.set(1, "t", max_message_bytes=5000, message_timestamp_type="LogAppendTime", cleanup_policy="delete")
    s.set(1, "t", retention_ms=60000)
    again = TopicSettings(str(tmp_path))
    assert again.overrides(1, "t") == {
        "max_message_bytes": 5000,
        "message_timestamp_type": "LogAppendTime",
        "cleanup_policy": "delete",
        "retention_ms": 60000,
    }
    assert again.value(1, "t", "max_message_bytes") == 5000
    assert again.value(2, "t", "max_message_bytes", 7) == 7  # another org's topic
    assert struct.unpack_from("<I", (tmp_path / "topics.conf").read_bytes(), 8)[0] == 3


@pytest.mark.parametrize(
    "values",
    [
        {"max_message_bytes": -1},
        {"max_message_bytes": "5000"},
        {"max_message_bytes": True},
        {"message_timestamp_type": "Now"},
        {"cleanup_policy": "compact"},
        {"segment_bytes": 1},
    ],
)
def test_bad_values_refused_and_nothing_written(tmp_path: Path, values: dict[str, object]) -> None:
    s = TopicSettings(str(tmp_path))
    with pytest.raises(ValueError):
        s.set(1, "t", **values)
    assert not (tmp_path / "topics.conf").exists()
    assert s.overrides(1, "t") == {}


@pytest.mark.parametrize("version", [1, 2])
def test_version_1_files_are_read(tmp_path: Path, version: int) -> None:
    write_settings(tmp_path / "topics.conf", version, {"1/t": {"retention_ms": 5, "retention_groups": ["g"]}})
    s = TopicSettings(str(tmp_path))  # a writer: rewritten as version 3, with its mirror
    assert s.overrides(1, "t") == {"retention_ms": 5, "retention_groups": ["g"]}
    for name in ("topics.conf", "topics.conf.mirror"):
        assert struct.unpack_from("<I", (tmp_path / name).read_bytes(), 8)[0] == 3
    assert s.heals.notes == []  # an upgrade, not damage
    s.set(1, "t", max_message_bytes=10)
    assert TopicSettings(str(tmp_path)).overrides(1, "t")["max_message_bytes"] == 10


def test_unknown_version_refused(tmp_path: Path) -> None:
    write_settings(tmp_path / "topics.conf", 4, {})
    with pytest.raises(walfs.WalCorruptError, match="version 4"):
        TopicSettings(str(tmp_path))


def test_deleted_topic_loses_every_setting(tmp_path: Path) -> None:
    with walfs.Wal(str(tmp_path / "d"), segment_size=16 << 20, block_size=1 << 20) as wal:
        wal.append("t", b"x")
        wal.retention("t", max_message_bytes=100, message_timestamp_type="LogAppendTime")
        wal.retention("t", retention_ms=1000)
        wal.delete("t")
        assert wal.engine.settings("t") == {}
    assert os.path.exists(tmp_path / "d" / "topics.conf")
    assert TopicSettings(str(tmp_path / "d")).overrides(1, "t") == {}
