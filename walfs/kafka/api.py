"""The shape every API handler has, shared by the handler modules and dispatch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walfs.kafka.broker import Broker, Connection

# (broker, connection, api version, decoded kio request) -> kio response, or None
# when the protocol wants no response (Produce with acks=0).
Handler = Callable[["Broker", "Connection", int, Any], Awaitable[Any | None]]


@dataclass(frozen=True)
class Api:
    name: str
    min_version: int
    max_version: int
    handler: Handler
