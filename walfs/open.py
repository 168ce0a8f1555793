"""Which engine a target names, and opening it: the one module that knows both engines.

A data directory is the local C core (walfs/local/); kafka://HOST:PORT[,...]/NAMESPACE is a
Kafka cluster (walfs/cluster/). Everything else in walfs sees only walfs.engine's contract."""

from __future__ import annotations

import os
from typing import Any

from walfs.engine.contract import LogEngine


def is_local(target: str) -> bool:
    """The one rule for what a target names: URL-like targets (kafka://...) are remote
    engines; anything else is a local data directory."""
    return "://" not in target


def normalize_target(target: str) -> str:
    """A target as faces store and show it: local directories absolute, URLs unchanged."""
    return os.path.abspath(target) if is_local(target) else target


def prepare_target(target: str) -> None:
    """Creates a local data directory if missing (remote engines make their own topics)."""
    if is_local(target):
        os.makedirs(target, exist_ok=True)


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
