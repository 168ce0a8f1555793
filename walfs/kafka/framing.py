"""Size-prefixed frames on a byte stream: every Kafka request and response is an
int32 length followed by that many bytes."""

from __future__ import annotations

import os
import socket
import struct
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

_SIZE = struct.Struct(">i")
_PREAMBLE = struct.Struct(">hhi")

# Kafka's own default for socket.request.max.bytes: a frame above it is refused
# before any of it is buffered, so a bogus length cannot make us allocate gigabytes.
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024
# What all connections together may hold in request bytes (Kafka's queued.max.request.bytes
# idea): a connection whose next frame does not fit waits, and stops reading its socket,
# until others' requests are answered. A frame holds its bytes from the moment its size
# is read until it is handled (release_frame), read-ahead frames included (READ_AHEAD), so
# this bounds the listener's request memory whatever the number of connections.
DEFAULT_MAX_INFLIGHT_BYTES = 256 * 1024 * 1024
# Connections beyond this are closed as soon as they are accepted (with a log line).
DEFAULT_MAX_CONNECTIONS = 256
# A frame with at least this much still to come is received straight into its own buffer.
RECEIVE_INTO_FROM = 64 * 1024
# Frames a connection reads ahead of the one being handled (read_ahead): while a produce is
# decoded and appended, the next one is taken off the socket, so the client is not held up
# by a full socket buffer and the next request is whole when its turn comes.
READ_AHEAD = 1


# While a large frame is received, the socket's SO_RCVLOWAT is the rest of the frame (at
# most this): the reader wakes once the rest is in the kernel, not per segment, and the
# kernel acknowledges the client's segments as they come (Linux does not delay an ACK
# while less than SO_RCVLOWAT is unread) instead of when the reader next runs, so the
# client's send buffer drains while the event loop does other work (another request's
# append). docs/kafka.md ("Large frames"); docs/notes/2026-11-24-kafka-produce-path.md ("The
# producer's pace").
RECEIVE_LOWAT_MAX = 4 << 20


