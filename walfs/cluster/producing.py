"""The write path: every change an engine makes is a record it produces, then waits for its
own replay to apply, so that the change is visible through this engine when the call
returns. `Writer.append` splits a batch into data records (chunks) of at most
MAX_CHUNK_BYTES, `Writer.op` writes a create, trim or delete mark, `Writer.meta` a record of
the meta topic (cursor, group, settings, snapshot).
"""

from __future__ import annotations

import bisect
from typing import Any

from walfs.cluster.chunks import data_value
from walfs.cluster.clients import Clients
from walfs.cluster.layout import MAX_CHUNK_BYTES, Target, log_value, region_of, stream_key_bytes
from walfs.cluster.state import ClusterState
from walfs.common.metrics import WalStats
from walfs.engine.names import check_partition
from walfs.errors import RecordTooLargeError


class Writer:
    """Produces an engine's records (its Clients' producer) and waits for them to be replayed
    (its ClusterState's condition). Org-neutral: calls name the org they write for."""

    def __init__(self, t: Target, clients: Clients, state: ClusterState, stats: WalStats) -> None:
        self.t = t
        self.clients = clients
        self.state = state
        self.stats = stats

    def meta(self, key: bytes, value: bytes | None, *, wait: bool = True) -> int:
        """One meta record (None: a tombstone); with `wait`, returns once it is applied.
        Returns its offset in the meta topic."""
        moff = self.clients.produce(self.t.meta_topic, 0, key, value)
        if wait:
            self.state.wait_meta(moff)
        return moff

    def op(
        self, org: int, topic: str, partition: int, op: bytes, body: bytes = b""
    ) -> tuple[bytes, int, int]:
        """A create ("C"), trim ("T") or delete ("X") mark of the stream, once applied."""
        key = stream_key_bytes(org, topic, check_partition(partition))
        r = region_of(key, self.t.regions)
        koff = self.clients.produce(self.t.log_topic, r, key, log_value(op, body))
        self.state.wait_applied(r, koff)
        return key, r, koff

    def append(self, org: int, topic: str, partition: int, data: Any, meta_lens: Any, value_lens: Any) -> int:
        """The records, in data records of at most MAX_CHUNK_BYTES each; returns the first
        one's offset once every part is replayed. A batch that fits one data record is
        atomic (all or none); a larger one is split, each part atomic (docs/cluster.md)."""
        n = len(meta_lens)
        if n == 0 or len(value_lens) != n:
            raise ValueError("append needs one meta and one value length per record, at least one record")
        data = bytes(data)
        if sum(meta_lens) + sum(value_lens) != len(data):
            raise ValueError("the lengths do not add up to the data")
        key = stream_key_bytes(org, topic, check_partition(partition))
        first = None
        pos = i = 0
        while i < n:
            if i == 0 and len(data) + 8 * n <= MAX_CHUNK_BYTES:
                j, size = n, len(data) + 8 * n  # the common case: the whole batch in one record
            else:
                j, size = i, 0
                while j < n and (j == i or size + meta_lens[j] + value_lens[j] + 8 <= MAX_CHUNK_BYTES):
                    size += meta_lens[j] + value_lens[j] + 8
                    j += 1
            if size > MAX_CHUNK_BYTES:
                raise RecordTooLargeError(f"a record of {size - 8} bytes is larger than {MAX_CHUNK_BYTES}")
            nbytes = size - 8 * (j - i)
            body = data_value(meta_lens[i:j], value_lens[i:j], data[pos : pos + nbytes])
            r = region_of(key, self.t.regions)
            koff = self.clients.produce(self.t.log_topic, r, key, body)
            self.state.wait_applied(r, koff)
            off = self.state.assigned.get((r, koff))
            if off is None:  # evicted by a flood of other appends: look it up in the stream
                s = self.state.streams[key]
                off = s.first[bisect.bisect_left(s.koff, koff)]
            first = off if first is None else first
            self.stats.appended(topic, partition, j - i, nbytes)
            pos += nbytes
            i = j
        assert first is not None
        return first
