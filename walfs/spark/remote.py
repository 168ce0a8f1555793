"""A walfs daemon's Kafka listener as the Spark source and sink use it (option "bootstrap"),
or its local socket (walfs.common.local_socket: the sink's option "path" into a directory a
daemon owns).

A small blocking client over one TCP (or local socket) connection, built on kio's message classes (the
listener's own codec library) and walfs' own record-batch code: Metadata (topics and
partition counts), ListOffsets (earliest / latest), Fetch (raw record batches),
Produce (one batch per partition, acks=all: atomic and durable when answered),
OffsetCommit / OffsetFetch (the sink's per-query cursors), CreateTopics and
DescribeConfigs (the largest batch a Produce may send).

Everything read from the socket is bounds-checked: a frame is at most MAX_FRAME bytes,
errors the daemon answers become RemoteError with the Kafka error name.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from walfs.common.addresses import parse_bootstrap
from walfs.errors import WalError

# kio (the listener's message classes) imports hypothesis when it is installed (a test
# extra), only to register test strategies walfs never uses: over a second in every Spark
# Python worker that plans, reads or writes through a daemon. It is hidden while kio loads
# (kio then skips the registration), unless either is loaded already (nothing changes).
_hide_hypothesis = "hypothesis" not in sys.modules and "kio" not in sys.modules
if _hide_hypothesis:
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # its import fails: ImportError
try:
    from kio.index import load_payload_module
    from kio.schema.errors import ErrorCode
    from kio.schema.types import BrokerId, GroupId, TopicName
    from kio.serial import entity_reader, entity_writer
    from kio.static.constants import EntityType
    from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
finally:
    if _hide_hypothesis:
        del sys.modules["hypothesis"]

# A response is refused past this size (Fetch asks for far less; see FETCH_MAX_BYTES).
MAX_FRAME = 256 << 20
# The most buffers one sendmsg takes (Linux's IOV_MAX).
IOV_MAX = 1024
Bytes = bytes | bytearray | memoryview
FETCH_MAX_BYTES = 16 << 20
EARLIEST = -2
LATEST = -1

# (api key, version) used for each request: versions every walfs listener answers.
PRODUCE = (0, 8)
FETCH = (1, 11)
LIST_OFFSETS = (2, 5)
METADATA = (3, 8)
OFFSET_COMMIT = (8, 7)
OFFSET_FETCH = (9, 5)
CREATE_TOPICS = (19, 4)
CREATE_PARTITIONS = (37, 3)
DESCRIBE_CONFIGS = (32, 4)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


@dataclass(frozen=True)
class FetchInFlight:
    """A Fetch sent, its answer not yet received (RemoteWal.fetch_ahead)."""

    topic: str
    partition: int
    offset: int
    cid: int


@dataclass(frozen=True, eq=False)
class ProduceInFlight:
    """A Produce sent, its answer not yet received (RemoteWal.produce_ahead)."""

    topic: str
    partition: int
    cid: int


class RemoteError(WalError):
    """The daemon answered with a Kafka error code, or the connection failed."""


def _req(api: tuple[int, int], name: str) -> Any:
    return getattr(load_payload_module(api[0], api[1], EntityType.request), name)


def _resp(api: tuple[int, int]) -> Any:
    return load_payload_module(api[0], api[1], EntityType.response)


def _check(code: Any, what: str) -> None:
    if code != ErrorCode.none:
        name = getattr(code, "name", str(code))
        raise RemoteError(f"{what}: the walfs daemon answered {name}")


class RemoteWal:
    """One connection to a walfs daemon's Kafka listener (not thread-safe: one user)."""

    def __init__(
        self,
        bootstrap: str,
        timeout: float = 120.0,
        *,
        sock: socket.socket | None = None,
        client_id: str = "walfs-spark",
    ) -> None:
        """A connection to "host:port"; or, with `sock`, over that connected socket
        (`bootstrap` then only names it in errors: a daemon's local socket,
        walfs.spark.sink_target.daemon_target)."""
        self.bootstrap = bootstrap
        self.client_id = client_id
        if sock is not None:
            self._sock = sock
        else:
            host, port = parse_bootstrap(bootstrap)
            try:
                self._sock = socket.create_connection((host, port), timeout=timeout)
            except OSError as e:
                raise RemoteError(f"cannot connect to the walfs daemon at {bootstrap}: {e}") from e
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self._lock = threading.Lock()
        self._ahead: FetchInFlight | None = None
        self._produces: deque[ProduceInFlight] = deque()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RemoteWal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- framing --------------------------------------------------------------------
    def _recv_exact(self, n: int) -> memoryview:
        """n bytes from the socket, read into one buffer (a read-only view of it: no copy)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise RemoteError(f"the walfs daemon at {self.bootstrap} closed the connection")
            got += k
        return view.toreadonly()

    def _call(self, api: tuple[int, int], body: Any, tail: Sequence[Bytes] = ()) -> Any:
        with self._lock:
            if self._ahead is not None:
                raise RemoteError("a Fetch sent ahead has not been received (RemoteWal.fetch_result)")
            if self._produces:
                raise RemoteError("a Produce sent ahead has not been answered (RemoteWal.produce_result)")
            return self._receive(api, type(body), self._send(api, body, tail))

    def _send(self, api: tuple[int, int], body: Any, tail: Sequence[Bytes] = ()) -> int:
        """Sends one request; its correlation id. `tail`: the bytes of the request's last
        field, a bytes field that `body` holds empty (b""), sent as they are after the
        rest of the request (no copy: a Produce's record batches)."""
        self._correlation += 1
        cid = self._correlation
        header_cls = type(body).__header_schema__
        out = io.BytesIO()
        entity_writer(header_cls)(
            out,
            header_cls(
                request_api_key=i16(api[0]),
                request_api_version=i16(api[1]),
                correlation_id=i32(cid),
                client_id=self.client_id,
            ),
        )
        entity_writer(type(body))(out, body)
        payload = out.getbuffer()  # a view: a Produce's batches are not copied again
        parts: list[Bytes] = [payload]
        if tail:
            # The empty last field is its i32 length (0): the tail's length instead.
            assert payload[-4:] == b"\0\0\0\0", "the request's last field is not empty bytes"
            parts = [payload[:-4], struct.pack(">i", sum(map(len, tail))), *tail]
        size = sum(map(len, parts))
        try:
            self._sendall([struct.pack(">i", size), *parts])
        except OSError as e:
            raise RemoteError(f"the walfs daemon at {self.bootstrap}: {e}") from e
        return cid

    def _sendall(self, parts: list[Bytes]) -> None:
        """Sends the parts one after the other, in as few system calls as they take."""
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        while views:
            sent = self._sock.sendmsg(views[:IOV_MAX])
            while views and sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            if sent:
                views[0] = views[0][sent:]

    def _receive(self, api: tuple[int, int], body_cls: type, cid: int) -> Any:
        """The answer to request `cid` (the next frame on the connection), decoded."""
        try:
            (size,) = struct.unpack(">i", self._recv_exact(4))
            if not 4 <= size <= MAX_FRAME:
                raise RemoteError(f"the walfs daemon at {self.bootstrap} sent a frame of {size} bytes")
            frame = self._recv_exact(size)
        except OSError as e:
            raise RemoteError(f"the walfs daemon at {self.bootstrap}: {e}") from e
        resp_cls = getattr(_resp(api), body_cls.__name__.replace("Request", "Response"))
        try:
            header, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
            if header.correlation_id != cid:
                raise RemoteError(f"answer to request {header.correlation_id}, expected {cid}")
            resp, _ = entity_reader(resp_cls)(frame, used)
        except RemoteError:
            raise
        except Exception as e:  # kio raises several types for a malformed answer
            raise RemoteError(f"malformed answer from {self.bootstrap}: {e}") from e
        return resp

    # -- requests -------------------------------------------------------------------
    def topics(self, names: list[str] | None = None) -> dict[str, int]:
        """Topic -> partition count, of every topic (or of `names`; absent ones left out)."""
        req = _req(METADATA, "MetadataRequest")
        topic_cls = _req(METADATA, "MetadataRequestTopic")
        topics = None if names is None else tuple(topic_cls(name=TopicName(n)) for n in names)
        resp = self._call(
            METADATA,
            req(
                topics=topics,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            ),
        )
        out: dict[str, int] = {}
        for t in resp.topics:
            if t.error_code == ErrorCode.none:
                out[str(t.name)] = len(t.partitions)
        return out

    def list_offsets(self, streams: list[tuple[str, int]], which: int) -> dict[tuple[str, int], int]:
        """EARLIEST (low watermark) or LATEST (the durable end) of each stream."""
        if not streams:
            return {}
        part_cls = _req(LIST_OFFSETS, "ListOffsetsPartition")
        topic_cls = _req(LIST_OFFSETS, "ListOffsetsTopic")
        by_topic: dict[str, list[int]] = {}
        for t, p in streams:
            by_topic.setdefault(t, []).append(p)
        req = _req(LIST_OFFSETS, "ListOffsetsRequest")(
            replica_id=BrokerId(-1),
            isolation_level=i8(0),
            topics=tuple(
                topic_cls(
                    name=TopicName(t),
                    partitions=tuple(
                        part_cls(partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(which))
                        for p in ps
                    ),
                )
                for t, ps in by_topic.items()
            ),
        )
        out: dict[tuple[str, int], int] = {}
        for t in self._call(LIST_OFFSETS, req).topics:
            for p in t.partitions:
                _check(p.error_code, f"offsets of {t.name!r}[{p.partition_index}]")
                out[(str(t.name), int(p.partition_index))] = int(p.offset)
        return out

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = FETCH_MAX_BYTES) -> bytes:
        """Raw record batches from `offset` on (empty at the end); no long poll."""
        return self.fetch_result(self.fetch_ahead(topic, partition, offset, max_bytes))

    def fetch_ahead(
        self, topic: str, partition: int, offset: int, max_bytes: int = FETCH_MAX_BYTES
    ) -> FetchInFlight:
        """Sends a Fetch without waiting for its answer (fetch_result gets it), so the
        daemon reads the next records while the caller decodes the last ones. One at a
        time: no other request goes out until its answer is received."""
        part_cls = _req(FETCH, "FetchPartition")
        topic_cls = _req(FETCH, "FetchTopic")
        req = _req(FETCH, "FetchRequest")(
            replica_id=BrokerId(-1),
            max_wait=i32Timedelta.parse(datetime.timedelta(0)),
            min_bytes=i32(0),
            max_bytes=i32(max_bytes),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                topic_cls(
                    topic=TopicName(topic),
                    partitions=(
                        part_cls(
                            partition=i32(partition),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(max_bytes),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        with self._lock:
            if self._ahead is not None:
                raise RemoteError("a Fetch sent ahead has not been received (RemoteWal.fetch_result)")
            if self._produces:
                raise RemoteError("a Produce sent ahead has not been answered (RemoteWal.produce_result)")
            self._ahead = FetchInFlight(topic, partition, offset, self._send(FETCH, req))
            return self._ahead

    def fetch_result(self, ahead: FetchInFlight) -> bytes:
        """The records of a Fetch sent with fetch_ahead."""
        with self._lock:
            if self._ahead is not ahead:
                raise RemoteError("fetch_result of a Fetch that is not the one outstanding")
            self._ahead = None
            resp = self._receive(FETCH, _req(FETCH, "FetchRequest"), ahead.cid)
        what = f"fetch {ahead.topic!r}[{ahead.partition}]"
        _check(resp.error_code, what)
        for t in resp.responses:
            for p in t.partitions:
                _check(p.error_code, f"{what} at {ahead.offset}")
                return bytes(p.records or b"")
        raise RemoteError(f"{what}: the answer names no partition")

    def produce(self, topic: str, partition: int, batches: Sequence[Bytes]) -> int:
        """Appends record batches, sent back to back without being joined (atomically,
        durably: acks=all); the first one's first offset."""
        return self.produce_result(self.produce_ahead(topic, partition, batches))

    def produce_ahead(self, topic: str, partition: int, batches: Sequence[Bytes]) -> ProduceInFlight:
        """Sends a Produce (as `produce`) without waiting for its answer: several may be
        outstanding on the connection (the listener answers them in order), and no other
        request goes out until produce_result has received each of them."""
        part_cls = _req(PRODUCE, "PartitionProduceData")
        topic_cls = _req(PRODUCE, "TopicProduceData")
        req = _req(PRODUCE, "ProduceRequest")(
            transactional_id=None,
            acks=i16(-1),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            topic_data=(
                topic_cls(
                    name=TopicName(topic), partition_data=(part_cls(index=i32(partition), records=b""),)
                ),
            ),
        )
        with self._lock:
            if self._ahead is not None:
                raise RemoteError("a Fetch sent ahead has not been received (RemoteWal.fetch_result)")
            ahead = ProduceInFlight(topic, partition, self._send(PRODUCE, req, batches))
            self._produces.append(ahead)
            return ahead

    def produce_result(self, ahead: ProduceInFlight) -> int:
        """The first offset of a Produce sent with produce_ahead (the oldest outstanding)."""
        with self._lock:
            if not self._produces or self._produces[0] is not ahead:
                raise RemoteError("produce_result of a Produce that is not the oldest outstanding")
            self._produces.popleft()
            resp = self._receive(PRODUCE, _req(PRODUCE, "ProduceRequest"), ahead.cid)
        for t in resp.responses:
            for p in t.partition_responses:
                _check(p.error_code, f"produce to {ahead.topic!r}[{ahead.partition}]")
                return int(p.base_offset)
        raise RemoteError(f"produce to {ahead.topic!r}[{ahead.partition}]: the answer names no partition")

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        topic_cls = _req(OFFSET_FETCH, "OffsetFetchRequestTopic")
        req = _req(OFFSET_FETCH, "OffsetFetchRequest")(
            group_id=GroupId(group),
            topics=(topic_cls(name=TopicName(topic), partition_indexes=(i32(partition),)),),
        )
        resp = self._call(OFFSET_FETCH, req)
        _check(resp.error_code, f"committed offset of group {group!r}")
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.unknown_topic_or_partition:
                    return None
                _check(p.error_code, f"committed offset of group {group!r} on {topic!r}[{partition}]")
                return None if p.committed_offset < 0 else int(p.committed_offset)
        return None

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Durable when it returns (the daemon's OffsetCommit is wal.commit_offset)."""
        part_cls = _req(OFFSET_COMMIT, "OffsetCommitRequestPartition")
        topic_cls = _req(OFFSET_COMMIT, "OffsetCommitRequestTopic")
        req = _req(OFFSET_COMMIT, "OffsetCommitRequest")(
            group_id=GroupId(group),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=(
                topic_cls(
                    name=TopicName(topic),
                    partitions=(
                        part_cls(
                            partition_index=i32(partition),
                            committed_offset=i64(offset),
                            committed_leader_epoch=i32(-1),
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        )
        for t in self._call(OFFSET_COMMIT, req).topics:
            for p in t.partitions:
                _check(p.error_code, f"commit of group {group!r} on {topic!r}[{partition}]")

    def create_topic(self, topic: str, partitions: int) -> None:
        """Makes `topic` exist with `partitions` partitions (an existing topic is left as is)."""
        topic_cls = _req(CREATE_TOPICS, "CreatableTopic")
        req = _req(CREATE_TOPICS, "CreateTopicsRequest")(
            topics=(
                topic_cls(
                    name=TopicName(topic),
                    num_partitions=i32(partitions),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            validate_only=False,
        )
        for t in self._call(CREATE_TOPICS, req).topics:
            if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                _check(t.error_code, f"create topic {topic!r}")

    def add_partitions(self, topic: str, count: int) -> None:
        """Grows `topic` to `count` partitions (CreatePartitions). A topic that has them
        already (another writer grew it first) is left as is."""
        req = _req(CREATE_PARTITIONS, "CreatePartitionsRequest")(
            topics=(
                _req(CREATE_PARTITIONS, "CreatePartitionsTopic")(
                    name=TopicName(topic), count=i32(count), assignments=None
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            validate_only=False,
        )
        for r in self._call(CREATE_PARTITIONS, req).results:
            if r.error_code not in (ErrorCode.none, ErrorCode.invalid_partitions):
                _check(r.error_code, f"add partitions to topic {topic!r}")

    def max_message_bytes(self, topics: list[str]) -> dict[str, int]:
        """The largest record batch a Produce to each topic may send, as the daemon
        enforces it: the topic's max.message.bytes, which defaults to the daemon's
        message.max.bytes (the latter under the key "" and for topics it does not know)."""
        res_cls = _req(DESCRIBE_CONFIGS, "DescribeConfigsResource")
        req = _req(DESCRIBE_CONFIGS, "DescribeConfigsRequest")(
            resources=(
                res_cls(
                    resource_type=i8(RESOURCE_BROKER),
                    resource_name="",
                    configuration_keys=("message.max.bytes",),
                ),
                *(
                    res_cls(
                        resource_type=i8(RESOURCE_TOPIC),
                        resource_name=t,
                        configuration_keys=("max.message.bytes",),
                    )
                    for t in topics
                ),
            ),
            include_synonyms=False,
            include_documentation=False,
        )
        out: dict[str, int] = {}
        for r in self._call(DESCRIBE_CONFIGS, req).results:
            topic = "" if r.resource_type == RESOURCE_BROKER else str(r.resource_name)
            if topic and r.error_code == ErrorCode.unknown_topic_or_partition:
                continue
            _check(r.error_code, f"configs of {'the daemon' if not topic else repr(topic)}")
            for c in r.configs:
                if c.name in ("message.max.bytes", "max.message.bytes") and c.value is not None:
                    try:
                        out[topic] = int(c.value)
                    except ValueError as e:
                        raise RemoteError(f"the walfs daemon sent {c.name}={c.value!r}") from e
        if "" not in out:
            raise RemoteError("the walfs daemon did not say its message.max.bytes (DescribeConfigs)")
        for t in topics:
            out.setdefault(t, out[""])
        return out
