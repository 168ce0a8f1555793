"""Retention and the per-topic settings: the rules every engine applies (no storage here).

A policy has three optional parts (Kafka's names in brackets):
- `ms` [retention.ms]: records appended more than this many ms ago go;
- `bytes` [retention.bytes]: the disk a stream's segment files may take, counted in whole
  segment files (file_budget below; docs/operations.md "How much disk a size limit uses");
- `groups`: never delete what these consumer groups have not committed (HoraeDB's safe
  offset), except that `bytes` is a hard cap that still wins (logged when it does).
None means "no limit". `Wal.apply_retention` turns policies into trims (offsets are
never renumbered; readers of a trimmed range get OffsetOutOfRangeError, OFFSET_OUT_OF_RANGE
on Kafka; the mount's files start at the first kept record, docs/mount.md), and
reclamation then deletes the segment files that hold only trimmed records. The daemons
run it in the background.

Besides the retention policy a topic may carry the other Kafka topic configs walfs
honours (walfs/kafka/topic_configs.py maps Kafka's names onto these keys):
- `max_message_bytes` [max.message.bytes]: the largest record batch a produce may send;
- `message_timestamp_type` [message.timestamp.type]: "CreateTime" or "LogAppendTime";
- `cleanup_policy` [cleanup.policy]: "delete" (the only policy walfs has; no compaction).

The settings are stored by each engine: the local engine in `topics.conf`
(walfs/local/settings_file.py, its format), the cluster engine in its meta topic (walfs/cluster/).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

# TEST ONLY: names a file holding the retention clock (ms since the epoch) for the daemon
# tests, which cannot pass now_ms to the background pass. Never set in production.
CLOCK_FILE_ENV = "WALFS_TEST_CLOCK_FILE"
_RETENTION_KEYS = ("retention_ms", "retention_bytes", "retention_groups")
# The other per-topic settings and their validators (value -> error text, or None when valid).
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _check_max_message_bytes(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
    return None if ok else f"max_message_bytes must be an int in 0..2**31-1, not {v!r}"


def _check_timestamp_type(v: Any) -> str | None:
    return None if v in _TIMESTAMP_TYPES else f"message_timestamp_type must be one of {_TIMESTAMP_TYPES}"


def _check_cleanup_policy(v: Any) -> str | None:
    return None if v == "delete" else f"cleanup_policy must be 'delete' (walfs does not compact), not {v!r}"


_OTHER_KEYS = {
    "max_message_bytes": _check_max_message_bytes,
    "message_timestamp_type": _check_timestamp_type,
    "cleanup_policy": _check_cleanup_policy,
}
SETTING_KEYS = (*_RETENTION_KEYS, *_OTHER_KEYS)


@dataclass(frozen=True)
class Policy:
    ms: int | None = None
    bytes: int | None = None
    groups: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for name in ("ms", "bytes"):
            v = getattr(self, name)
            # At most a Kafka long: the engine computes with 64-bit times and positions
            # (a larger limit made every background retention pass fail).
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**63):
                raise ValueError(f"retention {name} must be an int in 0..2**63-1 or None, not {v!r}")

    @property
    def unlimited(self) -> bool:
        return self.ms is None and self.bytes is None


def now_ms() -> int:
    """The clock retention by age reads (ms since the epoch, like the append times the
    core stamps): the wall clock, unless $WALFS_TEST_CLOCK_FILE names a file holding an
    integer (tests move time forward by rewriting it; an empty or missing file means the
    wall clock, anything else is an error)."""
    path = os.environ.get(CLOCK_FILE_ENV)
    if path:
        try:
            with open(path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return int(text)
    return int(time.time() * 1000)


def file_budget(limit: int, segment_size: int) -> tuple[int, int]:
    """The one rule that turns a size limit into segment files (whole files: the unit the
    core allocates, at full size, and the unit reclamation deletes; csrc/budget.c says
    which files a stream is charged for): (keep, cap).

    - keep: a retention pass trims a stream charged for more files than this to the first
      record of its oldest kept file: floor(limit / segment), at least 1 (the file being
      filled is never reclaimed, so a stream always has one).
    - cap: keep + 1. Appends may take the stream to this many files, so its disk is at
      most limit + one segment at any moment (max(limit, segment) + one segment for a
      limit under one segment). An append that needs one more file waits for a pass
      (backpressure)."""
    keep = max(1, limit // segment_size)
    return keep, keep + 1


def policy_of(entry: dict[str, Any] | None, default: Policy) -> Policy:
    """The policy in force for a topic with these overrides (the one merge rule)."""
    if not entry:
        return default
    p = default
    if "retention_ms" in entry:
        p = replace(p, ms=entry["retention_ms"])
    if "retention_bytes" in entry:
        p = replace(p, bytes=entry["retention_bytes"])
    if "retention_groups" in entry:
        p = replace(p, groups=tuple(entry["retention_groups"]))
    return p


def updated(entry: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A topic's overrides after setting `values` (the value "default" removes one),
    checked (ValueError): what every engine then stores."""
    check_settings(values)
    out = dict(entry)
    for k, v in values.items():
        if v == "default":
            out.pop(k, None)
        else:
            out[k] = list(v) if k == "retention_groups" else v
    Policy(ms=out.get("retention_ms"), bytes=out.get("retention_bytes"))  # validates
    return out


def check_settings(values: dict[str, Any]) -> None:
    """The one check of per-topic setting names and values (every engine stores what it
    passes): ValueError naming the first problem."""
    if not set(values) <= set(SETTING_KEYS):
        raise ValueError(f"unknown settings {sorted(set(values) - set(SETTING_KEYS))}")
    for k, v in values.items():
        problem = _OTHER_KEYS[k](v) if k in _OTHER_KEYS and v != "default" else None
        if problem:
            raise ValueError(problem)
