"""Names: validation of topics, groups and partitions, and the org-salted topic hash."""

import blake3

from walfs.errors import InvalidPartitionError, InvalidTopicError

MAX_NAME_BYTES = 249  # Kafka's limit, so every walfs topic is also a valid Kafka topic
MAX_PARTITION = 2**31 - 1
# The mount's own names: its consumer-group directory and its partition directories.
CONSUMERS_DIR = ".consumers"
PARTITION_PREFIX = "partition="
# What Kafka itself allows in a topic name (clients check it too).
_KAFKA_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def topic_bytes(topic: str) -> bytes:
    """The one name rule (topics and consumer groups, on every face: the Python API, the
    mount, the Kafka wire): a non-empty UTF-8 name of at most 249 bytes, without '/' or
    NUL, neither '.' nor '..', and none of the mount's own names (`.consumers`, anything
    starting with `partition=`), which a file tree could not show. Returns its UTF-8."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a str, not {type(topic).__name__}")
    try:
        raw = topic.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidTopicError(f"topic name {topic!r} is not valid UTF-8") from None
    if not raw:
        raise InvalidTopicError("topic name is empty")
    if len(raw) > MAX_NAME_BYTES:
        raise InvalidTopicError(f"topic name is {len(raw)} bytes, the maximum is {MAX_NAME_BYTES}")
    if topic in (".", ".."):
        raise InvalidTopicError(f"{topic!r} cannot be a topic name")
    if "/" in topic or "\0" in topic:
        raise InvalidTopicError(f"topic name {topic!r} contains '/' or NUL")
    if topic == CONSUMERS_DIR or topic.startswith(PARTITION_PREFIX):
        raise InvalidTopicError(f"{topic!r} is reserved for the mount's own directories")
    return raw


def name_error(topic: str) -> str | None:
    """Why `topic` breaks the name rule, or None."""
    try:
        topic_bytes(topic)
    except InvalidTopicError as e:
        return str(e)
    return None


def kafka_topic_error(topic: str) -> str | None:
    """The name rule, plus Kafka's own alphabet ([A-Za-z0-9._-]) for topics created over
    the wire, since Kafka clients refuse other names themselves."""
    err = name_error(topic)
    if err is None and not set(topic) <= _KAFKA_CHARS:
        err = f"topic name {topic!r}: Kafka topic names use [A-Za-z0-9._-]"
    return err


def check_partition(partition: int) -> int:
    if not isinstance(partition, int) or isinstance(partition, bool):
        raise InvalidPartitionError(f"partition must be an int, not {type(partition).__name__}")
    if not 0 <= partition <= MAX_PARTITION:
        raise InvalidPartitionError(f"partition {partition} is outside 0..{MAX_PARTITION}")
    return partition


def check_org_id(org_id: int) -> int:
    """An org (tenant) id: an int (not a bool) in 0..2**63-1 (ValueError otherwise)."""
    if not isinstance(org_id, int) or isinstance(org_id, bool) or not 0 <= org_id < 2**63:
        raise ValueError(f"org_id must be an int in 0..2**63-1, not {org_id!r}")
    return org_id


def topic_hash(org_id: int, topic: str) -> bytes:
    """blake3 of the org id and the name, truncated to 128 bits: two orgs' topics of the
    same name never share a hash."""
    return blake3.blake3(org_id.to_bytes(8, "little") + topic_bytes(topic)).digest(length=16)


def stream_key(org_id: int, thash: bytes, partition: int) -> str:
    """The virtual topic key, "{org_id}-{topic_hash}-{partition}" (hash in hex)."""
    return f"{org_id}-{thash.hex()}-{partition}"
