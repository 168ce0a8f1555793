"""Shared helpers for the Kafka listener tests: a listener on a background thread
(in-process, over a real walfs.Wal), a `walfs serve` subprocess, and a raw client
for hand-made frames."""

from __future__ import annotations

import io
import queue
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

import walfs
from walfs.kafka import serve_kafka
from walfs.kafka.framing import DEFAULT_MAX_REQUEST_BYTES

REPO = Path(__file__).resolve().parent.parent
# Small geometry: the default 1 GiB segments are allocated up front, and each test
# opens its own WAL.
SMALL_WAL = {"segment_size": 16 << 20, "block_size": 1 << 20}
SMALL_WAL_ARGS = ("--segment-size", str(16 << 20), "--block-size", str(1 << 20))


class Listener:
    """serve_kafka on its own thread and trio loop, bound to 127.0.0.1:<free port>, over
    the engine of the walfs.Wal `wal` (tests use the Wal's friendly calls beside it)."""

    def __init__(
        self,
        wal: Any,
        *,
        allow_delete: bool = False,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        config: Any = None,
    ) -> None:
        self.wal = wal
        self._config = config
        self._allow_delete = allow_delete
        self._max = max_request_bytes
        self._started: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as nursery:
                    port = await nursery.start(
                        partial(
                            serve_kafka,
                            self.wal.engine,
                            "127.0.0.1",
                            0,
                            allow_delete=self._allow_delete,
                            max_request_bytes=self._max,
                            config=self._config,
                        )
                    )
                    self._started.put(port)

        try:
            trio.run(main)
        except BaseException as e:  # surface startup failures to the test
            self._started.put(e)

    def __enter__(self) -> Listener:
        self._thread.start()
        got = self._started.get(timeout=30)
        if isinstance(got, BaseException):
            raise got
        self.port = got
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._scope is not None:
            scope = self._scope
            trio.from_thread.run_sync(scope.cancel, trio_token=self._token)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "listener did not stop"


@contextmanager
def listener(tmp_path: Path, **kwargs: Any) -> Iterator[Listener]:
    wal_kwargs = {**SMALL_WAL, **kwargs.pop("wal_kwargs", {})}
    tmp_path.mkdir(parents=True, exist_ok=True)
    with walfs.Wal(str(tmp_path / "data"), **wal_kwargs) as wal, Listener(wal, **kwargs) as lst:
        yield lst


class ServeProcess:
    """`python -m walfs.cli.serve DATA_DIR --kafka-listen 127.0.0.1:0 ...`."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "walfs.cli.serve", str(data_dir), "--kafka-listen", "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
            raise RuntimeError(f"walfs serve did not start: {line!r} {err}")
        self.port = int(m.group(1))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


# -- raw protocol client ---------------------------------------------------------


def raw_connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def recv_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)


def is_closed(s: socket.socket) -> bool:
    """True when the server closed the connection (reads EOF or reset)."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def encode_request(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A framed request built with kio (header version chosen by the body's type)."""
    from kio.serial import entity_writer

    header_cls = type(body).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="raw-test",
        ),
    )
    entity_writer(type(body))(buf, body)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def fetch_request(
    topic: str,
    offsets: dict[int, int],
    limit: int = 1 << 20,
    max_bytes: int = 50 << 20,
    max_wait_ms: int = 100,
) -> Any:
    """A Fetch v12 request body (kio) for partitions of one topic: {partition: offset},
    each with the byte limit ``limit``, ``max_bytes`` for the whole answer."""
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    from walfs.kafka.messages import build

    return build(
        FetchRequest,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        topics=(
            build(
                FetchTopic,
                topic=topic,
                partitions=tuple(
                    build(FetchPartition, partition=p, fetch_offset=o, partition_max_bytes=limit)
                    for p, o in offsets.items()
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def produce_request(
    topic: str, records: bytes, *, acks: int = -1, correlation_id: int = 5, timeout_s: float = 30.0
) -> bytes:
    """A framed Produce (v9) of one record batch to partition 0 of `topic`."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    from walfs.kafka.messages import build

    # build() takes plain values where kio's constructors want its phantom types.
    body = build(
        ProduceRequest,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=timeout_s),
        topic_data=(
            build(
                TopicProduceData,
                name=topic,
                partition_data=(build(PartitionProduceData, index=0, records=records),),
            ),
        ),
    )
    return encode_request(0, 9, correlation_id, body)


def rdkafka_consumer(bootstrap: str, group: str, **extra: Any) -> Any:
    """A librdkafka (confluent-kafka) consumer from the earliest offset, no auto commit."""
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }
    return Consumer(conf)


def poll_messages(c: Any, n: int, timeout: float = 30.0) -> tuple[list[Any], Any]:
    """(up to n messages, the first error other than partition EOF or None): polls until
    n messages, an error or `timeout` seconds, whichever comes first."""
    from confluent_kafka import KafkaError

    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            return got, err
        got.append(m)
    return got, None


def consume(c: Any, n: int, timeout: float = 30.0) -> list[Any]:
    """Up to n messages within `timeout` seconds; an error raises KafkaException."""
    from confluent_kafka import KafkaException

    got, err = poll_messages(c, n, timeout)
    if err is not None:
        raise KafkaException(err)
    return got


def api_versions_request(correlation_id: int = 1) -> bytes:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    return encode_request(
        18,
        3,
        correlation_id,
        ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
    )


def check_alive(port: int) -> None:
    """The listener still answers a well-formed ApiVersions request."""
    with raw_connect(port) as s:
        s.sendall(api_versions_request(77))
        resp = recv_frame(s)
        assert struct.unpack(">i", resp[:4])[0] == 77


def wait_until(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    """Bounded wait for something another thread or process does."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- `walfs kafka-user` (the auth tests) ---------------------------------------------------
def walfs_cli(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walfs", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
        cwd=REPO,
    )


def add_user(config: Path, name: str, org: int, password: str) -> None:
    walfs_cli(
        "kafka-user",
        "add",
        name,
        "--org",
        str(org),
        "--config",
        str(config),
        "--iterations",
        "4096",
        stdin=password + "\n",
    )
