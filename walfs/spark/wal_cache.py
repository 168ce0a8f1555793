"""Read-only engine handles (walfs.engine.contract) shared by the tasks that run in one Python worker.

Spark reuses its Python workers across tasks (spark.python.worker.reuse), and opening a
WAL costs a scan of the segment directory, so a worker keeps one read-only handle per
(data directory, org) and reopens it only when a task asks for records past what that
handle saw at open (a read-only engine is a snapshot of the complete records present when it
was opened). Read-only handles take no lock, so this never blocks the writer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from walfs.engine.contract import LogEngine
from walfs.errors import WalError
from walfs.open import open_engine

_lock = threading.Lock()
_open: dict[tuple[str, int], LogEngine] = {}


@contextmanager
def open_fresh(path: str, org_id: int) -> Iterator[LogEngine]:
    """A new read-only handle that sees every complete record present now (the planner
    uses it to learn the latest offsets), closed when the with block ends."""
    engine = open_engine(path, org_id=org_id, read_only=True)
    try:
        yield engine
    finally:
        engine.close()


def wal_covering(path: str, org_id: int, topic: str, partition: int, end: int) -> LogEngine:
    """A shared read-only handle whose view of topic[partition] reaches offset `end`."""
    key = (path, org_id)
    with _lock:
        engine = _open.get(key)
        if engine is not None and engine.info(topic, partition).high_watermark >= end:
            return engine
        if engine is not None:
            # Tasks of one worker run one at a time, so nobody else reads through it now.
            _open.pop(key)
            engine.close()
        engine = open_engine(path, org_id=org_id, read_only=True)
        _open[key] = engine
        high = engine.info(topic, partition).high_watermark
        if high < end:
            raise WalError(
                f"{topic!r}[{partition}] of {path} ends at offset {high}, but the query planned to read up "
                f"to {end}: was the data directory replaced or restored from an older copy?"
            )
        return engine


def close_all() -> None:
    """Closes every shared handle (tests; a worker's exit releases them anyway)."""
    with _lock:
        while _open:
            _open.popitem()[1].close()
