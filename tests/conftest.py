"""Fixtures shared by the engine tests. Mount, Spark and Kafka fixtures live in their own
plugin modules (conftest_mount.py, spark_fixtures.py, kafka_harness.py)."""

import os
import pathlib
import sys
from collections.abc import Callable, Iterator

import pytest

import walfs
from walfs.engine import names

# The mount and Spark fixtures are plugins, loaded once for the whole session.
pytest_plugins = ["conftest_mount", "spark_fixtures"]

REPO = pathlib.Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# Small geometry so that tests cross block and segment boundaries with little data.
SMALL = {"segment_size": 1 << 20, "block_size": 64 << 10}

# Every WAL a test creates without naming a geometry (mount daemons, Kafka servers, Spark
# data) gets 16 MiB segments instead of preallocating 1 GiB each on the test disk.
os.environ.setdefault("WALFS_SEGMENT_SIZE", str(16 << 20))
os.environ.setdefault("WALFS_BLOCK_SIZE", str(1 << 20))


def stream_key(topic: str, partition: int = 0, org_id: int = 1) -> str:
    """The local engine's name for a stream on disk (its cursor files are named so)."""
    return names.stream_key(org_id, names.topic_hash(org_id, topic), partition)


@pytest.fixture
def wal_dir(tmp_path: pathlib.Path) -> str:
    return os.fspath(tmp_path / "wal")


@pytest.fixture
def open_wal(wal_dir: str) -> Iterator[Callable[..., walfs.Wal]]:
    """Opens Wals on wal_dir (small geometry unless told otherwise) and closes them all."""
    opened: list[walfs.Wal] = []

    def opener(**kw: object) -> walfs.Wal:
        args: dict[str, object] = dict(SMALL)
        args.update(kw)
        w = walfs.Wal(wal_dir, **args)  # type: ignore[arg-type]
        opened.append(w)
        return w

    yield opener
    for w in opened:
        if not w.closed:
            try:
                w.close()
            except walfs.WalError:
                pass


def payload(topic: str, offset: int, size: int | None = None) -> bytes:
    """Deterministic record content: recognisable, self-describing, varied in size."""
    head = f"{topic}:{offset}:".encode()
    n = (offset * 7919) % 300 if size is None else size
    return head + bytes((offset + i) % 251 for i in range(n))
