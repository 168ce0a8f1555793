"""The read side: records into the caller's buffers (`read`, with the contract's 40-byte
descriptors), the byte view (`read_bytes`: each record's value and a newline), and
`locate` (offset, byte position or time to a position), all from the replayed chunk lists
(state.py) and the chunks' bodies (chunks.py). Org-neutral: calls name their org.
"""

from __future__ import annotations

import bisect
import sys
from array import array
from typing import Any

from walfs.cluster.chunks import ChunkStore
from walfs.cluster.state import ClusterState
from walfs.engine.types import NO_GID, REC_SIZE
from walfs.errors import BufferTooSmallError, OffsetOutOfRangeError, WalError

_MASK64 = 2**64 - 1


class Reading:
    def __init__(self, state: ClusterState, chunks: ChunkStore) -> None:
        self.state = state
        self.chunks = chunks

    def read(
        self,
        org: int,
        topic: str,
        partition: int,
        offset: int,
        buf: Any,
        recs: Any,
        max_records: int,
        max_bytes: int,
    ) -> int:
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
        s = self.state.stream(org, topic, partition)
        low, high = (s.low, s.next) if s else (0, 0)
        if not low <= offset <= high:
            raise OffsetOutOfRangeError(f"offset {offset} is outside {low}..{high} of {topic!r}[{partition}]")
        if s is None or offset == high:
            return 0
        out = memoryview(buf).cast("B")
        rv = memoryview(recs).cast("B")
        limit = min(max_records, len(rv) // REC_SIZE)
        n = used = 0
        while n < limit and offset < high:
            with self.state.lock:
                if offset < s.low:
                    raise OffsetOutOfRangeError(
                        f"offset {offset} of {topic!r}[{partition}] was trimmed meanwhile"
                    )
                i = s.chunk_index(offset)
                koff, first, ts = s.koff[i], s.first[i], s.ts[i]
            chunk = self.chunks.get(s.region, koff)
            k = offset - first
            m, v = chunk.lens[k]
            if used + m + v > len(out) or (n and used + m + v > max_bytes):
                if n == 0:
                    raise BufferTooSmallError(m + v)
                return n
            # Records k..e-1 of the chunk at once: their bodies are contiguous, and as many
            # as fit the buffer, max_bytes (past the first record) and max_records.
            st = chunk.starts[k]
            cap = st + min(len(out), max_bytes) - used
            e = max(k + 1, bisect.bisect_right(chunk.starts, cap, k + 1) - 1)
            e = min(e, k + limit - n, len(chunk.lens))
            cnt, nb = e - k, chunk.starts[e] - st
            out[used : used + nb] = chunk.data[st : st + nb]
            words = array("Q", [NO_GID, 0, ts & _MASK64, 0, 0]) * cnt  # walfs.engine.types.REC_LAYOUT
            words[1::5] = array("Q", range(offset, offset + cnt))
            words[3::5] = chunk.words[k:e]
            words[4::5] = array("Q", [x + used - st for x in chunk.starts[k:e]])
            if sys.byteorder == "big":
                words.byteswap()
            rv[n * REC_SIZE : (n + cnt) * REC_SIZE] = memoryview(words).cast("B")
            used += nb
            n += cnt
            offset += cnt
        return n

    def read_bytes(self, org: int, topic: str, partition: int, position: int, buf: Any) -> int:
        if position < 0:
            raise OffsetOutOfRangeError("position must not be negative")
        s = self.state.stream(org, topic, partition)
        if s is None or position >= s.next_byte:
            return 0
        if position < s.low_byte:
            raise OffsetOutOfRangeError(
                f"position {position} of {topic!r} was trimmed (low byte {s.low_byte})"
            )
        out = memoryview(buf).cast("B")
        got = 0
        while got < len(out) and position < s.next_byte:
            with self.state.lock:
                i = bisect.bisect_right(s.byte, position) - 1
                if i < 0:
                    raise OffsetOutOfRangeError(f"position {position} of {topic!r} was trimmed meanwhile")
                koff, at = s.koff[i], s.byte[i]
            chunk = self.chunks.get(s.region, koff)
            for k, (m, v) in enumerate(chunk.lens):
                if at + v + 1 <= position:
                    at += v + 1
                    continue
                st = chunk.starts[k] + m
                line = bytes(chunk.data[st : st + v]) + b"\n"
                piece = line[position - at : position - at + len(out) - got]
                out[got : got + len(piece)] = piece
                got += len(piece)
                position += len(piece)
                at += v + 1
                if got == len(out):
                    break
        return got

    def locate(
        self,
        org: int,
        topic: str,
        partition: int,
        offset: int | None,
        byte: int | None,
        timestamp_ms: int | None,
    ) -> int:
        if (offset is None) + (byte is None) + (timestamp_ms is None) != 2:
            raise ValueError("locate takes exactly one of offset=, byte=, timestamp_ms=")
        s = self.state.stream(org, topic, partition)
        if offset is not None:
            if not isinstance(offset, int) or offset < 0:
                raise OffsetOutOfRangeError(f"offset {offset!r} is negative or not an int")
            low, high = (s.low, s.next) if s else (0, 0)
            if not low <= offset <= high:
                raise OffsetOutOfRangeError(f"offset {offset} is outside {low}..{high} of {topic!r}")
            if s is None or offset == high:
                return s.next_byte if s else 0
            if offset == s.low:
                return s.low_byte
            i = s.chunk_index(offset)
            chunk = self.chunks.get(s.region, s.koff[i])
            return s.byte[i] + sum(v + 1 for _m, v in chunk.lens[: offset - s.first[i]])
        if byte is not None:
            if byte < 0:
                raise OffsetOutOfRangeError("position must not be negative")
            if s is None or byte >= s.next_byte:
                return s.next if s else 0
            if byte < s.low_byte:
                return s.low
            i = bisect.bisect_right(s.byte, byte) - 1
            chunk = self.chunks.get(s.region, s.koff[i])
            at, off = s.byte[i], s.first[i]
            for _m, v in chunk.lens:
                if at + v + 1 > byte:
                    return off
                at += v + 1
                off += 1
            return off
        assert timestamp_ms is not None
        if s is None:
            return 0
        i = bisect.bisect_left(s.ts, timestamp_ms)  # LogAppendTime: non-decreasing per region
        return max(s.low, s.first[i]) if i < len(s.first) else s.next

    def verify(self, org: int) -> list[tuple[str, int, int, str]]:
        """Every chunk the org's streams hold, read back: (topic, partition, -1, why) of
        each that cannot be."""
        out = []
        for s in list(self.state.streams.values()):
            if s.org != org:
                continue
            for koff in list(s.koff):
                try:
                    self.chunks.get(s.region, koff)
                except WalError as e:
                    out.append((s.topic, s.partition, -1, str(e)))
        return out
