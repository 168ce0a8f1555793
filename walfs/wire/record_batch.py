"""Kafka record batches (magic v2) in Python: the layout (the one home of its constants
on the Python side; csrc/kafka_batch.c is C's), decoding what producers send and what a
fetch answer holds, encoding what consumers fetch. The C fast paths are batch_codec.py's.

Hand-written rather than kio's ``kio.records``: kio's reader rounds record
timestamps to whole seconds (ListOffsets by timestamp needs milliseconds) and builds
a datetime per record, and its writer needs a dataclass per record; here a fetch
encodes straight from ``walfs.Record`` objects into one buffer.

Batch layout (big-endian), as specified by Apache Kafka::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (=2)
    crc uint32 (CRC-32C of everything after it) | attributes int16
    lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32
    records...

Each record: length varint, attributes int8, timestampDelta varlong, offsetDelta
varint, key (varint length, -1 = null), value (same), header count varint, headers
(key: varint length + UTF-8, value: varint length + bytes, -1 = null). Varints are
zigzag-encoded.
"""

from __future__ import annotations

import array
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from walfs.engine.records import PRODUCER_GROWTH, Producer, with_producer
from walfs.wire.batch_codec import crc32c, decode_kafka_records
from walfs.wire.compression import (
    MAX_DECOMPRESSED_BYTES,
    CompressionError,
    UnknownCodec,
    compress,
    decompress,
)

# The batch header above, field by field: every offset and size below is taken from it.
_HEAD_FORMAT = ">qiibIhiqqqhii"
HEAD_FIELDS = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "record_count",
)
_BATCH_HEAD = struct.Struct(_HEAD_FORMAT)
# name -> (offset in the batch, its struct)
_FIELD = {
    name: (struct.calcsize(_HEAD_FORMAT[: i + 1]), struct.Struct(">" + _HEAD_FORMAT[i + 1]))
    for i, name in enumerate(HEAD_FIELDS)
}
BATCH_OVERHEAD = _BATCH_HEAD.size  # 61 bytes before the first record
# baseOffset and batchLength: the 12 bytes before what batchLength counts.
LOG_OVERHEAD = _FIELD["partition_leader_epoch"][0]
_LOG_HEAD = struct.Struct(_HEAD_FORMAT[:3])
CRC_OFFSET = _FIELD["crc"][0]  # 17
CRC_START = _FIELD["attributes"][0]  # 21: the CRC covers the batch from the attributes field on
MAGIC = 2


def header_field(batch: bytes | bytearray | memoryview, name: str, pos: int = 0) -> int:
    """Field ``name`` (one of HEAD_FIELDS) of the batch header at ``pos``."""
    at, fmt = _FIELD[name]
    return int(fmt.unpack_from(batch, pos + at)[0])


def set_header_field(batch: bytearray | memoryview, name: str, value: int, pos: int = 0) -> None:
    """Writes field ``name`` of the batch header at ``pos`` (the CRC is not made right:
    set "crc" last for that)."""
    at, fmt = _FIELD[name]
    fmt.pack_into(batch, pos + at, value)

COMPRESSION_MASK = 0x07
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class BatchError(ValueError):
    """A batch that cannot be accepted: bad length, magic, CRC or record layout."""


class InvalidRecords(BatchError):
    """A well-formed batch Kafka refuses with INVALID_RECORD: a batch-level rule (count,
    offset range, control batch from a client, producer id without sequence) or, per
    record, ``record_errors`` [(index in the batch, why)] (ProduceResponse v8+)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = record_errors or []


class UnsupportedCompression(BatchError):
    """The batch names a codec Kafka does not define (attributes codec bits 5-7)."""


@dataclass(slots=True)
class WireRecord:
    """One record as a producer sent it; ``timestamp_ms`` None means "now"."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int | None = None


@dataclass(slots=True)
class ProducedBatch:
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[WireRecord]


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise BatchError("varint runs past the end of the record data")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise BatchError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        if n != -1:
            raise BatchError(f"negative length {n}")
        return None, pos
    end = pos + n
    if end > len(buf):
        raise BatchError("field runs past the end of the record data")
    return buf[pos:end], end


