"""Kafka's four record-batch codecs, decompressed with a cap.

A v2 batch's attributes name its codec (bits 0-2): 1 gzip, 2 snappy, 3 lz4, 4 zstd.
What a producer compressed is decompressed here, never into more than ``cap`` bytes:
a small "bomb" (a few KiB that expand to GiB) is refused with ``CompressionError``
once the output would pass the cap, with memory bounded by the cap.

- gzip: RFC 1952 members one after another (as ``gzip.decompress`` reads them), zlib.
- snappy: either a raw snappy block (librdkafka, the Go clients) or Kafka's Java framing
  from xerial's SnappyOutputStream: magic ``\\x82SNAPPY\\x00``, int32 version, int32
  minimum compatible version, then chunks of int32 big-endian length + raw snappy block.
  A raw block states its decompressed length up front: it is checked before decoding.
- lz4: the LZ4 frame format (Kafka's magic v2 batches use the standard frame).
- zstd: zstd frames.
snappy, lz4 and zstd come from cramjam (Rust, one wheel for all three); its
``decompress_into`` writes into a buffer of cap + 1 bytes and fails when that fills.

Records are stored uncompressed (a walfs record is one line of a file); a fetch serves
them uncompressed (Kafka consumers accept any codec, none included).
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODEC_NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# A batch's records may not decompress to more than Kafka's message.max.bytes default:
# a small "bomb" is refused after this many bytes instead of filling memory.
MAX_DECOMPRESSED_BYTES = 1048588

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEAD = len(XERIAL_MAGIC) + 8


class CompressionError(ValueError):
    """Data that does not decompress, or decompresses to more than the cap."""


class UnknownCodec(CompressionError):
    """A codec number Kafka does not define (5-7)."""


def _too_large(name: str, cap: int) -> CompressionError:
    return CompressionError(f"{name} data decompresses to more than {cap} bytes")


def _gunzip(data: bytes, cap: int) -> bytes:
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            out += d.decompress(rest, cap + 1 - len(out))
        except zlib.error as e:
            raise CompressionError(f"bad gzip data: {e}") from e
        if len(out) > cap:
            raise _too_large("gzip", cap)
        if not d.eof:
            if d.unconsumed_tail:
                raise _too_large("gzip", cap)
            raise CompressionError("bad gzip data: truncated")
        rest = d.unused_data
        if not rest:
            return bytes(out)


def _snappy_block(block: memoryview, out: bytearray, cap: int) -> None:
    try:
        n = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as e:
        raise CompressionError(f"bad snappy data: {e}") from e
    if len(out) + n > cap:
        raise _too_large("snappy", cap)
    buf = bytearray(n)
    try:
        got = cramjam.snappy.decompress_raw_into(block, buf)
    except cramjam.DecompressionError as e:
        raise CompressionError(f"bad snappy data: {e}") from e
    if got != n:
        raise CompressionError("bad snappy data: block shorter than it says")
    out += buf


def _unsnappy(data: bytes, cap: int) -> bytes:
    view = memoryview(data)
    out = bytearray()
    if not data.startswith(XERIAL_MAGIC):
        _snappy_block(view, out, cap)
        return bytes(out)
    if len(data) < _XERIAL_HEAD:
        raise CompressionError("bad snappy data: truncated xerial header")
    pos = _XERIAL_HEAD
    while pos < len(data):
        if len(data) - pos < 4:
            raise CompressionError("bad snappy data: truncated xerial chunk length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or n > len(data) - pos:
            raise CompressionError(f"bad snappy data: xerial chunk of {n} bytes does not fit")
        _snappy_block(view[pos : pos + n], out, cap)
        pos += n
    return bytes(out)


def _into(name: str, fn: object, data: bytes, cap: int) -> bytes:
    buf = bytearray(cap + 1)
    try:
        n = fn(data, buf)  # type: ignore[operator]
    except cramjam.DecompressionError as e:
        # cramjam reports a full buffer the same way as damage ("failed to write whole
        # buffer"): both end here, and both are refused.
        raise CompressionError(f"bad {name} data, or more than {cap} bytes decompressed: {e}") from e
    if n > cap:
        raise _too_large(name, cap)
    return bytes(memoryview(buf)[:n])


def decompress(codec: int, data: bytes, cap: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The records section of a batch compressed with ``codec`` (1-4), at most cap bytes."""
    if codec == GZIP:
        return _gunzip(data, cap)
    if codec == SNAPPY:
        return _unsnappy(data, cap)
    if codec == LZ4:
        return _into("lz4", cramjam.lz4.decompress_into, data, cap)
    if codec == ZSTD:
        return _into("zstd", cramjam.zstd.decompress_into, data, cap)
    raise UnknownCodec(f"compression codec {codec} is not supported")


def compress(codec: int, data: bytes) -> bytes:
    """The producer's side (tests craft batches with it): snappy in xerial framing, as the
    Java client writes it."""
    if codec == 0:
        return data
    if codec == GZIP:
        return gzip.compress(data)
    if codec == SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnknownCodec(f"compression codec {codec} is not supported")
