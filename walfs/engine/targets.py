"""What a target names: the one rule (walfs/open.py opens the engine it names).

A URL-like target (kafka://HOST:PORT[,...]/NAMESPACE) is a remote engine; anything else is
a local data directory."""

from __future__ import annotations

import os


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
