"""One name rule (walfs.engine.names.topic_bytes) on every face: the Python API, the mount and the
Kafka wire refuse the same names, reserved ones included (issue 11)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest_mount import Mount
from kafka_harness import listener

import walfs

pytest_plugins = ["conftest_mount"]

# Refused everywhere: the mount's own names, path syntax, empty and over-long names.
REFUSED = [".consumers", "partition=3", "partition=x", "a/b", "", ".", "..", "x" * 250, "nul\0"]


@pytest.mark.parametrize("name", REFUSED)
def test_python_api_refuses(tmp_path: Path, name: str) -> None:
    with walfs.Wal(tmp_path / "w", segment_size=1 << 20, block_size=64 << 10) as w:
        with pytest.raises(walfs.InvalidTopicError):
            w.append(name, b"x")
        with pytest.raises(walfs.InvalidTopicError):
            w.commit(name, "t", 0)  # groups obey the same rule
        assert w.topics() == []


def test_python_api_refuses_names_that_are_not_utf8(tmp_path: Path) -> None:
    with walfs.Wal(tmp_path / "w", segment_size=1 << 20, block_size=64 << 10) as w:
        with pytest.raises(walfs.InvalidTopicError):
            w.append("bad\udcff", b"x")


def test_mount_refuses_the_same_names(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    try:
        for name in [n for n in REFUSED if n not in ("", ".", "..", "a/b", "nul\0", ".consumers")]:
            with pytest.raises(OSError) as info:
                os.open(m.path / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            assert info.value.errno in (errno.EINVAL, errno.ENAMETOOLONG, errno.EISDIR, errno.EEXIST), name
        # `.consumers` is the mount's directory: it can never be created as a topic file.
        with pytest.raises(OSError):
            os.open(m.path / ".consumers", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        m.sh("echo ok >> fine")
        assert m.out("ls").split() == ["fine", "partition=0"]
    finally:
        m.stop()


def test_kafka_refuses_the_same_names_and_cannot_create_consumers(tmp_path: Path) -> None:
    with listener(tmp_path) as lst:
        admin = AdminClient({"bootstrap.servers": lst.bootstrap})
        for name in (".consumers", "partition=3", "x" * 250, "caf\u00e9"):
            fut = admin.create_topics([NewTopic(name, 1)], request_timeout=10)[name]
            with pytest.raises(KafkaException) as info:
                fut.result(timeout=15)
            assert info.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, name
        # A producer asking for `.consumers` (auto-creation) gets an error, and nothing is made.
        errors: list[KafkaError] = []
        p = Producer({"bootstrap.servers": lst.bootstrap, "message.timeout.ms": 3000})
        p.produce(".consumers", b"x", on_delivery=lambda err, _m: errors.append(err))
        p.flush(10)
        assert errors and errors[0] is not None
        assert lst.wal.topics() == []
