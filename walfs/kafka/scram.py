"""SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka use them): the stored
credential, and the server's side of one authentication exchange.

A credential is what Kafka stores for a SCRAM user: salt, iteration count, StoredKey and
ServerKey. The password itself is never stored; PLAIN is checked against the same
credential (the password is salted and iterated, and its StoredKey compared).

The exchange (no channel binding, as Kafka: a client asking for it is refused):

    client-first  n,[a=authzid],n=user,r=cnonce[,extensions]
    server-first  r=cnonce+snonce,s=base64(salt),i=iterations
    client-final  c=base64(gs2 header),r=cnonce+snonce,p=base64(ClientProof)
    server-final  v=base64(ServerSignature)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

# Kafka's bounds for SCRAM iterations (ScramMechanism: 4096 .. 16384).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 8192
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Longest client message we parse (user names and nonces are short; Kafka has no larger need).
MAX_MESSAGE_BYTES = 4096


class ScramError(Exception):
    """The client's exchange is malformed or its proof is wrong: authentication fails."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError(f"{what} is not base64") from None


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @property
    def digest(self) -> str:
        return MECHANISMS[self.mechanism]

    def to_json(self) -> dict[str, object]:
        return {
            "salt": _b64(self.salt),
            "iterations": self.iterations,
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
        }

    @classmethod
    def from_json(cls, mechanism: str, data: object) -> ScramCredential:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})")
        if not isinstance(data, dict):
            raise ValueError(f"{mechanism} credential must be an object")
        try:
            iterations = data["iterations"]
            salt = base64.b64decode(data["salt"], validate=True)
            stored = base64.b64decode(data["stored_key"], validate=True)
            server = base64.b64decode(data["server_key"], validate=True)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"{mechanism} credential: needs salt, iterations, stored_key, server_key ({e})"
            ) from None
        size = hashlib.new(MECHANISMS[mechanism]).digest_size
        if not isinstance(iterations, int) or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"{mechanism} iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        if len(stored) != size or len(server) != size or not salt:
            raise ValueError(f"{mechanism} credential has keys of the wrong size")
        return cls(mechanism, salt, iterations, stored, server)

    def check_password(self, password: bytes) -> bool:
        """PLAIN against this credential: salt and iterate the password, compare StoredKey.
        CPU-heavy (PBKDF2): call it off the event loop."""
        salted = hashlib.pbkdf2_hmac(self.digest, password, self.salt, self.iterations)
        client_key = hmac.digest(salted, b"Client Key", self.digest)
        return hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), self.stored_key)


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential with a random salt (what `walfs kafka-user add` stores)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    digest = MECHANISMS[mechanism]
    salt = secrets.token_bytes(32) if salt is None else salt
    # RFC 5802 asks for SASLprep of the password; like Kafka's Java client, we use its
    # UTF-8 bytes as they are (ASCII passwords are unchanged by SASLprep).
    salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", digest)
    server_key = hmac.digest(salted, b"Server Key", digest)
    return ScramCredential(mechanism, salt, iterations, hashlib.new(digest, client_key).digest(), server_key)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError(f"malformed {what}")
        out.append((part[0], part[2:]))
    return out


def _saslname(text: str) -> str:
    """RFC 5802's escaping of ',' and '=' in names ("=2C", "=3D"); any other '=' is an error."""
    out = text.replace("=2C", ",").replace("=3D", "\0")
    if "=" in out:
        raise ScramError("malformed user name")
    return out.replace("\0", "=")


class ScramServer:
    """One server-side exchange. ``lookup(user)`` gives the user's credential for this
    mechanism, or None. ``first``, then ``final``; ``user`` is set once ``final`` succeeded."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self._server_nonce = server_nonce
        self._lookup = lookup
        self.user: str | None = None
        self._cred: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce = ""
        self._claimed = ""

    def first(self, message: bytes) -> bytes:
        if len(message) > MAX_MESSAGE_BYTES:
            raise ScramError("client-first message too long")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise ScramError("malformed client-first message")
        cb, authzid, bare = parts
        if cb == "p" or cb.startswith("p="):
            raise ScramError("channel binding is not supported")
        if cb not in ("n", "y"):
            raise ScramError("malformed gs2 header")
        attrs = _attributes(bare, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("client-first message needs n= and r=")
        user = _saslname(attrs[0][1])
        for key, value in attrs[2:]:
            # Kafka's only extension is tokenauth (delegation tokens), which walfs lacks.
            if key == "t" or value.startswith("tokenauth"):
                raise ScramError("delegation tokens are not supported")
        if authzid:
            if not authzid.startswith("a=") or _saslname(authzid[2:]) != user:
                raise ScramError("authorization id differs from the user name")
        cred = self._lookup(user)
        if cred is None:
            raise ScramError("invalid user credentials")
        self._cred = cred
        self._claimed = user
        self._gs2 = f"{cb},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + self._server_nonce()
        self._server_first = f"r={self._nonce},s={_b64(cred.salt)},i={cred.iterations}"
        return self._server_first.encode("ascii")

    def final(self, message: bytes) -> bytes:
        cred = self._cred
        if cred is None:
            raise ScramError("client-final message before client-first")
        if len(message) > MAX_MESSAGE_BYTES:
            raise ScramError("client-final message too long")
        try:
            text = message.decode("ascii")
        except UnicodeDecodeError:
            raise ScramError("client-final message is not ASCII") from None
        attrs = _attributes(text, "client-final message")
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise ScramError("client-final message needs c=, r= and p=")
        if _unb64(attrs[0][1], "channel binding") != self._gs2.encode("utf-8"):
            raise ScramError("channel binding differs from the gs2 header")
        # Kafka checks that the nonce ends with the server's (librdkafka sends the client
        # nonce twice); the proof covers the message as sent either way.
        if not attrs[1][1].endswith(self._nonce):
            raise ScramError("nonce differs")
        proof = _unb64(attrs[-1][1], "proof")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, cred.digest)
        if len(proof) != len(signature):
            raise ScramError("invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(cred.digest, client_key).digest(), cred.stored_key):
            raise ScramError("invalid user credentials")
        self.user = self._claimed
        server_signature = hmac.digest(cred.server_key, auth_message, cred.digest)
        return f"v={_b64(server_signature)}".encode("ascii")
