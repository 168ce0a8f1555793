"""The shape every API handler has, shared by the handler modules and dispatch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walfs.kafka.broker import Broker, Connection

# (broker, connection, api version, decoded kio request) -> kio response (or a Later,
# or a Written answer), or None when the protocol wants no response (Produce with acks=0).
Handler = Callable[["Broker", "Connection", int, Any], Awaitable[Any | None]]


@dataclass(frozen=True)
class Api:
    name: str
    min_version: int
    max_version: int
    handler: Handler


class Later:
    """A response that is ready only once ``finish()`` returns (a produce with acks=all
    waits for its sync there). The connection hands it to its ResponsePipe
    (walfs/kafka/pipeline.py) and reads and handles the next requests meanwhile; the
    answers still go out in request order."""

    __slots__ = ("finish",)

    def __init__(self, finish: Callable[[], Awaitable[Any]]) -> None:
        self.finish = finish


class Written:
    """A response the handler wrote in wire form itself, but for its header's correlation
    id: ``write(correlation_id)`` returns what messages.encode_response would (bytes, or
    the pieces of a large answer). The fetch answers this way (walfs/kafka/fetch_answer.py)."""

    __slots__ = ("write",)

    def __init__(self, write: Callable[[int], Any]) -> None:
        self.write = write
