"""One connection's SASL state on a SASL listener (walfs/kafka/sasl.py has the handlers and
the protocol's story): which requests may come now, and the exchange of PLAIN or SCRAM
tokens. Kept apart from the handlers so that the broker's Connection can hold it without
importing the handler modules."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from walfs.kafka.scram import MAX_MESSAGE_BYTES, ScramCredential, ScramError, ScramServer

if TYPE_CHECKING:
    from walfs.kafka.auth_config import AuthConfig, KafkaUser

log = logging.getLogger("walfs.kafka.auth")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


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
