"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (kafka-configs, kafka-topics
--describe, every admin client's config calls).

Topics: the configs walfs honours (walfs.kafka.topic_configs), stored in the WAL's
per-topic settings; an unknown name or an invalid value refuses the whole resource with
INVALID_CONFIG and changes nothing, as Kafka does. The broker (resource name "0", or ""
for the cluster default): its settings are shown, read-only; walfs takes them at start
(``--kafka-config``), so altering them answers INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from walfs.kafka.api import Api
from walfs.kafka.broker import NODE_ID, Broker, Connection, log
from walfs.kafka.broker_config import DEFAULT_MESSAGE_MAX_BYTES, BrokerConfig
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.topic_configs import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_TOPIC,
    SOURCE_STATIC_BROKER,
    TOPIC_CONFIGS,
    TYPE_BOOLEAN,
    TYPE_INT,
    TYPE_LIST,
    TYPE_LONG,
    TYPE_STRING,
    ConfigError,
    config_key,
    effective,
    parse_topic_config,
    store,
)
from walfs.kafka.wal_errors import error_code_for

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# The broker setting each topic config falls back to (DescribeConfigs' synonyms).
BROKER_SYNONYM = {
    "cleanup.policy": "log.cleanup.policy",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
}


def _broker_configs(broker: Broker) -> dict[str, tuple[str, int, int]]:
    """name -> (value, source, type) of the broker settings walfs has."""
    cfg = broker.config
    d = BrokerConfig()
    ret = broker.engine.retention_default

    def src(changed: bool) -> int:
        return SOURCE_STATIC_BROKER if changed else SOURCE_DEFAULT

    return {
        "auto.create.topics.enable": (
            "true" if cfg.auto_create_topics_enable else "false",
            src(cfg.auto_create_topics_enable != d.auto_create_topics_enable),
            TYPE_BOOLEAN,
        ),
        "log.cleanup.policy": ("delete", SOURCE_DEFAULT, TYPE_LIST),
        "log.dirs": (broker.engine.path, SOURCE_STATIC_BROKER, TYPE_STRING),
        "log.message.timestamp.type": (
            cfg.log_message_timestamp_type,
            src(cfg.log_message_timestamp_type != d.log_message_timestamp_type),
            TYPE_STRING,
        ),
        "log.retention.bytes": (
            "-1" if ret.bytes is None else str(ret.bytes),
            src(ret.bytes is not None),
            TYPE_LONG,
        ),
        "log.retention.ms": ("-1" if ret.ms is None else str(ret.ms), src(ret.ms is not None), TYPE_LONG),
        "message.max.bytes": (
            str(cfg.message_max_bytes),
            src(cfg.message_max_bytes != DEFAULT_MESSAGE_MAX_BYTES),
            TYPE_INT,
        ),
        "node.id": (str(NODE_ID), SOURCE_STATIC_BROKER, TYPE_INT),
        "num.partitions": (str(cfg.num_partitions), src(cfg.num_partitions != d.num_partitions), TYPE_INT),
    }


def _describe_one(broker: Broker, mod: Any, version: int, res: Any, synonyms: bool, docs: bool) -> Any:
    wanted = set(res.configuration_keys) if res.configuration_keys is not None else None

    def entry(
        name: str, value: str, source: int, ctype: int, read_only: bool, syn: list[Any], doc: str
    ) -> Any:
        return build(
            mod.DescribeConfigsResourceResult,
            name=name,
            value=value,
            read_only=read_only,
            config_source=source,
            is_default=source == SOURCE_DEFAULT,  # v0 only
            is_sensitive=False,
            synonyms=tuple(syn) if synonyms else (),
            config_type=ctype,
            documentation=doc if docs else None,
        )

    def result(code: ErrorCode, message: str | None, configs: list[Any]) -> Any:
        return build(
            mod.DescribeConfigsResult,
            error_code=code,
            error_message=message,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configs=tuple(configs),
        )

    if res.resource_type == RESOURCE_TOPIC:
        topic = res.resource_name
        if broker.catalog.partition_count(topic) == 0:
            return result(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist", [])
        eff = effective(broker.engine, broker.config, topic)
        bconf = _broker_configs(broker)
        out = []
        for name, (value, source) in sorted(eff.items()):
            if wanted is not None and name not in wanted:
                continue
            c = TOPIC_CONFIGS[name]
            syn = []
            if source == SOURCE_DYNAMIC_TOPIC:
                syn.append(build(mod.DescribeConfigsSynonym, name=name, value=value, source=source))
            bname = BROKER_SYNONYM[name]
            bvalue, bsource, _ = bconf[bname]
            syn.append(build(mod.DescribeConfigsSynonym, name=bname, value=bvalue, source=bsource))
            out.append(entry(name, value, source, c.config_type, False, syn, c.doc))
        return result(ErrorCode.none, None, out)
    if res.resource_type == RESOURCE_BROKER:
        if res.resource_name not in ("", str(NODE_ID)):
            return result(
                ErrorCode.invalid_request, f"no broker {res.resource_name!r} (walfs is broker 0)", []
            )
        out = []
        for name, (value, source, ctype) in sorted(_broker_configs(broker).items()):
            if wanted is not None and name not in wanted:
                continue
            syn = [build(mod.DescribeConfigsSynonym, name=name, value=value, source=source)]
            out.append(entry(name, value, source, ctype, True, syn, "set when walfs starts"))
        return result(ErrorCode.none, None, out)
    return result(
        ErrorCode.invalid_request, f"walfs has no configs for resource type {res.resource_type}", []
    )


async def handle_describe_configs(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(32, version)
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))
    results = [_describe_one(broker, mod, version, r, synonyms, docs) for r in req.resources]
    return build(mod.DescribeConfigsResponse, results=tuple(results))


