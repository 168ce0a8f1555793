"""Names: validation of topics, groups and partitions, and the org-salted topic hash."""

import blake3

from walfs.errors import InvalidPartitionError, InvalidTopicError

MAX_NAME_BYTES = 249  # Kafka's limit, so every walfs topic is also a valid Kafka topic
MAX_PARTITION = 2**31 - 1


def topic_bytes(topic: str) -> bytes:
    """The UTF-8 name, after checking that walfs can store it and show it as a file."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a str, not {type(topic).__name__}")
    raw = topic.encode("utf-8", "surrogateescape")
    if not raw:
        raise InvalidTopicError("topic name is empty")
    if len(raw) > MAX_NAME_BYTES:
        raise InvalidTopicError(f"topic name is {len(raw)} bytes, the maximum is {MAX_NAME_BYTES}")
    if topic in (".", ".."):
        raise InvalidTopicError(f"{topic!r} cannot be a topic name")
    if "/" in topic or "\0" in topic:
        raise InvalidTopicError(f"topic name {topic!r} contains '/' or NUL")
    return raw


def check_partition(partition: int) -> int:
    if not isinstance(partition, int) or isinstance(partition, bool):
        raise InvalidPartitionError(f"partition must be an int, not {type(partition).__name__}")
    if not 0 <= partition <= MAX_PARTITION:
        raise InvalidPartitionError(f"partition {partition} is outside 0..{MAX_PARTITION}")
    return partition


def topic_hash(org_id: int, topic: str) -> bytes:
    """blake3 of the org id and the name, truncated to 128 bits: two orgs' topics of the
    same name never share a hash."""
    return blake3.blake3(org_id.to_bytes(8, "little") + topic_bytes(topic)).digest(length=16)


def stream_key(org_id: int, thash: bytes, partition: int) -> str:
    """The virtual topic key, "{org_id}-{topic_hash}-{partition}" (hash in hex)."""
    return f"{org_id}-{thash.hex()}-{partition}"
