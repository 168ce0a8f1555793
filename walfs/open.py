"""Which engine a target names, and opening it: the one module that knows both engines.

A data directory is the local C core (walfs/local/); kafka://HOST:PORT[,...]/NAMESPACE is a
Kafka cluster (walfs/cluster/). Everything else in walfs sees only walfs.engine's contract."""

from __future__ import annotations

from typing import Any

from walfs.engine.contract import LogEngine
from walfs.engine.targets import is_local, normalize_target, prepare_target

__all__ = ["is_local", "normalize_target", "open_engine", "prepare_target", "repair"]


def open_engine(target: str, **options: Any) -> LogEngine:
    """The engine for `target` (options as walfs.Wal's)."""
    if not is_local(target):
        from walfs.cluster.engine import KafkaEngine

        return KafkaEngine(target, **options)
    from walfs.local.engine import LocalEngine

    return LocalEngine(target, **options)


def repair(damaged: str, into: str) -> Any:
    """`walfs fsck --repair`: copies what is intact of a damaged log into a new one
    (the local engine: walfs/local/salvage.py). Returns its SalvageReport."""
    from walfs.local.salvage import salvage

    return salvage(damaged, into)