def _resource_error(broker: Broker, res: Any) -> tuple[ErrorCode, str] | None:
    if res.resource_type == RESOURCE_BROKER:
        return (
            ErrorCode.invalid_request,
            "walfs takes broker settings when it starts (--kafka-config NAME=VALUE)",
        )
    if res.resource_type != RESOURCE_TOPIC:
        return ErrorCode.invalid_request, f"walfs has no configs for resource type {res.resource_type}"
    if broker.catalog.partition_count(res.resource_name) == 0:
        return ErrorCode.unknown_topic_or_partition, f"topic {res.resource_name!r} does not exist"
    return None


def _incremental_changes(configs: Any) -> dict[str, Any]:
    """Settings changes for IncrementalAlterConfigs' operations (ConfigError if refused)."""
    changes: dict[str, Any] = {}
    for c in configs:
        op = c.config_operation
        if op == OP_DELETE:
            changes[config_key(c.name)] = "default"
        elif op == OP_SET:
            key, value = parse_topic_config(c.name, c.value)
            changes[key] = value
        elif op in (OP_APPEND, OP_SUBTRACT):
            tc = TOPIC_CONFIGS.get(c.name)
            if tc is None or tc.config_type != TYPE_LIST:
                raise ConfigError(f"Config value append/subtract is not allowed for config key {c.name}")
            if op == OP_SUBTRACT:
                raise ConfigError(
                    f"{c.name}: delete is the only cleanup policy walfs has; it cannot be removed"
                )
            key, value = parse_topic_config(c.name, c.value)
            changes[key] = value
        else:
            raise ValueError(f"unknown config operation {op}")
    return changes


async def _alter(
    broker: Broker, conn: Connection, res: Any, changes_of: Any, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    problem = _resource_error(broker, res)
    if problem is not None:
        return problem
    try:
        changes = changes_of(res.configs)
    except ConfigError as e:
        return ErrorCode.invalid_config, str(e)
    except ValueError as e:
        return ErrorCode.invalid_request, str(e)
    if validate_only or not changes:
        return ErrorCode.none, None
    try:
        await broker.blocking(store, broker.engine, res.resource_name, changes)
    except Exception as e:
        return error_code_for(e, f"alter configs of {res.resource_name}"), str(e)
    log.info("%s: topic %s configs: %s", conn.peer, res.resource_name, changes)
    return ErrorCode.none, None


def _replacing_changes(configs: Any) -> dict[str, Any]:
    """AlterConfigs replaces a topic's whole config: unnamed configs go back to defaults."""
    changes: dict[str, Any] = {c.key: "default" for c in TOPIC_CONFIGS.values()}
    for c in configs:
        key, value = parse_topic_config(c.name, c.value)
        changes[key] = value
    return changes


async def handle_alter_configs(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    return await _alter_all(broker, conn, 33, version, req, _replacing_changes, "AlterConfigsResponse")


async def handle_incremental_alter_configs(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    return await _alter_all(
        broker, conn, 44, version, req, _incremental_changes, "IncrementalAlterConfigsResponse"
    )


async def _alter_all(
    broker: Broker, conn: Connection, api_key: int, version: int, req: Any, changes: Any, response: str
) -> Any:
    """AlterConfigs and IncrementalAlterConfigs differ only in how a resource's entries
    become changes (replace every setting, or set/delete the named ones)."""
    mod = response_module(api_key, version)
    out = []
    for res in req.resources:
        code, message = await _alter(broker, conn, res, changes, req.validate_only)
        out.append(
            build(
                mod.AlterConfigsResourceResponse,
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return build(getattr(mod, response), responses=tuple(out))


HANDLERS = {
    32: Api("DescribeConfigs", 1, 4, handle_describe_configs),
    33: Api("AlterConfigs", 0, 2, handle_alter_configs),
    44: Api("IncrementalAlterConfigs", 0, 1, handle_incremental_alter_configs),
}
