"""Where the sink appends: the data directory itself (the engine, walfs.engine.contract) when no
daemon owns it; the daemon that owns it, through its local socket (walfs.common.local_socket: a path needs no
more); or a walfs daemon's Kafka listener (option "bootstrap"). The last two are the
same client (walfs.spark.sink_remote).

Both give the sink the same four things: an atomic, durable append of one chunk of
records (walfs.spark.sink_rows.Chunk, the stored layout) to one stream; the stream's
end; a durable per-group cursor (the WAL's one commit rule, LogEngine.commit, which the
listener's OffsetCommit also calls); and a scan of the records past an offset that carry
headers, to find the sink's own chunks again. Neither runs Python per record: a chunk
goes to LogEngine.append as it is, or through the C encoder to one Kafka record batch;
scans read Arrow batches (walfs.spark.columnar / remote_read) and decode only the
records that have headers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from walfs import WalLockedError
from walfs.common import local_socket
from walfs.engine.contract import LogEngine
from walfs.engine.records import Header
from walfs.engine.rules import append_pieces, committed_offset
from walfs.engine.targets import is_local
from walfs.open import open_engine
from walfs.spark.columnar import read_range
from walfs.spark.options import SinkOptions, WalfsOptionError
from walfs.spark.sink_rows import Chunk, headed


class SinkTarget(Protocol):
    def ensure(self, topic: str, partitions: int, grow: bool = False) -> None:
        """Makes `topic` have `partitions` partitions: creates a new topic; with `grow`,
        also adds partitions to one that has fewer."""
        ...

    def chunk_bytes(self, topic: str) -> int | None:
        """The most row bytes (sink_rows.row_costs) one append to `topic` takes; None:
        no limit of the target's own."""
        ...

    def append(self, topic: str, partition: int, chunks: Iterable[Chunk]) -> list[int]:
        """Appends the chunks in order, each atomically, all durable when it returns;
        the first offset of each."""
        ...

    def end(self, topic: str, partition: int) -> int: ...
    def ends(self, topic: str | None) -> dict[tuple[str, int], int]:
        """The end of every stream the target has (of `topic` only, when given)."""
        ...

    def committed(self, group: str, topic: str, partition: int) -> int | None: ...
    def commit(self, group: str, topic: str, partition: int, offset: int) -> None: ...
    def scan(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[int, Sequence[Header]]]: ...
    def close(self) -> None: ...


# How long a commit waits for the data directory's lock: a driver that was killed may
# leave a Spark Python worker finishing its commit for a moment.
LOCK_WAIT_S = 20.0


def open_target(
    opts: SinkOptions,
    lock_wait_s: float = LOCK_WAIT_S,
    max_pause: float = 0.1,
    pause: Callable[[float], None] = time.sleep,
) -> SinkTarget:
    """The target of the options: the daemon of `bootstrap`; with a path, the daemon
    that owns the data directory through its local socket (daemon_target), else the
    directory itself once its lock is free: both tried until `lock_wait_s` has passed
    (every `max_pause` at most; `pause(s)` between tries, a caller's may raise to give
    up), then WalfsOptionError."""
    if opts.bootstrap:
        # Imported here: the Kafka client's message classes (kio) take a second or more
        # to import, which a write to the data directory should not pay.
        from walfs.spark.remote import RemoteWal
        from walfs.spark.sink_remote import RemoteTarget

        return RemoteTarget(RemoteWal(opts.bootstrap))
    if not is_local(opts.path):
        return open_local(opts, lock_wait_s, max_pause, pause)  # a cluster: no lock
    deadline = time.monotonic() + lock_wait_s
    wait = min(0.002, max_pause)
    while True:
        remote = daemon_target(opts)
        if remote is not None:
            return remote
        try:
            return LocalTarget(open_engine(opts.path, org_id=opts.org_id))
        except WalLockedError as e:
            if time.monotonic() >= deadline:
                raise WalfsOptionError(
                    f"{opts.path} is locked by a process that does not serve it on "
                    f"{local_socket.SOCKET_NAME} (a program with the WAL open, or a walfs "
                    f"daemon older than this sink: write through its Kafka listener with "
                    f'.option("bootstrap", "host:port")): {e}'
                ) from e
        pause(wait)
        wait = min(max_pause, wait * 2)


def daemon_target(opts: SinkOptions) -> SinkTarget | None:
    """The daemon that owns the options' data directory, through its local socket
    (walfs.common.local_socket), in the options' org; None when no daemon serves it."""
    if not is_local(opts.path):
        return None
    from walfs.common import local_socket

    try:
        sock = local_socket.connect(opts.path, timeout=120.0)
    except local_socket.NotServed:
        return None
    except OSError as e:
        raise WalfsOptionError(
            f"cannot connect to {local_socket.socket_path(opts.path)}, the local socket of the "
            f"walfs daemon that owns {opts.path} (its mode follows the data directory's: "
            f"who may write into the directory may connect): {e}"
        ) from e
    from walfs.spark.remote import RemoteWal
    from walfs.spark.sink_remote import RemoteTarget

    return RemoteTarget(
        RemoteWal(
            local_socket.socket_path(opts.path),
            sock=sock,
            client_id=local_socket.client_id_for("walfs-spark", opts.org_id),
        )
    )


def open_local(
    opts: SinkOptions, lock_wait_s: float, max_pause: float = 0.1, pause: Callable[[float], None] = time.sleep
) -> LocalTarget:
    """The data directory of the options, opened once its lock is free: tried until
    `lock_wait_s` has passed (once for 0), then WalLockedError; `pause(s)` between tries
    (a caller's may raise to give up)."""
    deadline = time.monotonic() + lock_wait_s
    wait = min(0.002, max_pause)
    while True:
        try:
            return LocalTarget(open_engine(opts.path, org_id=opts.org_id))
        except WalLockedError:
            if time.monotonic() >= deadline:
                raise
            pause(wait)
            wait = min(max_pause, wait * 2)


# What one append to a data directory takes: no limit of its own (sink_rows.CHUNK_BYTES).
LOCAL_CHUNK_BYTES: int | None = None


class LocalTarget:
    def __init__(self, engine: LogEngine) -> None:
        self.engine = engine

    def ensure(self, topic: str, partitions: int, grow: bool = False) -> None:
        pass  # an append creates the stream

    def chunk_bytes(self, topic: str) -> int | None:
        return LOCAL_CHUNK_BYTES

    def append(self, topic: str, partition: int, chunks: Iterable[Chunk]) -> list[int]:
        firsts = [self.append_chunk(topic, partition, c) for c in chunks]
        self.engine.sync()
        return firsts

    def append_chunk(self, topic: str, partition: int, chunk: Chunk) -> int:
        """Appends one chunk atomically, durable under the engine's fsync policy (not
        waited for otherwise: see sync); its first offset."""
        return append_pieces(self.engine, topic, partition, chunk.pieces, chunk.meta_lens, chunk.value_lens)

    def end(self, topic: str, partition: int) -> int:
        return self.engine.info(topic, partition).high_watermark

    def ends(self, topic: str | None) -> dict[tuple[str, int], int]:
        return {(t, p): self.end(t, p) for t, p in self.engine.streams(topic)}

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        return committed_offset(self.engine, group, topic, partition)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.engine.commit(group, topic, partition, offset)

    def scan(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[int, Sequence[Header]]]:
        start = max(start, self.engine.info(topic, partition).low_watermark)  # retention may trim
        if start < end:
            yield from headed(read_range(self.engine, topic, partition, start, end))

    def close(self) -> None:
        self.engine.close()
