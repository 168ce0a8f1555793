"""Kafka topic configs: which ones walfs honours, how they are checked, where they live.

A topic's configs are stored in the WAL's per-topic settings (walfs.engine.settings's
rules; the local engine's topics.conf, walfs/local/settings_file.py), so they survive restarts and are the
same settings the mount's xattrs show. Kafka's names map onto them:

| Kafka topic config | settings key | values |
|---|---|---|
| retention.ms | retention_ms | -1 (keep everything) or ms >= 0 |
| retention.bytes | retention_bytes | -1 (no size limit) or bytes >= 0, per partition |
| max.message.bytes | max_message_bytes | 0..2^31-1: the largest record batch a produce may send |
| message.timestamp.type | message_timestamp_type | CreateTime or LogAppendTime |
| cleanup.policy | cleanup_policy | delete (compact is refused: walfs does not compact) |

Every other name is refused with INVALID_CONFIG, as Kafka refuses names it does not know:
a config a client asked for and walfs silently ignored would be a lie.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from walfs.kafka.broker_config import DEFAULT_MESSAGE_MAX_BYTES, BrokerConfig

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine

# DescribeConfigs' config_source values (Kafka's ConfigSource).
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
# DescribeConfigs' config_type values (Kafka's ConfigType).
TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3
TYPE_LONG = 5
TYPE_LIST = 7


class ConfigError(ValueError):
    """A config Kafka would answer with INVALID_CONFIG; the message says why."""


def _long_limit(name: str, text: str | None) -> int | None:
    """-1 (none) or a non-negative count, as Kafka spells retention limits."""
    try:
        v = int(str(text).strip())
    except ValueError:
        raise ConfigError(
            f"Invalid value {text} for configuration {name}: Not a number of type LONG"
        ) from None
    if v < -1:
        raise ConfigError(f"Invalid value {text} for configuration {name}: Value must be at least -1")
    return None if v == -1 else v


def _int_bytes(name: str, text: str | None) -> int:
    try:
        v = int(str(text).strip())
    except ValueError:
        raise ConfigError(
            f"Invalid value {text} for configuration {name}: Not a number of type INT"
        ) from None
    if not 0 <= v < 2**31:
        raise ConfigError(f"Invalid value {text} for configuration {name}: Value must be at least 0")
    return v


def _timestamp_type(name: str, text: str | None) -> str:
    if text not in ("CreateTime", "LogAppendTime"):
        raise ConfigError(
            f"Invalid value {text} for configuration {name}: String must be one of: CreateTime, LogAppendTime"
        )
    return text


def _cleanup_policy(name: str, text: str | None) -> str:
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if parts == ["delete"]:
        return "delete"
    if "compact" in parts:
        raise ConfigError(
            f"Invalid value {text} for configuration {name}: walfs does not compact topics; "
            "only cleanup.policy=delete is supported"
        )
    raise ConfigError(f"Invalid value {text} for configuration {name}: the only supported value is delete")


@dataclass(frozen=True)
class TopicConfig:
    name: str  # Kafka's
    key: str  # walfs.engine.settings's settings key
    parse: Callable[[str, str | None], Any]  # Kafka text -> stored value (ConfigError if invalid)
    config_type: int
    doc: str


TOPIC_CONFIGS: dict[str, TopicConfig] = {
    c.name: c
    for c in (
        TopicConfig(
            "cleanup.policy", "cleanup_policy", _cleanup_policy, TYPE_LIST, "delete only (no compaction)"
        ),
        TopicConfig(
            "max.message.bytes",
            "max_message_bytes",
            _int_bytes,
            TYPE_INT,
            "the largest record batch a produce may send",
        ),
        TopicConfig(
            "message.timestamp.type",
            "message_timestamp_type",
            _timestamp_type,
            TYPE_STRING,
            "CreateTime keeps the producer's timestamps, LogAppendTime stamps records with the append time",
        ),
        TopicConfig(
            "retention.bytes",
            "retention_bytes",
            _long_limit,
            TYPE_LONG,
            "bytes a partition keeps (its byte view, from its end); -1: no limit",
        ),
        TopicConfig(
            "retention.ms", "retention_ms", _long_limit, TYPE_LONG, "how long records are kept; -1: forever"
        ),
    )
}


def config_key(name: str) -> str:
    """The settings key of a Kafka topic config; ConfigError for names walfs does not honour."""
    c = TOPIC_CONFIGS.get(name)
    if c is None:
        raise ConfigError(
            f"walfs does not support the topic config {name!r} "
            f"(supported: {', '.join(sorted(TOPIC_CONFIGS))})"
        )
    return c.key


def parse_topic_config(name: str, value: str | None) -> tuple[str, Any]:
    """(settings key, stored value) for one Kafka topic config; ConfigError when Kafka would
    answer INVALID_CONFIG (an unknown name, a bad value, a config walfs does not honour)."""
    config_key(name)
    c = TOPIC_CONFIGS[name]
    if value is None:
        raise ConfigError(f"Invalid value null for configuration {name}")
    return c.key, c.parse(name, value)


def parse_topic_configs(configs: list[tuple[str, str | None]]) -> dict[str, Any]:
    """Settings to store for a list of (name, value) pairs, every one checked first."""
    out = {}
    for name, value in configs:
        key, v = parse_topic_config(name, value)
        out[key] = v
    return out


def _shown(v: Any) -> str:
    if v is None:
        return "-1"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def broker_defaults(engine: LogEngine, cfg: BrokerConfig) -> dict[str, tuple[str, int]]:
    """Each topic config's broker-wide value and its source (a topic without an override)."""
    d = engine.retention_default
    return {
        "cleanup.policy": ("delete", SOURCE_DEFAULT),
        "max.message.bytes": (
            str(cfg.message_max_bytes),
            SOURCE_DEFAULT if cfg.message_max_bytes == DEFAULT_MESSAGE_MAX_BYTES else SOURCE_STATIC_BROKER,
        ),
        "message.timestamp.type": (
            cfg.log_message_timestamp_type,
            SOURCE_DEFAULT if cfg.log_message_timestamp_type == "CreateTime" else SOURCE_STATIC_BROKER,
        ),
        "retention.bytes": (_shown(d.bytes), SOURCE_DEFAULT if d.bytes is None else SOURCE_STATIC_BROKER),
        "retention.ms": (_shown(d.ms), SOURCE_DEFAULT if d.ms is None else SOURCE_STATIC_BROKER),
    }


def effective(engine: LogEngine, cfg: BrokerConfig, topic: str) -> dict[str, tuple[str, int]]:
    """Every topic config walfs honours for ``topic``: name -> (value as Kafka shows it, source)."""
    out = broker_defaults(engine, cfg)
    overrides = engine.settings(topic)
    for c in TOPIC_CONFIGS.values():
        if c.key in overrides:
            out[c.name] = (_shown(overrides[c.key]), SOURCE_DYNAMIC_TOPIC)
    return out


def max_message_bytes(engine: LogEngine, cfg: BrokerConfig, topic: str) -> int:
    v = engine.settings(topic).get("max_message_bytes")
    return cfg.message_max_bytes if v is None else int(v)


def log_append_time(engine: LogEngine, cfg: BrokerConfig, topic: str) -> bool:
    """True when the topic stamps records with their append time (LogAppendTime)."""
    v = engine.settings(topic).get("message_timestamp_type") or cfg.log_message_timestamp_type
    return bool(v == "LogAppendTime")


def store(engine: LogEngine, topic: str, values: dict[str, Any]) -> None:
    """Persists settings in one durable write (a value "default" removes the override),
    through LogEngine.set_settings, which also drops the engine's cached size limits."""
    engine.set_settings(topic, **values)
