"""Reads an offset range of one stream from a walfs daemon's Kafka listener (option
"bootstrap") as pyarrow RecordBatches in the schema of walfs.spark.schema.

Each Fetch answer is checked (batch lengths, magic, CRC-32C: walfs.wire.record_batch's
produce-side decoder) and turned into the stored record layout in C, then into columns
by the same code as local reads (columnar._columns_to_batch). What the wire does not
carry: `gid` is null, and every record's timestamp is the one the daemon sent, marked
CreateTime (0).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from walfs.errors import OffsetOutOfRangeError
from walfs.spark.columnar import REC_DTYPE, _columns_to_batch
from walfs.spark.remote import FETCH_MAX_BYTES, FetchInFlight, RemoteError, RemoteWal
from walfs.wire.record_batch import BatchError, decode_for_append, end_of_batches, split_batches


def read_remote_range(
    bootstrap: str, topic: str, partition: int, start: int, end: int, max_bytes: int = FETCH_MAX_BYTES
) -> Iterator[pa.RecordBatch]:
    """Yields the records start..end-1 of topic[partition] as the daemon serves them."""
    with RemoteWal(bootstrap) as remote:
        yield from read_remote(remote, topic, partition, start, end, max_bytes)


def read_remote(
    remote: RemoteWal, topic: str, partition: int, start: int, end: int, max_bytes: int = FETCH_MAX_BYTES
) -> Iterator[pa.RecordBatch]:
    """read_remote_range over an open connection. The Fetch for the next records goes out
    (fetch_ahead) before this answer is decoded, so the daemon reads and sends them
    meanwhile; its answer is used only if it starts where decoding ended."""
    offset = start
    ahead: FetchInFlight | None = None
    try:
        while offset < end:
            if ahead is not None and ahead.offset != offset:
                remote.fetch_result(ahead)  # asked for the wrong place: dropped
                ahead = None
            if ahead is None:
                ahead = remote.fetch_ahead(topic, partition, offset, max_bytes)
            raw = remote.fetch_result(ahead)
            ahead = None
            after = end_of_batches(raw)
            if after is not None and offset < after < end:
                ahead = remote.fetch_ahead(topic, partition, after, max_bytes)
            got = 0
            for base, batch in _checked(split_batches(raw), topic, partition, remote.bootstrap):
                try:
                    bodies = decode_for_append(batch)
                except BatchError as e:
                    raise RemoteError(f"{topic!r}[{partition}] at {base} from {remote.bootstrap}: {e}") from e
                if bodies is None:
                    continue
                n = len(bodies.meta_lens)
                recs = np.zeros(n, REC_DTYPE)
                recs["offset"] = base + np.arange(n, dtype=np.uint64)
                recs["meta_len"] = np.frombuffer(bodies.meta_lens, np.uint32)
                recs["value_len"] = np.frombuffer(bodies.value_lens, np.uint32)
                sizes = recs["meta_len"].astype(np.uint64) + recs["value_len"]
                recs["buf_pos"][1:] = np.cumsum(sizes)[:-1]
                # Only the requested range: a batch may start before `offset` or run past `end`.
                lo = max(0, offset - base)
                hi = min(n, end - base)
                if lo >= hi:
                    continue
                rb = _columns_to_batch(topic, partition, recs, pa.py_buffer(bodies.data), gid_known=False)
                yield rb.slice(lo, hi - lo)
                got += hi - lo
                offset = base + hi
                if offset >= end:
                    return
            if got == 0:
                raise OffsetOutOfRangeError(
                    f"{topic!r}[{partition}] on {remote.bootstrap} has no record at offset {offset} "
                    f"(end {end})"
                )
    finally:
        if ahead is not None:  # the connection stays usable: the answer sent ahead is read
            with contextlib.suppress(RemoteError):
                remote.fetch_result(ahead)


def _checked(
    batches: Iterator[tuple[int, bytes]], topic: str, partition: int, bootstrap: str
) -> Iterator[tuple[int, bytes]]:
    """split_batches' batches, a malformed one as RemoteError."""
    try:
        yield from batches
    except BatchError as e:
        raise RemoteError(f"{topic!r}[{partition}] from {bootstrap}: {e}") from e
