"""The C library's Kafka record codecs (csrc/walfs_kafka.h, csrc/kafka_batch.c): produce
batches' records into walfs record bodies, and records as an engine's read() left them
(walfs.engine.types.REC_LAYOUT) into one fetch batch; the batch CRC-32C. The fast paths
of record_batch.py's layout. Engine-neutral: they hold no engine state, so every face may
use them."""

import array
import errno
import threading
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from walfs._core import ffi, lib
from walfs.engine.capabilities import KafkaBatchRead, has
from walfs.engine.contract import LogEngine
from walfs.engine.types import REC_SIZE
from walfs.errors import BufferTooSmallError


def crc32c(data: Any, crc: int = 0) -> int:
    """CRC-32C of any buffer, continuing from ``crc`` (the core's: csrc/crc32c.c, about
    twice the crc32c package's rate on a 1 MiB produce batch)."""
    with ffi.from_buffer(data) as c:
        return int(lib.walfs_crc32c(crc, c, len(c)))


# Memory the split writes every byte of before it is read: not zero-filled first (a
# bytearray(n) is, a memset as long as the copy at 16 KiB records;
# docs/notes/2026-11-24-kafka-produce-path.md).
_uncleared = ffi.new_allocator(should_clear_after_alloc=False)


def decode_kafka_records(
    body: Any, count: int, base_ts: int, room: int = 0
) -> tuple[memoryview, array.array, array.array]:
    """A produce batch's records section (any buffer) as walfs bodies (C:
    walfs_kafka_records): (``room`` bytes for the caller to fill, then the bodies back to
    back, as one writable view of the memory C wrote them into; meta lengths, value
    lengths). ValueError when it does not parse."""
    metas = array.array("I", bytes(4 * count))
    values = array.array("I", bytes(4 * count))
    needed = ffi.new("uint64_t *")
    size = len(body) + 32 * count + 64
    # Released on the way out, as every cffi buffer over a caller's (walfs/local/core.py).
    with ffi.from_buffer(body) as cbody:
        while True:
            out = _uncleared("uint8_t[]", room + size)
            rc = lib.walfs_kafka_records(
                cbody,
                len(cbody),
                count,
                base_ts,
                out + room,
                size,
                ffi.from_buffer("uint32_t[]", metas),
                ffi.from_buffer("uint32_t[]", values),
                needed,
            )
            if rc != -errno.ENOBUFS:
                break
            size = int(needed[0])
    if rc < 0:
        raise ValueError("the batch's records do not parse")
    return memoryview(ffi.buffer(out, room + rc)), metas, values


def encode_kafka_batch(buf: Any, recs: Any, n: int) -> memoryview:
    """n records as Engine.read_into left them, as one Kafka record batch (v2) (C:
    walfs_kafka_batch), in memory of its own (_allocated_batch: not copied into bytes, a
    fetch answer sends it as it is). Raises ValueError for a meta section that does not
    parse."""
    if n == 0:
        return memoryview(b"")
    out = ffi.new("uint8_t **")
    # Released on the way out, as every cffi buffer over a caller's (walfs/local/core.py).
    with ffi.from_buffer(buf) as cbuf, ffi.from_buffer("walfs_rec_t[]", recs) as crecs:
        rc = int(lib.walfs_kafka_batch(cbuf, crecs, n, out))
    return _allocated_batch(rc, out)


def encode_kafka_batch_pieces(
    pieces: Sequence[Any], meta_lens: array.array, value_lens: array.array, timestamp_ms: int
) -> memoryview:
    """Records in the stored layout, their bodies back to back in the concatenation of
    `pieces` (buffers, as LogEngine.append_pieces takes them: a writer's chunk, never
    joined here), as one Kafka record batch (v2) with offsets 0..n-1 and `timestamp_ms`
    for records without a producer timestamp (C: walfs_kafka_batch_pieces), in memory of
    its own (_allocated_batch). ValueError when the pieces do not hold exactly the
    records' bodies or a meta section does not parse."""
    n = len(meta_lens)
    if n == 0:
        return memoryview(b"")
    out = ffi.new("uint8_t **")
    # Released on the way out, as every cffi buffer over a caller's (walfs/local/core.py).
    with ExitStack() as held:
        bufs = [held.enter_context(ffi.from_buffer(p)) for p in pieces]
        cmetas = held.enter_context(ffi.from_buffer("uint32_t[]", meta_lens))
        cvalues = held.enter_context(ffi.from_buffer("uint32_t[]", value_lens))
        cpieces = ffi.new("const uint8_t *[]", bufs)
        lens = ffi.new("uint64_t[]", [len(b) for b in bufs])
        rc = int(
            lib.walfs_kafka_batch_pieces(n, len(bufs), cpieces, lens, cmetas, cvalues, timestamp_ms, out)
        )
    return _allocated_batch(rc, out)


def _allocated_batch(rc: int, out: Any) -> memoryview:
    """The batch a C encoder sized, allocated and wrote in one call (rc bytes at *out), as
    a view that frees it (walfs_free) when its last reference goes; its error as Python's."""
    if rc > 0:
        return memoryview(ffi.buffer(ffi.gc(out[0], lib.walfs_free, size=rc), rc))
    if rc == -errno.ENOMEM:
        raise MemoryError("encoding a Kafka record batch")
    if rc == -errno.EINVAL:
        raise ValueError("the pieces do not hold exactly the records' bodies")
    if rc == -errno.ENOBUFS:
        raise ValueError("the records do not fit in one Kafka record batch (2 GiB)")
    raise ValueError("a record's meta section does not parse")


_read_buffers = threading.local()


def read_as_kafka_batch(
    engine: Any, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
) -> memoryview:
    """LogEngine.read_kafka_batch for an engine with no stored layout to encode from in
    place (the cluster engine): its read() into this thread's buffers, then
    encode_kafka_batch."""
    tl = _read_buffers
    size = max(getattr(tl, "size", 0), min(max(max_bytes, 1), 64 << 20) + 4096, 1 << 16)
    while True:
        if getattr(tl, "size", 0) < size:
            tl.buf, tl.size = bytearray(size), size
        if getattr(tl, "recs_n", 0) < max_records:
            tl.recs, tl.recs_n = bytearray(REC_SIZE * max_records), max_records
        try:
            n = engine.read(topic, partition, offset, tl.buf, tl.recs, max_records, max_bytes)
        except BufferTooSmallError as e:
            size = e.needed
            continue
        return encode_kafka_batch(tl.buf, tl.recs, n)


def read_kafka_batch(
    engine: LogEngine, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
) -> bytes | bytearray | memoryview:
    """A Kafka fetch's records as one batch (capabilities.KafkaBatchRead's contract): the
    engine's own when it has it, read_as_kafka_batch over LogEngine.read otherwise."""
    if has(engine, KafkaBatchRead):
        return engine.read_kafka_batch(topic, partition, offset, max_records, max_bytes)
    return read_as_kafka_batch(engine, topic, partition, offset, max_records, max_bytes)
