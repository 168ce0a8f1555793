"""Broker settings, as Kafka names them, for the listener.

Given with `walfs serve --kafka-config NAME=VALUE` (repeatable), the same option of
`walfs mount`, or `-o kafka_config=NAME:VALUE` (the mount's comma-separated options), and
so from the systemd conf's WALFS_OPTIONS. Known names:

| Kafka name | default | walfs |
|---|---|---|
| num.partitions | 1 | partitions of an auto-created topic (and of CreateTopics with -1) |
| auto.create.topics.enable | true | Metadata for an unknown topic creates it |
| message.max.bytes | 1048588 | the largest record batch a produce may send (topics: max.message.bytes) |
| log.message.timestamp.type | CreateTime | a topic's message.timestamp.type unless it has its own |
| log.retention.ms | -1 (keep) | the WAL's default retention by age (--retention-ms) |
| log.retention.bytes | -1 (keep) | the WAL's default retention by size per partition (--retention-bytes) |

Unknown names and bad values are refused at start (ValueError): a setting that was asked
for and silently not honoured would be worse than a daemon that does not start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from walfs.kafka.topic_catalog import MAX_PARTITIONS

DEFAULT_MESSAGE_MAX_BYTES = 1048588  # Kafka's message.max.bytes default
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class BrokerConfig:
    num_partitions: int = 1
    auto_create_topics_enable: bool = True
    message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    log_message_timestamp_type: str = "CreateTime"
    # None: not given here (the WAL's own default stands); -1 in Kafka's spelling is kept as
    # "no limit" by the caller that maps these onto the Wal (walfs.common.sizes.parse_limit).
    log_retention_ms: str | None = None
    log_retention_bytes: str | None = None


def _int(name: str, text: str, lo: int, hi: int) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise ValueError(f"{name}: not an integer: {text!r}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name}: {v} is outside {lo}..{hi}")
    return v


def _bool(name: str, text: str) -> bool:
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise ValueError(f"{name}: expected true or false, not {text!r}")
    return t == "true"


def _limit(name: str, text: str) -> str:
    from walfs.common.sizes import parse_limit

    try:
        parse_limit(text)
    except ValueError:
        raise ValueError(
            f"{name}: not a limit (a number of {name.rsplit('.', 1)[1]}, or -1): {text!r}"
        ) from None
    return text.strip()


def parse_broker_config(items: Iterable[str], base: BrokerConfig | None = None) -> BrokerConfig:
    """``["num.partitions=3", ...]`` (``:`` also separates, for mount -o) -> BrokerConfig."""
    cfg = base or BrokerConfig()
    for item in items:
        sep = "=" if "=" in item else ":"
        name, found, value = item.partition(sep)
        name = name.strip()
        if not found:
            raise ValueError(f"expected NAME=VALUE, not {item!r}")
        if name == "num.partitions":
            cfg = replace(cfg, num_partitions=_int(name, value, 1, MAX_PARTITIONS))
        elif name == "auto.create.topics.enable":
            cfg = replace(cfg, auto_create_topics_enable=_bool(name, value))
        elif name == "message.max.bytes":
            cfg = replace(cfg, message_max_bytes=_int(name, value, 0, 2**31 - 1))
        elif name == "log.message.timestamp.type":
            if value.strip() not in TIMESTAMP_TYPES:
                raise ValueError(f"{name}: one of {', '.join(TIMESTAMP_TYPES)}, not {value!r}")
            cfg = replace(cfg, log_message_timestamp_type=value.strip())
        elif name == "log.retention.ms":
            cfg = replace(cfg, log_retention_ms=_limit(name, value))
        elif name == "log.retention.bytes":
            cfg = replace(cfg, log_retention_bytes=_limit(name, value))
        else:
            raise ValueError(
                f"unknown broker setting {name!r} (walfs knows num.partitions, auto.create.topics.enable, "
                "message.max.bytes, log.message.timestamp.type, log.retention.ms, log.retention.bytes)"
            )
    return cfg


def retention_options(
    cfg: BrokerConfig, retention_ms: str | None, retention_bytes: str | None
) -> tuple[str | None, str | None]:
    """The WAL's retention defaults from --retention-ms/--retention-bytes and the Kafka names
    log.retention.ms/bytes (one setting, two spellings: giving both differently is refused)."""
    out = []
    for option, kafka, name in (
        (retention_ms, cfg.log_retention_ms, "retention-ms"),
        (retention_bytes, cfg.log_retention_bytes, "retention-bytes"),
    ):
        if option is not None and kafka is not None and option.strip() != kafka:
            raise ValueError(f"--{name} {option} and log.{name.replace('-', '.')}={kafka} disagree")
        out.append(option if option is not None else kafka)
    return out[0], out[1]
