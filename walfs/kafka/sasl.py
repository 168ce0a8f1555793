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
from walfs.kafka.scram import MAX_MESSAGE_BYTES, ScramCredential, ScramError, ScramServer

if TYPE_CHECKING:
    from walfs.kafka.auth_config import AuthConfig, KafkaUser
    from walfs.kafka.broker import Broker, Connection

log = logging.getLogger("walfs.kafka.auth")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
# Kafka's connection.failed.authentication.delay.ms default: slows password guessing.
FAILED_AUTH_DELAY_S = 0.1
_ZERO = datetime.timedelta(0)


class AuthenticationFailed(Exception):
    pass


class SaslSession:
    """One connection's SASL state on a SASL listener."""

    def __init__(self, config: AuthConfig, peer: str = "?") -> None:
        self.config = config
        self.peer = peer
        self.mechanism: str | None = None
        self._scram: ScramServer | None = None
        self.user: KafkaUser | None = None
        self.failed = False  # the connection is closed after the current answer
        self.raw_tokens = False  # after a v0 handshake: frames are bare SASL tokens

    @property
    def authenticated(self) -> bool:
        return self.user is not None

    def allowed(self, api_key: int) -> bool:
        """Whether a request may come now (before authentication, only the exchange)."""
        if self.authenticated:
            return True
        if self.mechanism is None:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        return api_key == SASL_AUTHENTICATE

    def _credential(self, name: str, mechanism: str) -> ScramCredential | None:
        user = self.config.user(name)
        return user.scram.get(mechanism) if user else None

    async def step(self, token: bytes) -> bytes:
        """Consumes one client token; returns the server's. Raises AuthenticationFailed."""
        mech = self.mechanism
        assert mech is not None
        try:
            if mech == "PLAIN":
                return await self._plain(token)
            if self._scram is None:
                self._scram = ScramServer(mech, lambda name: self._credential(name, mech))
                return self._scram.first(token)
            answer = self._scram.final(token)
            name = self._scram.user
            assert name is not None
            self._done(name)
            return answer
        except ScramError as e:
            raise AuthenticationFailed(str(e)) from None

    async def _plain(self, token: bytes) -> bytes:
        # authzid NUL authcid NUL password (RFC 4616); Kafka requires authzid to be empty
        # or the user itself.
        parts = token.split(b"\0")
        if len(token) > MAX_MESSAGE_BYTES or len(parts) != 3 or not parts[1] or not parts[2]:
            raise AuthenticationFailed("malformed PLAIN token")
        try:
            authzid, name = parts[0].decode("utf-8"), parts[1].decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN user name is not UTF-8") from None
        if authzid and authzid != name:
            raise AuthenticationFailed("authorization id differs from the user name")
        user = self.config.user(name)
        cred = user.scram[min(user.scram)] if user is not None else None  # SHA-256 first: cheaper
        if cred is None:
            raise AuthenticationFailed("invalid user credentials")
        ok = await trio.to_thread.run_sync(cred.check_password, parts[2])
        if not ok:
            raise AuthenticationFailed("invalid user credentials")
        self._done(name)
        return b""

    def _done(self, name: str) -> None:
        user = self.config.user(name)
        if user is None:  # removed from the file during the exchange
            raise AuthenticationFailed("invalid user credentials")
        self.user = user
        log.info(
            "%s: authenticated as %r (org %d) with %s", self.peer, user.name, user.org_id, self.mechanism
        )


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
