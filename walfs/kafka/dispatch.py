"""Routes one request frame to its handler and encodes the answer.

Each handler module exports ``HANDLERS``: API key -> ``Api`` (version range and
coroutine). The ranges are what ApiVersions advertises; they stop below the
versions that identify topics by id instead of name (Fetch 13, Produce 13,
DeleteTopics 6), which walfs has no use for, and include the flexible
(tagged-field) versions the current clients prefer."""

from __future__ import annotations

import logging
from typing import Any

from walfs.kafka import (
    admin_cluster,
    admin_configs,
    admin_groups,
    fetch,
    groups,
    metadata,
    produce,
    sasl,
    topics_admin,
)
from walfs.kafka.api import Api, Later, Written
from walfs.kafka.broker import Broker, Connection
from walfs.kafka.framing import read_preamble
from walfs.kafka.messages import Encoded, ErrorCode, build, decode_request, encode_response, response_module

log = logging.getLogger("walfs.kafka")

API_VERSIONS_KEY = 18

HANDLERS: dict[int, Api] = {
    **metadata.HANDLERS,
    **produce.HANDLERS,
    **fetch.HANDLERS,
    **topics_admin.HANDLERS,
    **groups.HANDLERS,
    **admin_groups.HANDLERS,
    **admin_configs.HANDLERS,
    **admin_cluster.HANDLERS,
    **sasl.HANDLERS,
}

SUPPORTED: dict[int, tuple[int, int]] = {
    key: (api.min_version, api.max_version) for key, api in HANDLERS.items()
}


class CloseConnection(Exception):
    """The request cannot be answered on this connection; log it and hang up."""


def _unsupported_api_versions(correlation_id: int) -> Encoded:
    # A client that asked for an ApiVersions version we lack gets a v0 answer with
    # UNSUPPORTED_VERSION and our table, so it can retry with one we have (KIP-511).
    mod = response_module(API_VERSIONS_KEY, 0)
    keys = tuple(
        build(mod.ApiVersion, api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(SUPPORTED.items())
    )
    resp = build(mod.ApiVersionsResponse, error_code=ErrorCode.unsupported_version, api_keys=keys)
    return encode_response(correlation_id, resp)


async def dispatch(broker: Broker, conn: Connection, payload: bytes | memoryview) -> Encoded | Later | None:
    """The unframed response to one request (bytes, or its pieces: encode_response), None
    when none is due (acks=0), or a Later whose ``finish()`` returns the unframed response
    (walfs/kafka/pipeline.py).

    Raises CloseConnection for requests that have no valid answer."""
    api_key, version, correlation_id = read_preamble(payload)
    api = HANDLERS.get(api_key)
    if api is None or not api.min_version <= version <= api.max_version:
        if api_key == API_VERSIONS_KEY:
            log.info("%s: ApiVersions v%d unsupported, answering with v0", conn.peer, version)
            return _unsupported_api_versions(correlation_id)
        # Kafka brokers also close the connection here: no response layout exists for
        # an API or version the broker does not know.
        raise CloseConnection(f"unsupported API key {api_key} version {version}")
    try:
        header, request = decode_request(api_key, version, payload)
    except Exception as e:  # kio raises several types for malformed input
        raise CloseConnection(f"malformed {api.name} v{version} request: {type(e).__name__}: {e}") from e
    conn.client_id = header.client_id
    response: Any = await api.handler(broker, conn, version, request)
    if response is None:
        return None
    if isinstance(response, Written):
        return response.write(correlation_id)
    if isinstance(response, Later):
        later = response

        async def finish() -> Encoded:
            return encode_response(correlation_id, await later.finish())

        return Later(finish)
    return encode_response(correlation_id, response)