def _decompress(codec: int, data: bytes) -> bytes:
    try:
        return decompress(codec, data, MAX_DECOMPRESSED_BYTES)
    except UnknownCodec as e:
        raise UnsupportedCompression(str(e)) from e
    except CompressionError as e:
        raise BatchError(str(e)) from e


@dataclass(slots=True)
class ProducedBodies:
    """A produce request's records in the stored layout (see ``LogEngine.append``): the
    bodies are ``buf[start:]``, and the PRODUCER_GROWTH bytes before them are room for
    ``add_producer``."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    buf: memoryview | bytearray
    start: int
    meta_lens: array.array
    value_lens: array.array

    @property
    def data(self) -> memoryview:
        return memoryview(self.buf)[self.start :]

    def add_producer(self, producer: Producer) -> None:
        """The first record's meta section with ``producer`` added (with_producer), in the
        room before it: the records after it are not moved."""
        m0 = self.meta_lens[0]
        meta = with_producer(bytes(self.buf[self.start : self.start + m0]), producer)
        start = self.start + m0 - len(meta)
        if start < 0:  # with_producer grew the section by more than PRODUCER_GROWTH
            raise AssertionError("no room for the producer section")
        self.buf[start : start + len(meta)] = meta
        self.start = start
        self.meta_lens[0] = len(meta)


def decode_for_append(data: bytes) -> ProducedBodies | None:
    """The produce path: batch headers, CRCs and decompression here, the records in C
    (walfs_kafka_records) straight into walfs bodies. None when there are no records.
    Producer fields are the first batch's. ``decode_batches`` is the reference decoder."""
    first: tuple[int, int, int] | None = None
    parts: list[memoryview] = []
    metas = array.array("I")
    values = array.array("I")
    for producer_id, producer_epoch, base_sequence, base_ts, count, body in _batches(data):
        try:
            # The first batch's bodies come with room for add_producer before them.
            joined, m, v = decode_kafka_records(body, count, base_ts, 0 if parts else PRODUCER_GROWTH)
        except ValueError as e:
            # The reference decoder says why (and which records, for per-record errors).
            _decode_records(bytes(body), count, base_ts)
            raise BatchError(str(e)) from e
        if first is None:
            first = (producer_id, producer_epoch, base_sequence)
        parts.append(joined)
        metas.extend(m)
        values.extend(v)
    if first is None or not metas:
        return None
    # One batch (what producers send per partition) is appended from the buffer C wrote.
    buf = parts[0] if len(parts) == 1 else bytearray().join(parts)
    return ProducedBodies(*first, buf, PRODUCER_GROWTH, metas, values)


def decode_batches(data: bytes) -> list[ProducedBatch]:
    """Parse a produce request's record set (the reference decoder)."""
    return [
        ProducedBatch(pid, epoch, base_sequence, _decode_records(bytes(body), count, base_ts))
        for pid, epoch, base_sequence, base_ts, count, body in _batches(data)
    ]


def batch_end(data: bytes | bytearray | memoryview) -> int:
    """The offset after the last record of the v2 batch at the start of ``data`` (its base
    offset plus its last offset delta, plus one). BatchError when no header fits."""
    if len(data) < BATCH_OVERHEAD:
        raise BatchError("truncated batch header")
    return _end_at(data, 0)


def _end_at(data: bytes | bytearray | memoryview, pos: int) -> int:
    """The offset after the last record of the batch whose header is at ``pos``."""
    return header_field(data, "base_offset", pos) + header_field(data, "last_offset_delta", pos) + 1


def end_of_batches(raw: bytes | bytearray | memoryview) -> int | None:
    """The offset after the last whole record batch of a fetch answer, from the batch
    headers alone (base offset + lastOffsetDelta + 1; not yet checked: only where to
    fetch next); None when it holds none."""
    after = None
    pos = 0
    while len(raw) - pos >= BATCH_OVERHEAD:
        _base, length = _LOG_HEAD.unpack_from(raw, pos)
        if length < BATCH_OVERHEAD - LOG_OVERHEAD or pos + LOG_OVERHEAD + length > len(raw):
            break
        after = _end_at(raw, pos)
        pos += LOG_OVERHEAD + length
    return after