def _set_rcvlowat(sock: trio.socket.SocketType, n: int) -> bool:
    """Sets SO_RCVLOWAT to n; False where the system refuses it (the socket closed)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
    except OSError:
        return False
    return True


class ByteBudget:
    """A pool of bytes shared by every connection of a listener.

    Taking bytes that fit, and giving bytes back while no frame waits for room, touch
    only the count (no lock, no trip through trio's scheduler): that is every frame of a
    listener within its budget, two loop turns less per request (docs/notes/2026-11-24-kafka-fetch-path.md,
    "Fewer CPU per fetch")."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._cond = trio.Condition()
        self._waiting = 0  # acquires that did not fit: waiting for room, or for the lock
        self.waits = 0  # how often a frame had to wait for room (a metric)

    async def acquire(self, n: int) -> None:
        if not self._waiting and self.used + n <= self.total:
            self.used += n  # first come, first served: none waits ahead of this one
            return
        self._waiting += 1
        try:
            async with self._cond:
                if self.used + n > self.total:
                    self.waits += 1
                while self.used + n > self.total:
                    await self._cond.wait()
                self.used += n
        finally:
            self._waiting -= 1

    async def release(self, n: int) -> None:
        self.used -= n
        if self._waiting:
            with trio.CancelScope(shield=True):  # the bytes are back: the waiters must hear it
                async with self._cond:
                    self._cond.notify_all()


class FrameError(Exception):
    """The peer broke framing; the connection must be closed."""


class FrameTooLarge(FrameError):
    pass


class TruncatedFrame(FrameError):
    """The peer closed the connection in the middle of a frame."""


class FrameReader:
    """Reads whole frames from a trio stream, buffering partial reads."""

    def __init__(
        self,
        stream: trio.abc.ReceiveStream,
        max_bytes: int,
        budget: ByteBudget | None = None,
        direct: socket.socket | None = None,
    ) -> None:
        self._stream = stream
        # direct_socket(stream): bytes already in the kernel are read through it, without
        # the loop turn trio's receive takes after each call; it waits through trio.
        self._direct = direct
        self._max = max_bytes
        self._buf = bytearray()
        self._budget = budget
        # Bytes of the budget each frame read and not yet released holds, oldest first
        # (release_frame gives the oldest back; frames are handled in the order read).
        self._held: deque[int] = deque()

    async def _fill(self, n: int) -> bool:
        """Buffer at least n bytes; False on EOF before that."""
        while len(self._buf) < n:
            want = max(65536, n - len(self._buf))
            chunk: bytes | bytearray
            if self._direct is not None:
                try:
                    chunk = self._direct.recv(want)
                except BlockingIOError:
                    assert isinstance(self._stream, trio.SocketStream)
                    await trio.lowlevel.wait_readable(self._stream.socket)
                    continue
                except OSError as e:  # as trio's own receive_some reports a dead peer
                    raise trio.BrokenResourceError(e) from e
            else:
                chunk = await self._stream.receive_some(want)
            if not chunk:
                return False
            self._buf += chunk
        return True

    async def next_frame(self) -> bytes | memoryview | None:
        """The next frame's payload, or None when the peer closed between frames. A large
        frame on a plain TCP stream comes as a read-only view of a buffer of its own."""
        if not await self._fill(4):
            if self._buf:
                raise TruncatedFrame(f"connection closed after {len(self._buf)} bytes of a size")
            return None
        (size,) = _SIZE.unpack_from(self._buf)
        if size < 0 or size > self._max:
            raise FrameTooLarge(f"frame of {size} bytes (cap {self._max})")
        if self._budget is not None:
            await self._budget.acquire(size)
            self._held.append(size)
        if size - (len(self._buf) - 4) >= RECEIVE_INTO_FROM and isinstance(self._stream, trio.SocketStream):
            return await self._receive_into(size)
        if not await self._fill(4 + size):
            raise TruncatedFrame(f"connection closed after {len(self._buf) - 4} of {size} bytes of a frame")
        payload = bytes(memoryview(self._buf)[4 : 4 + size])  # one copy, not a slice and a copy
        del self._buf[: 4 + size]
        return payload

    async def _receive_into(self, size: int) -> memoryview:
        """A large frame (a produce request) received straight into a buffer of its own,
        not through the read buffer and a copy out of it: a read-only view of it."""
        payload = bytearray(size)
        have = len(self._buf) - 4
        payload[:have] = memoryview(self._buf)[4:]
        self._buf.clear()
        view = memoryview(payload)
        assert isinstance(self._stream, trio.SocketStream)
        sock = self._stream.socket
        lowat = 1  # 0: the system refused it, not tried again
        try:
            while have < size:
                want = min(size - have, RECEIVE_LOWAT_MAX)
                if lowat and want != lowat:
                    lowat = want if _set_rcvlowat(sock, want) else 0
                try:
                    got = await sock.recv_into(view[have:])
                except OSError as e:  # as trio's own receive_some reports a dead peer
                    raise trio.BrokenResourceError(e) from e
                if not got:
                    raise TruncatedFrame(f"connection closed after {have} of {size} bytes of a frame")
                have += got
        finally:
            if lowat > 1:
                _set_rcvlowat(sock, 1)  # the next frame's size wakes the reader again
        return view.toreadonly()

    async def release_frame(self) -> None:
        """Gives the oldest unreleased frame's bytes back to the shared budget (once it is
        handled); nothing when every frame read has been released."""
        if self._budget is not None and self._held:
            await self._budget.release(self._held.popleft())

    async def release_all(self) -> None:
        """Gives back the bytes of every frame read and not released (the connection ends)."""
        while self._held:
            await self.release_frame()


def only_error(group: BaseExceptionGroup[Any]) -> BaseException:
    """The one error behind a nursery's group (the other task's Cancelled dropped), or the
    group itself when there are several: a connection's helper tasks (read_ahead here, the
    response pipe) raise their errors as themselves, so the handlers see the same errors
    as with one task."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                walk(sub)
        elif not isinstance(e, trio.Cancelled):
            leaves.append(e)

    walk(group)
    return leaves[0] if len(leaves) == 1 else group


# One read-ahead item: a payload (None at the end), or the error reading it raised.
_Item = tuple[bytes | memoryview | None, BaseException | None]


class ReadAhead:
    """A connection's frames in order, read by a task of their own up to ``depth`` frames
    ahead of the one being handled (read_ahead)."""

    def __init__(self, reader: FrameReader, depth: int) -> None:
        self._reader = reader
        self._send, self._recv = trio.open_memory_channel[_Item](depth)

    async def _run(self) -> None:
        async with self._send:
            while True:
                try:
                    payload = await self._reader.next_frame()
                except Exception as e:
                    # Raised where the frame would have been read: after the frames before it.
                    await self._send.send((None, e))
                    return
                try:
                    # Room in the channel: handed over without a loop turn (the handling
                    # task wakes; this one yields when it next waits for the socket).
                    self._send.send_nowait((payload, None))
                except trio.WouldBlock:
                    await self._send.send((payload, None))
                if payload is None:
                    return

    @property
    def idle(self) -> bool:
        """No frame read ahead waits to be handled."""
        return self._recv.statistics().current_buffer_used == 0

    async def next_frame(self) -> bytes | memoryview | None:
        """As FrameReader.next_frame: the next payload, None at the end, or its error."""
        try:
            # A frame already read is taken without a trip through the scheduler (a
            # consumer's fetch is whole by now); the reading task runs again, and this
            # one yields, when the next frame is awaited.
            payload, error = self._recv.receive_nowait()
        except trio.WouldBlock:
            try:
                payload, error = await self._recv.receive()
            except trio.EndOfChannel:
                return None
        except trio.EndOfChannel:
            return None
        if error is not None:
            raise error
        return payload


@asynccontextmanager
async def read_ahead(reader: FrameReader, depth: int = READ_AHEAD) -> AsyncIterator[ReadAhead]:
    """``reader``'s frames, read ahead: while the caller handles one frame, up to ``depth``
    more are read (each holds its bytes of the budget until release_frame). Errors come in
    order, raised by next_frame as themselves. The reading task ends with the block."""
    frames = ReadAhead(reader, depth)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(frames._run)
            try:
                yield frames
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        err = only_error(group)
        if err is group:
            raise
        raise err from err.__cause__  # as itself, its own cause kept


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


# Answers from this size on are written as their size and their pieces, not joined first.
SEPARATE_SIZE_FROM = 64 * 1024
_IOV_MAX = 1024  # Linux's limit on the pieces of one sendmsg


def direct_socket(stream: trio.abc.Stream) -> socket.socket | None:
    """A second handle on a plain TCP stream's socket (a dup of its descriptor, non-blocking
    as the first) through which FrameReader reads the bytes already received and
    send_frame writes an answer the socket buffer takes at once, without the loop turn
    trio's receive and send take after each call (docs/notes/2026-11-24-kafka-fetch-path.md, "Fewer CPU per
    fetch"); waits still go through trio. None for other streams (TLS). Its owner closes
    it before the stream (the listener's connection)."""
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        raw = socket.socket(fileno=os.dup(stream.socket.fileno()))
    except OSError:
        return None
    raw.setblocking(False)
    return raw


def _sent(views: list[memoryview], sent: int) -> None:
    """Drops the first ``sent`` bytes of ``views``."""
    while sent:
        first = len(views[0])
        if sent < first:
            views[0] = views[0][sent:]
            return
        sent -= first
        del views[0]


async def send_frame(
    stream: trio.abc.SendStream, payload: bytes | list[Any], direct: socket.socket | None = None
) -> None:
    """Writes one size-prefixed frame: payload is bytes or the pieces of one answer
    (messages.encode_response). A small answer goes out joined in one send; a large one
    is not copied: on a plain TCP stream its size and pieces go out with sendmsg (one
    system call for the whole answer when the socket buffer takes it), on others (TLS)
    piece by piece. With ``direct`` (direct_socket(stream)) what the socket buffer takes
    at once is written through it, and only the rest waits through trio."""
    pieces = [payload] if isinstance(payload, bytes | bytearray | memoryview) else payload
    size = sum(len(p) for p in pieces)
    if size < SEPARATE_SIZE_FROM:
        data = _SIZE.pack(size) + b"".join(pieces)
        if direct is None:
            await stream.send_all(data)
            return
        views = [memoryview(data)]
    else:
        if not isinstance(stream, trio.SocketStream):
            await stream.send_all(_SIZE.pack(size))
            for p in pieces:
                await stream.send_all(p)
            return
        views = [memoryview(_SIZE.pack(size))] + [memoryview(p).cast("B") for p in pieces if len(p)]
    if direct is not None:
        _sent(views, _send_now(direct, views))
    # Here the stream is a plain TCP one (direct_socket gives a handle for no other):
    # the rest goes out with sendmsg, waiting through trio.
    assert isinstance(stream, trio.SocketStream)
    sock = stream.socket
    try:
        while views:
            _sent(views, await sock.sendmsg(views[:_IOV_MAX]))
    except OSError as e:  # as trio's own send_all reports a dead peer
        raise trio.BrokenResourceError(e) from e


def _send_now(direct: socket.socket, views: list[memoryview]) -> int:
    """What one non-blocking sendmsg of ``views`` writes (0: the buffer is full)."""
    try:
        return direct.sendmsg(views[:_IOV_MAX])
    except BlockingIOError:
        return 0
    except OSError as e:  # as trio's own send_all reports a dead peer
        raise trio.BrokenResourceError(e) from e


def read_preamble(payload: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part of every request header that
    is the same in all header versions, readable even for APIs we do not know."""
    if len(payload) < _PREAMBLE.size:
        raise FrameError(f"request of {len(payload)} bytes is shorter than a header")
    key, version, correlation_id = _PREAMBLE.unpack_from(payload)
    return key, version, correlation_id
