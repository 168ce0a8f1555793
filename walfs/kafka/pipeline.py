"""A connection's responses, in request order, with the slow ones off the read path.

Kafka clients keep several requests in flight on a connection (the Java producer 5,
librdkafka up to 5 with idempotence) and expect the answers in the order they asked.
Answering one request at a time made each produce with acks=all wait for its own fsync
before the next request was even read. Here a handler may answer with a ``Later``
(walfs/kafka/api.py): its appends are done, only the wait for durability is left. The
connection passes the Later to the pipe and goes on reading and appending the next
requests, so their records join the sync already under way or the next one (group
commit), while the pipe's task awaits each answer in turn and sends it. At most
``depth`` answers wait; beyond that the reader waits, and stops reading its socket.

An answer that is ready, with nothing owed ahead of it (a fetch from a consumer that
keeps one request in flight, as the Java consumer does), is sent by the connection's own
task at once: the hop to the pipe's task cost a loop turn on each fetch's way out
(docs/notes/2026-11-24-kafka-fetch-path.md, "The Fetch round trip").
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from walfs.kafka.api import Later
from walfs.kafka.framing import only_error, send_frame
from walfs.kafka.messages import Encoded

# Answers a connection may owe at once (requests read ahead of their answers).
PIPELINE_DEPTH = 16
# How long a connection closing on a bad request still sends the answers it owes.
DRAIN_S = 30.0

# (api name, seconds, failed) -> None: the listener's request latency metric.
Observe = Callable[[str, float, bool], None]


class ResponsePipe:
    def __init__(
        self, stream: trio.abc.SendStream, depth: int = PIPELINE_DEPTH, direct: socket.socket | None = None
    ) -> None:
        self._stream = stream
        # framing.direct_socket(stream): answers the socket buffer takes at once go out
        # without a loop turn (send_frame).
        self._direct = direct
        self._send, self._recv = trio.open_memory_channel[tuple[Any, str, float, Observe | None]](depth - 1)
        self._owed = 0  # answers queued to the pipe's task or being sent by it

    @property
    def idle(self) -> bool:
        """No answer is owed: every answer so far is in the socket's send buffer."""
        return self._owed == 0

    async def send(
        self, response: Encoded | Later | None, api: str = "", t0: float = 0.0, observe: Observe | None = None
    ) -> None:
        """Queues one request's answer behind those before it (None: the request has no
        answer, acks=0). ``observe`` is called when a Later's answer is ready, with the
        time since ``t0``. A ready answer with nothing owed ahead of it is sent before
        this returns (the pipe's task is idle then: nothing else writes the stream)."""
        if response is None:
            return
        if self._owed == 0 and not isinstance(response, Later):
            await send_frame(self._stream, response, self._direct)
            return
        self._owed += 1
        await self._send.send((response, api, t0, observe))

    async def _run(self) -> None:
        async with self._recv:
            async for response, api, t0, observe in self._recv:
                try:
                    if isinstance(response, Later):
                        failed = True
                        try:
                            response = await response.finish()
                            failed = False
                        finally:
                            if observe is not None:
                                observe(api, time.perf_counter() - t0, failed)
                    if response is None:
                        continue
                    # A large answer (a fetch) is not copied to put its size in front.
                    await send_frame(self._stream, response, self._direct)
                finally:
                    self._owed -= 1


@asynccontextmanager
async def response_pipe(
    stream: trio.abc.SendStream,
    depth: int = PIPELINE_DEPTH,
    *,
    drain_on: tuple[type[BaseException], ...] = (),
    direct: socket.socket | None = None,
) -> AsyncIterator[ResponsePipe]:
    """A ResponsePipe with its sending task. On a normal exit every queued answer is sent
    first; an error in the reader or in the sender ends both, and is raised as itself (not
    as an exception group), so the connection's handlers see the same errors as before.

    An error of a type in ``drain_on`` (the client's bad frame, a request the protocol
    forbids) ends the reading only: the answers already queued are still sent, within
    DRAIN_S, and then it is raised. Those requests were handled (a produce's records are
    in the log): a producer left without their answers would send the records again."""
    pipe = ResponsePipe(stream, depth, direct)
    closing: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pipe._run)
            async with pipe._send:
                try:
                    yield pipe
                except drain_on as e:
                    closing = e
                    nursery.cancel_scope.deadline = trio.current_time() + DRAIN_S
    except BaseExceptionGroup as group:
        err = only_error(group)
        if err is group:
            raise
        raise err from err.__cause__  # as itself, its own cause kept
    if closing is not None:
        raise closing