def split_batches(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(base offset, whole batch) of each record batch in a fetch answer; a batch cut
    short at the end of the answer (Kafka allows that) is dropped. BatchError for a
    batch length too short to hold a header."""
    pos = 0
    while len(raw) - pos >= BATCH_OVERHEAD:
        base, length = _LOG_HEAD.unpack_from(raw, pos)
        end = pos + LOG_OVERHEAD + length
        if length < BATCH_OVERHEAD - LOG_OVERHEAD:
            raise BatchError(f"malformed record batch in a fetch answer (length {length})")
        if end > len(raw):
            return
        yield base, raw[pos:end]
        pos = end


def _batches(data: bytes) -> Iterator[tuple[int, int, int, int, int, bytes | memoryview]]:
    """(producer id, producer epoch, base sequence, base timestamp, record count, records
    section) per data batch, checked (length, magic, CRC) and decompressed."""
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < BATCH_OVERHEAD:
            raise BatchError("truncated batch header")
        (
            _base_offset,
            batch_length,
            _epoch,
            magic,
            crc,
            attributes,
            last_delta,
            base_ts,
            _max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + batch_length
        if batch_length < BATCH_OVERHEAD - LOG_OVERHEAD or end > n:
            raise BatchError(f"batch length {batch_length} does not fit the record set")
        if magic != MAGIC:
            raise BatchError(f"record batch magic {magic} (only v2 is supported)")
        view = memoryview(data)
        if crc32c(view[pos + CRC_START : end]) != crc:  # no copy of the batch
            raise BatchError("record batch CRC-32C mismatch")
        body: bytes | memoryview = view[pos + BATCH_OVERHEAD : end]  # nor of its records
        pos = end
        # Kafka's batch rules for what clients send (LogValidator.validateBatch).
        if count <= 0:
            raise InvalidRecords(f"invalid reported count for record batch: {count}")
        if last_delta + 1 != count:
            raise InvalidRecords(f"inconsistent batch offset range: last delta {last_delta}, {count} records")
        if attributes & CONTROL_FLAG:
            raise InvalidRecords("clients are not allowed to write control records")
        if producer_id >= 0 and base_sequence < 0:
            raise InvalidRecords(f"invalid sequence number {base_sequence} of producer {producer_id}")
        codec = attributes & COMPRESSION_MASK
        if codec:
            body = _decompress(codec, bytes(body))
        if count < 0 or count > len(body):
            raise BatchError(f"record count {count} is impossible")
        yield producer_id, producer_epoch, base_sequence, base_ts, count, body


def _decode_records(body: bytes, count: int, base_ts: int) -> list[WireRecord]:
    records: list[WireRecord] = []
    errors: list[tuple[int, str]] = []
    p = 0
    for index in range(count):
        length, p = _read_varint(body, p)
        rec_end = p + length
        if length < 0 or rec_end > len(body):
            raise BatchError("record length runs past the batch")
        p += 1  # record attributes: unused by the v2 format
        ts_delta, p = _read_varint(body, p)
        _off_delta, p = _read_varint(body, p)
        key, p = _read_bytes(body, p)
        value, p = _read_bytes(body, p)
        nh, p = _read_varint(body, p)
        if nh < 0 or nh > length:
            raise BatchError(f"header count {nh} is impossible")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(nh):
            hk, p = _read_bytes(body, p)
            hv, p = _read_bytes(body, p)
            if hk is None:
                raise BatchError("null header key")
            try:
                headers.append((hk.decode(), hv))
            except UnicodeDecodeError:
                # The record is whole, only walfs cannot keep it: a per-record error.
                errors.append((index, "header key is not UTF-8"))
                continue
            if len(hk) > 0xFFFF:
                errors.append((index, f"header key of {len(hk)} bytes (at most 65535)"))
        if p != rec_end:
            raise BatchError("record fields do not add up to the record length")
        ts = base_ts + ts_delta
        records.append(WireRecord(key, value, headers, ts if base_ts >= 0 else None))
    if p != len(body):
        raise BatchError("trailing bytes after the last record")
    if errors:
        raise InvalidRecords(f"{len(errors)} invalid record(s): {errors[0][1]}", errors)
    return records


def _varint(n: int, out: bytearray) -> None:
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _nbytes(b: bytes | None, out: bytearray) -> None:
    if b is None:
        out.append(1)  # zigzag(-1)
        return
    _varint(len(b), out)
    out += b


def _header_key(k: Any) -> bytes:
    return k if isinstance(k, bytes) else str(k).encode()


def encode_batch(records: Sequence[Any]) -> bytes:
    """One v2 batch from ``walfs.Record``-like objects (offset, timestamp_ms, key,
    value, headers) with contiguous offsets."""
    if not records:
        return b""
    base_offset = records[0].offset
    base_ts = records[0].timestamp_ms
    max_ts = base_ts
    body = bytearray()
    rec = bytearray()
    for r in records:
        ts = r.timestamp_ms
        if ts > max_ts:
            max_ts = ts
        rec.clear()
        rec.append(0)
        _varint(ts - base_ts, rec)
        _varint(r.offset - base_offset, rec)
        _nbytes(r.key, rec)
        _nbytes(r.value, rec)
        headers: Iterable[Any] = r.headers or ()
        hl = list(headers)
        _varint(len(hl), rec)
        for hk, hv in hl:
            _nbytes(_header_key(hk), rec)
            _nbytes(hv, rec)
        _varint(len(rec), body)
        body += rec
    last_delta = records[-1].offset - base_offset
    return _sealed(base_offset, 0, last_delta, base_ts, max_ts, (-1, -1, -1), len(records), body)


def _sealed(
    base_offset: int,
    attributes: int,
    last_delta: int,
    base_ts: int,
    max_ts: int,
    producer: tuple[int, int, int],
    count: int,
    records: bytes | bytearray,
) -> bytes:
    """One batch: its header (partitionLeaderEpoch -1; producer is (id, epoch, base
    sequence)) with its CRC, then ``records``."""
    out = bytearray(BATCH_OVERHEAD)
    length = BATCH_OVERHEAD - LOG_OVERHEAD + len(records)
    _BATCH_HEAD.pack_into(
        out, 0, base_offset, length, -1, MAGIC, 0, attributes, last_delta, base_ts, max_ts, *producer, count
    )
    out += records
    set_header_field(out, "crc", crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def encode_records_for_test(
    records: Sequence[WireRecord],
    *,
    base_offset: int = 0,
    codec: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    """Build a producer-style batch (used by tests to craft requests by hand); producer is
    (producer id, epoch, base sequence)."""
    base_ts = min((r.timestamp_ms or 0) for r in records) if records else 0
    body = bytearray()
    rec = bytearray()
    for i, r in enumerate(records):
        rec.clear()
        rec.append(0)
        _varint((r.timestamp_ms or 0) - base_ts, rec)
        _varint(i, rec)
        _nbytes(r.key, rec)
        _nbytes(r.value, rec)
        _varint(len(r.headers), rec)
        for hk, hv in r.headers:
            _nbytes(hk.encode(), rec)
            _nbytes(hv, rec)
        _varint(len(rec), body)
        body += rec
    payload = compress(codec, bytes(body))
    max_ts = max((r.timestamp_ms or 0) for r in records) if records else 0
    return _sealed(base_offset, codec, len(records) - 1, base_ts, max_ts, producer, len(records), payload)


def batch_sizes(data: bytes) -> list[int]:
    """The size of each record batch in a produce request's record set, from the headers'
    length fields only (what Kafka checks against max.message.bytes before decoding). A
    cut or nonsensical length ends the list: the decoder refuses such data itself."""
    sizes = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        _base, length = _LOG_HEAD.unpack_from(data, pos)
        if length <= 0:
            break
        sizes.append(LOG_OVERHEAD + length)
        pos += LOG_OVERHEAD + length
    return sizes
