"""Chunks: the log's data records (op "D"), each a batch of appended records. Their format
both ways (`data_value` writes one, `parse_data`/`to_chunk` read one), and the bodies'
store: a cache of recent chunks (the replay fills it, so recent reads do not fetch twice)
in front of a consumer that fetches older ones from Kafka.
"""

from __future__ import annotations

import struct
import sys
import threading
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from walfs.cluster.clients import take
from walfs.cluster.layout import HEAD, log_value
from walfs.errors import WalCorruptError, WalIOError

_DATA = struct.Struct("<I")  # a data record's record count
_LENS_SIZE = 8  # (u32 meta_len, u32 value_len) per record
CACHE_BYTES = 64 << 20


@dataclass
class Chunk:
    """One data record of the log, parsed: its records' lengths and bodies."""

    lens: list[tuple[int, int]]  # (meta_len, value_len) per record
    starts: list[int]  # where each body starts in data, then where the last one ends
    data: memoryview
    ts: int
    words: array  # meta_len | value_len << 32 per record (read()'s descriptor word)

    @property
    def nbytes(self) -> int:
        return len(self.data)


def data_value(meta_lens: Any, value_lens: Any, bodies: bytes) -> bytes:
    """The log value of a data record holding these records (their bodies joined)."""
    table = array("I", bytes(_LENS_SIZE * len(meta_lens)))  # (meta_len, value_len) per record, u32 LE
    table[0::2] = array("I", meta_lens)
    table[1::2] = array("I", value_lens)
    if sys.byteorder == "big":
        table.byteswap()
    return b"".join((log_value(b"D"), _DATA.pack(len(meta_lens)), table.tobytes(), bodies))


def parse_data(value: bytes, where: str) -> tuple[array, int]:
    """(the u32 (meta_len, value_len) pairs, where the bodies start) of an op "D" value;
    WalCorruptError if it lies."""
    if len(value) < HEAD.size + _DATA.size:
        raise WalCorruptError(f"{where}: data record of {len(value)} bytes is too short")
    (count,) = _DATA.unpack_from(value, HEAD.size)
    table = HEAD.size + _DATA.size
    first = table + count * _LENS_SIZE
    if count == 0 or first > len(value):
        raise WalCorruptError(f"{where}: data record claims {count} records in {len(value)} bytes")
    pairs = array("I")
    pairs.frombytes(value[table:first])
    if sys.byteorder == "big":
        pairs.byteswap()
    if first + sum(pairs) != len(value):
        raise WalCorruptError(f"{where}: data record lengths do not add up to its {len(value)} bytes")
    return pairs, first


def to_chunk(value: bytes, ts: int, where: str) -> Chunk:
    pairs, pos = parse_data(value, where)
    metas, values = pairs[0::2], pairs[1::2]
    starts = list(accumulate((m + v for m, v in zip(metas, values, strict=True)), initial=pos))
    if sys.byteorder == "little":  # the (meta_len, value_len) u32 pairs read as u64 words
        words = array("Q")
        words.frombytes(pairs.tobytes())
    else:
        words = array("Q", (m | v << 32 for m, v in zip(metas, values, strict=True)))
    return Chunk(list(zip(metas, values, strict=True)), starts, memoryview(value), ts, words)


class ChunkStore:
    """Chunk bodies by (region, Kafka offset): a cache of recent ones (CACHE_BYTES, least
    recently used out first), and a consumer of its own that fetches older ones."""

    def __init__(self, log_topic: str, reader: Any, timeout: float) -> None:
        self.log_topic = log_topic
        self.reader = reader  # a consumer of its own (clients.Clients.reader)
        self.timeout = timeout
        self._cache: OrderedDict[tuple[int, int], Chunk] = OrderedDict()
        self._cache_bytes = 0
        self._cache_lock = threading.Lock()
        self._read_lock = threading.Lock()

    def put(self, k: tuple[int, int], chunk: Chunk) -> None:
        with self._cache_lock:
            if k in self._cache:
                return
            self._cache[k] = chunk
            self._cache_bytes += chunk.nbytes
            while self._cache_bytes > CACHE_BYTES and len(self._cache) > 1:
                _k, old = self._cache.popitem(last=False)
                self._cache_bytes -= old.nbytes

    def _cached(self, k: tuple[int, int]) -> Chunk | None:
        with self._cache_lock:
            c = self._cache.get(k)
            if c is not None:
                self._cache.move_to_end(k)
            return c

    def get(self, region: int, koff: int) -> Chunk:
        """The chunk at `koff` of `region`: from the cache, else fetched (with the chunks
        after it that one fetch brings, which go into the cache)."""
        c = self._cached((region, koff))
        if c is not None:
            return c
        from confluent_kafka import TopicPartition

        with self._read_lock:
            c = self._cached((region, koff))
            if c is not None:
                return c
            self.reader.assign([TopicPartition(self.log_topic, region, koff)])
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                for m in take(self.reader, 0.5):
                    value, at = m.value(), m.offset()
                    if m.error() or value is None or at is None or len(value) < HEAD.size:
                        continue
                    if value[0] == ord("D"):
                        got = to_chunk(value, m.timestamp()[1], f"{self.log_topic}[{region}]@{at}")
                        self.put((region, at), got)
                        if at == koff:
                            c = got
                if c is not None:
                    return c
            raise WalIOError(5, f"{self.log_topic}[{region}]@{koff}: not fetched within {self.timeout} s")
