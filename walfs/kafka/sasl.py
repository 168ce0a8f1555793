"""SASL on the Kafka wire, as Kafka brokers do it (KIP-43, KIP-152): SaslHandshake picks a
mechanism, then SaslAuthenticate requests carry the mechanism's tokens. Until a connection
is authenticated, a SASL listener accepts ApiVersions and SaslHandshake only, then
SaslAuthenticate only; any other request closes the connection (Kafka's
IllegalSaslStateException: no response is sent). A refused mechanism is answered
(UNSUPPORTED_SASL_MECHANISM, with the enabled ones) and failed credentials too
(SASL_AUTHENTICATION_FAILED, after a short delay, as Kafka's
connection.failed.authentication.delay.ms), and then the connection is closed.
SaslHandshake or SaslAuthenticate on a listener without SASL, or after authentication,
get ILLEGAL_SASL_STATE.

After a SaslHandshake v0 (librdkafka needs it advertised; clients that also see
SaslAuthenticate use v1), the tokens come as bare size-prefixed frames without a Kafka
header and are answered the same way; a failure there closes the connection without an
answer, as Kafka does.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

import trio

from walfs.kafka.api import Api
from walfs.kafka.messages import ErrorCode, build, response_module
from walfs.kafka.sasl_session import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    AuthenticationFailed,
)

if TYPE_CHECKING:
    from walfs.kafka.broker import Broker, Connection

log = logging.getLogger("walfs.kafka.auth")

# Kafka's connection.failed.authentication.delay.ms default: slows password guessing.
FAILED_AUTH_DELAY_S = 0.1
_ZERO = datetime.timedelta(0)


async def handle_sasl_handshake(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(SASL_HANDSHAKE, version)
    session = conn.sasl
    if session is None or session.authenticated or session.mechanism is not None:
        return build(mod.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    enabled = session.config.mechanisms
    if req.mechanism not in enabled:
        log.warning("%s: SASL mechanism %r is not enabled: closing", conn.peer, req.mechanism)
        session.failed = True
        return build(
            mod.SaslHandshakeResponse, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled
        )
    session.mechanism = req.mechanism
    session.raw_tokens = version == 0
    return build(mod.SaslHandshakeResponse, error_code=ErrorCode.none, mechanisms=enabled)


async def handle_sasl_authenticate(broker: Broker, conn: Connection, version: int, req: Any) -> Any:
    mod = response_module(SASL_AUTHENTICATE, version)
    session = conn.sasl

    def answer(code: ErrorCode, message: str | None = None, token: bytes = b"") -> Any:
        return build(
            mod.SaslAuthenticateResponse,
            error_code=code,
            error_message=message,
            auth_bytes=token,
            session_lifetime=_ZERO,
        )

    if session is None or session.authenticated or session.mechanism is None:
        return answer(ErrorCode.illegal_sasl_state, "SaslAuthenticate is not expected now")
    try:
        token = await session.step(req.auth_bytes)
    except AuthenticationFailed as e:
        session.failed = True
        log.warning("%s: SASL %s authentication failed: %s", conn.peer, session.mechanism, e)
        await trio.sleep(FAILED_AUTH_DELAY_S)
        return answer(
            ErrorCode.sasl_authentication_failed,
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {session.mechanism}",
        )
    return answer(ErrorCode.none, None, token)


HANDLERS = {
    SASL_HANDSHAKE: Api("SaslHandshake", 0, 1, handle_sasl_handshake),
    SASL_AUTHENTICATE: Api("SaslAuthenticate", 0, 2, handle_sasl_authenticate),
}
