"""Appending on the local engine, beside LocalEngine's own append calls (which stay methods
of the engine: every produce and mount WRITE calls them, and a call through another object
would cost each a Python frame): the single-record Appender handle, and the check of a
batch's lengths."""

import errno
from collections.abc import Callable
from typing import Any, Protocol

from walfs.common.metrics import TALLY_FOLD, WalStats
from walfs.engine.types import Change
from walfs.engine.watchers import Watchers
from walfs.errors import RecordTooLargeError, WalIOError
from walfs.local.core import MAX_U32, Engine
from walfs.local.topic_index import Stream


class AppendHost(Protocol):
    """What an Appender takes from its engine (walfs.local.engine.LocalEngine), once."""

    fsync: str
    core: Engine
    stats: WalStats
    _size_limits: dict[int, int | None]
    _watchers: Watchers
    _generation: list[int]

    def _stream(self, topic: str, partition: int, create: bool) -> Stream | None: ...

    def _with_room(self, s: Stream, attempt: Callable[[], Any]) -> Any: ...

    def _note_growth(self, s: Stream, nbytes: int) -> None: ...

    def _notify(self, change: Change) -> None: ...


class LocalAppender:
    """walfs.engine.types.Appender on the local core: the stream is resolved once; an append is
    one C call (walfs_append_one: the record copied into the segment's mapping, the
    fsync="always" wait inside the same call) and no lock: the counters take the byte
    count through the stream's tally (metrics.WalStats.stream_tally). `append` is a
    closure over what it needs (at about 2 us a call, each attribute look-up it saves is
    a few percent); when a delete() bumps the engine's generation, it resolves the stream
    again, rebinding its own variables, so a reference to it taken earlier stays right."""

    append: Callable[[bytes], int]

    def __init__(self, engine: AppendHost, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        eng = engine
        wait = eng.fsync == "always"
        append_one = eng.core.append_one
        stats = eng.stats
        limits = eng._size_limits
        watchers = eng._watchers

        gen = eng._generation  # [n], shared by the engine's org views

        def resolve() -> tuple[int, Stream, int, list[int]]:
            generation = gen[0]
            s = eng._stream(topic, partition, True)
            assert s is not None
            return generation, s, s.stream_no, stats.stream_tally(s.name, s.partition)

        generation, s, no, tally = resolve()

        def append(value: bytes) -> int:
            nonlocal generation, s, no, tally
            if gen[0] != generation:  # a stream was deleted: maybe this one
                generation, s, no, tally = resolve()
            n = len(value)
            if n >= MAX_U32:
                raise RecordTooLargeError("a record is larger than 4 GiB")
            try:
                if wait:
                    with stats.durable_waits.time("append"):
                        offset = append_one(no, value, True)
                else:
                    offset = append_one(no, value, False)
            except WalIOError as e:  # EDQUOT: at its size limit + one segment (backpressure)
                if e.errno != errno.EDQUOT:
                    raise
                offset = eng._with_room(s, lambda: append_one(no, value, wait))
            tally.append(n)
            if len(tally) >= TALLY_FOLD:
                stats.fold()
            if limits.get(no, -1) is not None:  # None: no size limit (the usual case)
                eng._note_growth(s, n)
            if watchers.active:
                eng._notify(Change("append", s.name, s.partition, s.org_id))
            return offset

        self.append = append


def check_lengths(size: int, meta_lens: Any, value_lens: Any) -> int:
    """The number of records of a batch append whose bodies take `size` bytes, once its
    lengths are checked."""
    n = len(meta_lens)
    if n == 0 or len(value_lens) != n:
        raise ValueError("append needs one meta and one value length per record, at least one record")
    if sum(meta_lens) + sum(value_lens) != size:
        raise ValueError("the lengths do not add up to the data")
    return n
