"""Size-prefixed frames on a byte stream: every Kafka request and response is an
int32 length followed by that many bytes."""

from __future__ import annotations

import struct

import trio

_SIZE = struct.Struct(">i")
_PREAMBLE = struct.Struct(">hhi")

# Kafka's own default for socket.request.max.bytes: a frame above it is refused
# before any of it is buffered, so a bogus length cannot make us allocate gigabytes.
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024


class FrameError(Exception):
    """The peer broke framing; the connection must be closed."""


class FrameTooLarge(FrameError):
    pass


class TruncatedFrame(FrameError):
    """The peer closed the connection in the middle of a frame."""


class FrameReader:
    """Reads whole frames from a trio stream, buffering partial reads."""

    def __init__(self, stream: trio.abc.ReceiveStream, max_bytes: int) -> None:
        self._stream = stream
        self._max = max_bytes
        self._buf = bytearray()

    async def _fill(self, n: int) -> bool:
        """Buffer at least n bytes; False on EOF before that."""
        while len(self._buf) < n:
            chunk = await self._stream.receive_some(max(65536, n - len(self._buf)))
            if not chunk:
                return False
            self._buf += chunk
        return True

    async def next_frame(self) -> bytes | None:
        """The next frame's payload, or None when the peer closed between frames."""
        if not await self._fill(4):
            if self._buf:
                raise TruncatedFrame(f"connection closed after {len(self._buf)} bytes of a size")
            return None
        (size,) = _SIZE.unpack_from(self._buf)
        if size < 0 or size > self._max:
            raise FrameTooLarge(f"frame of {size} bytes (cap {self._max})")
        if not await self._fill(4 + size):
            raise TruncatedFrame(f"connection closed after {len(self._buf) - 4} of {size} bytes of a frame")
        payload = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        return payload


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def read_preamble(payload: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part of every request header that
    is the same in all header versions, readable even for APIs we do not know."""
    if len(payload) < _PREAMBLE.size:
        raise FrameError(f"request of {len(payload)} bytes is shorter than a header")
    key, version, correlation_id = _PREAMBLE.unpack_from(payload)
    return key, version, correlation_id
