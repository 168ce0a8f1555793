"""Options of the walfs Spark source, parsed once on the driver into plain data.

Names follow Spark's Kafka source where the meaning is the same, so a pipeline written
for Kafka carries over by changing `format("kafka")` to `format("walfs")`:

- `path`: the walfs data directory (the same directory `walfs mount` serves), read
  directly on the machine(s) that hold it, or a walfs mount point (its data
  directory, and its --org-id unless `org_id` is given); or
- `bootstrap`: "host:port" of a walfs daemon's Kafka listener (`walfs serve`, `walfs
  mount --kafka-listen`), read over the network from any machine. One of the two is
  required; with both, `bootstrap` wins (the daemon owns the directory).
- `topic` (alias `subscribe`): a comma-separated list of topic names; an entry holding
  `*`, `?` or `[` is a shell-style glob matched against the org's topics (fnmatch,
  case-sensitive). Absent: every topic of the org.
- `topicPattern` (alias `subscribePattern`): a Python regular expression matched against
  the whole topic name (re.fullmatch). Combined with `topic` by union.
- `startingOffsets` / `endingOffsets`: "earliest", "latest", or JSON
  {"topic": {"0": 23, "1": -2}} with -2 meaning earliest and -1 latest. Partitions the
  JSON leaves out start at earliest and end at latest. startingOffsets defaults to
  "earliest" for a batch and "latest" for a stream (as in Kafka); endingOffsets (batch
  only) to "latest".
- `org_id`: the tenant whose topics are read (default 1).
- `maxRecordsPerPartition` / `maxBytesPerPartition`: bound on one input partition (one
  Spark task), so one large stream is spread over all cores.
- `maxOffsetsPerTrigger`: streaming only, the most records one micro-batch takes.
- `failOnDataLoss`: "true" (default) fails when a requested offset was trimmed away;
  "false" skips to the first record still stored.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from walfs.common.addresses import parse_bootstrap
from walfs.engine.names import name_error
from walfs.engine.targets import is_local

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_MAX_BYTES_PER_PARTITION = 128 << 20

# A read position of one stream: (topic, partition).
StreamId = tuple[str, int]


class WalfsOptionError(ValueError):
    """An option of format("walfs") is missing or malformed."""


@dataclass(frozen=True)
class OffsetSpec:
    """ "earliest", "latest" or explicit per-partition offsets (EARLIEST/LATEST allowed)."""

    default: int  # EARLIEST or LATEST: for partitions not named in `explicit`
    explicit: Mapping[StreamId, int]

    def for_stream(self, stream: StreamId, missing: int) -> int:
        """The spec of one stream; `missing` applies to streams a JSON spec leaves out."""
        if stream in self.explicit:
            return self.explicit[stream]
        return missing if self.explicit else self.default


@dataclass(frozen=True)
class WalfsOptions:
    path: str  # "" when reading through `bootstrap`
    org_id: int
    topics: tuple[str, ...]
    topic_pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_records_per_partition: int
    max_bytes_per_partition: int
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    bootstrap: str | None = None

    def selects(self, topic: str) -> bool:
        """Whether `topic` is one this source reads."""
        if not self.topics and self.topic_pattern is None:
            return True
        for t in self.topics:
            if t == topic or (_is_glob(t) and fnmatch.fnmatchcase(topic, t)):
                return True
        return self.topic_pattern is not None and re.fullmatch(self.topic_pattern, topic) is not None

    def select(self, existing: Iterable[str]) -> list[str]:
        """The selected topics among `existing`, sorted (names listed but absent are skipped)."""
        return sorted(t for t in set(existing) if self.selects(t))


def _is_glob(s: str) -> bool:
    return any(c in s for c in "*?[")


def _get(options: Mapping[str, str], *names: str) -> str | None:
    # Spark hands options over case-insensitively (CaseInsensitiveDict): plain lookups work,
    # but a plain dict from a unit test may not be, so fold the case here as well.
    lowered = {k.lower(): v for k, v in options.items()}
    for n in names:
        if n.lower() in lowered:
            return lowered[n.lower()]
    return None


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise WalfsOptionError(f"option {name} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise WalfsOptionError(f"option {name} must be positive, not {value}")
    return value


def parse_offset_spec(raw: str | None, name: str, default: int) -> OffsetSpec:
    """Parses startingOffsets/endingOffsets like Spark's Kafka source does."""
    if raw is None:
        return OffsetSpec(default, {})
    text = raw.strip()
    if text.lower() == "earliest":
        return OffsetSpec(EARLIEST, {})
    if text.lower() == "latest":
        return OffsetSpec(LATEST, {})
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise WalfsOptionError(f'{name} must be "earliest", "latest" or JSON, not {raw!r}: {e}') from None
    if not isinstance(doc, dict):
        raise WalfsOptionError(f'{name} JSON must be an object like {{"topic": {{"0": 23}}}}, not {raw!r}')
    explicit: dict[StreamId, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise WalfsOptionError(
                f"{name}: the value of topic {topic!r} must be an object of partition -> offset"
            )
        for part, off in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise WalfsOptionError(f"{name}: partition {part!r} of {topic!r} is not an integer") from None
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                raise WalfsOptionError(
                    f"{name}: offset of {topic!r}[{p}] must be an integer >= -2, not {off!r}"
                )
            explicit[(topic, p)] = off
    return OffsetSpec(default, explicit)


def parse_options(options: Mapping[str, str], streaming: bool = False) -> WalfsOptions:
    """Validates every option up front, so a typo fails at planning, not inside a task.

    Like Kafka's source, a stream starts at "latest" unless told otherwise (a new query
    sees new records only) and a batch at "earliest"."""
    path, bootstrap, org = _location(options)
    org_id = _org_id(options, org)
    raw_topics = _get(options, "topic", "subscribe") or ""
    topics = tuple(t.strip() for t in raw_topics.split(",") if t.strip())
    pattern = _get(options, "topicPattern", "subscribePattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise WalfsOptionError(f"option topicPattern is not a valid regular expression: {e}") from None
    fail = (_get(options, "failOnDataLoss") or "true").strip().lower()
    if fail not in ("true", "false"):
        raise WalfsOptionError(f'option failOnDataLoss must be "true" or "false", not {fail!r}')
    max_records = _positive_int(options, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION)
    max_bytes = _positive_int(options, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION)
    assert max_records is not None and max_bytes is not None
    return WalfsOptions(
        path=path,
        org_id=org_id,
        topics=topics,
        topic_pattern=pattern,
        starting=parse_offset_spec(
            _get(options, "startingOffsets"), "startingOffsets", LATEST if streaming else EARLIEST
        ),
        ending=parse_offset_spec(_get(options, "endingOffsets"), "endingOffsets", LATEST),
        max_records_per_partition=max_records,
        max_bytes_per_partition=max_bytes,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger", None),
        fail_on_data_loss=fail == "true",
        bootstrap=bootstrap,
    )


def _location(options: Mapping[str, str]) -> tuple[str, str | None, int]:
    """(data directory or "", bootstrap or None, the org when the options name none):
    where the records are. A walfs mount point stands for its data directory, and
    its org (--org-id) is then the default (mounted_data_dir)."""
    path = _get(options, "path") or ""
    bootstrap = _get(options, "bootstrap", "kafka.bootstrap.servers")
    if bootstrap is not None:
        try:
            parse_bootstrap(bootstrap)
        except ValueError as e:
            raise WalfsOptionError(str(e)) from None
    if not path and not bootstrap:
        raise WalfsOptionError(
            'format("walfs") needs the data directory (.option("path", DIR) or .load(DIR)) or a '
            'walfs daemon\'s Kafka listener (.option("bootstrap", "host:port"))'
        )
    org = DEFAULT_ORG_ID
    if path and not bootstrap:
        mounted = mounted_data_dir(path)
        if mounted is not None:
            path, org = mounted
    return path, bootstrap, org


# The root of a walfs mount names its data directory and org (walfs.fuse.operations).
MOUNT_DATA_DIR_XATTR = "user.walfs.data_dir"
MOUNT_ORG_XATTR = "user.walfs.org_id"


def mounted_data_dir(path: str) -> tuple[str, int] | None:
    """(data directory, org) of a walfs mount point `path` (its root's xattrs), None
    for any other path."""
    if not is_local(path):
        return None  # a cluster target
    try:
        data_dir = os.getxattr(path, MOUNT_DATA_DIR_XATTR).decode()
        org = int(os.getxattr(path, MOUNT_ORG_XATTR))
    except OSError as e:
        if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            raise WalfsOptionError(f"{path} is a walfs mount whose daemon is gone: {e}") from None
        return None  # no such attribute (ENODATA, ENOTSUP): not a mount; a missing path fails later
    except ValueError:
        return None
    return data_dir, org


DEFAULT_ORG_ID = 1


def _org_id(options: Mapping[str, str], default: int = DEFAULT_ORG_ID) -> int:
    raw_org = _get(options, "org_id", "orgId")
    if raw_org is None:
        return default
    try:
        return int(raw_org)
    except ValueError:
        raise WalfsOptionError(f"option org_id must be an integer, not {raw_org!r}") from None


@dataclass(frozen=True)
class SinkOptions:
    """Options of df.write / df.writeStream .format("walfs") (see walfs.spark.sink)."""

    path: str
    bootstrap: str | None
    org_id: int
    topic: str | None  # overrides the rows' topic column, as in Spark's Kafka sink
    query_id: str | None  # streaming: the query's identity for exactly-once (see sink.py)
    checkpoint: str | None
    # Tests only (option "walfs.test.failAfterAppend" = "PARTITION:ATTEMPTS"): the batch
    # write task of that Spark partition fails after appending, in its first ATTEMPTS
    # attempts, as a task killed after its append and before Spark recorded it would.
    fail_after_append: tuple[int, int] | None = None
    # Benchmarks only (option "walfs.bench.phases" = a file): each batch write task adds
    # a line with the time it spent in each phase (walfs.spark.sink_phases).
    phases: str | None = None


def _fault_point(options: Mapping[str, str]) -> tuple[int, int] | None:
    raw = _get(options, "walfs.test.failAfterAppend")
    if raw is None:
        return None
    try:
        part, attempts = raw.split(":")
        return int(part), int(attempts)
    except ValueError as e:
        raise WalfsOptionError(f"option walfs.test.failAfterAppend: PARTITION:ATTEMPTS, not {raw!r}") from e


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    path, bootstrap, org = _location(options)
    topic = _get(options, "topic")
    if topic is not None:
        err = name_error(topic)
        if err:
            raise WalfsOptionError(f"option topic: {err}")
    return SinkOptions(
        path=path,
        bootstrap=bootstrap,
        org_id=_org_id(options, org),
        topic=topic,
        query_id=_get(options, "queryId"),
        checkpoint=_get(options, "checkpointLocation"),
        fail_after_append=_fault_point(options),
        phases=_get(options, "walfs.bench.phases"),
    )
