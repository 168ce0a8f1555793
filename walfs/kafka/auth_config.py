"""The Kafka listener's security settings: one JSON file (``--auth-config FILE``).

    {
      "security_protocol": "SASL_SSL",          # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
      "sasl_mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"],   # and/or "PLAIN"
      "ssl_certfile": "kafka.crt",              # PEM; relative paths are relative to this file
      "ssl_keyfile": "kafka.key",
      "authentication_timeout_ms": 30000,      # TLS + SASL must be done by then
      "users": {
        "alice": {"org_id": 2,
                  "scram": {"SCRAM-SHA-256": {"salt": "..", "iterations": 8192,
                                              "stored_key": "..", "server_key": ".."},
                            "SCRAM-SHA-512": {...}}}
      }
    }

Users hold SCRAM credentials only (salted, iterated; `walfs kafka-user add` writes them):
no password is ever stored. PLAIN, when enabled, is checked against the same
credentials. The users are re-read when the file changes, so that `walfs kafka-user add`
takes effect for new connections without a restart; the protocol and the TLS files are
read at start. A user maps to an org_id: the tenant whose topics and groups it sees.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
from dataclasses import dataclass
from typing import Any

from walfs.common.durable_file import write_durable
from walfs.kafka.scram import MECHANISMS as SCRAM_MECHANISMS
from walfs.kafka.scram import ScramCredential

log = logging.getLogger("walfs.kafka.auth")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
DEFAULT_MECHANISMS = tuple(SCRAM_MECHANISMS)
MAX_CONFIG_BYTES = 16 << 20
MAX_ORG_ID = 2**63 - 1
# How long a connection may take to finish TLS and SASL (it holds one of the listener's
# connection slots meanwhile).
DEFAULT_AUTH_TIMEOUT_MS = 30_000


class AuthConfigError(ValueError):
    """The auth config file is missing, unreadable or wrong (the message says where)."""


@dataclass(frozen=True)
class KafkaUser:
    name: str
    org_id: int
    scram: dict[str, ScramCredential]


def read_config(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise AuthConfigError(f"{path}: {e.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise AuthConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise AuthConfigError(f"{path}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise AuthConfigError(f"{path}: must hold a JSON object")
    return data


def _parse_users(path: str, data: dict[str, Any]) -> dict[str, KafkaUser]:
    users = data.get("users", {})
    if not isinstance(users, dict):
        raise AuthConfigError(f"{path}: users must be an object")
    out = {}
    for name, entry in users.items():
        where = f"{path}: user {name!r}"
        if not name or not isinstance(entry, dict):
            raise AuthConfigError(f"{where}: must be an object with org_id and scram")
        org = entry.get("org_id")
        if not isinstance(org, int) or isinstance(org, bool) or not 0 <= org <= MAX_ORG_ID:
            raise AuthConfigError(f"{where}: org_id must be an int in 0..{MAX_ORG_ID}")
        if "password" in entry:
            raise AuthConfigError(f"{where}: plaintext passwords are not accepted (walfs kafka-user add)")
        scram = entry.get("scram")
        if not isinstance(scram, dict) or not scram:
            raise AuthConfigError(f"{where}: needs scram credentials (walfs kafka-user add)")
        try:
            creds = {mech: ScramCredential.from_json(mech, c) for mech, c in scram.items()}
        except ValueError as e:
            raise AuthConfigError(f"{where}: {e}") from None
        out[name] = KafkaUser(name, org, creds)
    return out


class AuthConfig:
    """A loaded auth config file. ``user(name)`` re-reads the users when the file changed."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        data = read_config(self.path)
        proto = data.get("security_protocol", "SASL_SSL")
        if proto not in SECURITY_PROTOCOLS:
            raise AuthConfigError(f"{path}: security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        self.security_protocol: str = proto
        mechs = data.get("sasl_mechanisms", list(DEFAULT_MECHANISMS))
        if not isinstance(mechs, list) or not mechs or any(m not in SASL_MECHANISMS for m in mechs):
            raise AuthConfigError(f"{path}: sasl_mechanisms must list some of {', '.join(SASL_MECHANISMS)}")
        self.mechanisms: tuple[str, ...] = tuple(mechs)
        timeout = data.get("authentication_timeout_ms", DEFAULT_AUTH_TIMEOUT_MS)
        if not isinstance(timeout, int) or isinstance(timeout, bool) or not 0 < timeout <= 3_600_000:
            raise AuthConfigError(f"{path}: authentication_timeout_ms must be 1..3600000")
        self.auth_timeout_s = timeout / 1000
        base = os.path.dirname(self.path)
        self.certfile = self._file(data, "ssl_certfile", base)
        self.keyfile = self._file(data, "ssl_keyfile", base)
        if self.tls and not (self.certfile and self.keyfile):
            raise AuthConfigError(f"{path}: security_protocol {proto} needs ssl_certfile and ssl_keyfile")
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._users = _parse_users(self.path, data)
        if self.sasl and not self._users:
            log.warning("%s: no users yet: every SASL authentication fails (walfs kafka-user add)", path)

    @staticmethod
    def _file(data: dict[str, Any], key: str, base: str) -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise AuthConfigError(f"{key} must be a path")
        return os.path.join(base, value)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context (TLS 1.2 or later), or None on a listener without TLS."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.certfile or "", self.keyfile)
        except (OSError, ssl.SSLError) as e:
            raise AuthConfigError(f"{self.path}: cannot load {self.certfile} / {self.keyfile}: {e}") from None
        return ctx

    def _file_stamp(self) -> tuple[int, int, int]:
        try:
            st = os.stat(self.path)
        except OSError:
            return (0, 0, 0)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def user(self, name: str) -> KafkaUser | None:
        with self._lock:
            stamp = self._file_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._users = _parse_users(self.path, read_config(self.path))
                    log.info("%s changed: %d users", self.path, len(self._users))
                except AuthConfigError as e:
                    # A half-edited file must not lock everyone out: keep the last users.
                    log.error("%s: keeping the previous users: %s", self.path, e)
            return self._users.get(name)


def write_user(
    path: str, name: str, org_id: int, credentials: list[ScramCredential], *, remove: bool = False
) -> None:
    """Adds (or replaces, or with remove=True deletes) one user in the file, atomically,
    keeping everything else; a missing file is created (mode 0600: it holds credentials)."""
    if os.path.exists(path):
        data = read_config(path)
    else:
        data = {"security_protocol": "SASL_SSL", "sasl_mechanisms": list(DEFAULT_MECHANISMS)}
    users = data.setdefault("users", {})
    if not isinstance(users, dict):
        raise AuthConfigError(f"{path}: users must be an object")
    if remove:
        if name not in users:
            raise AuthConfigError(f"{path}: no user {name!r}")
        del users[name]
    else:
        if not 0 <= org_id <= MAX_ORG_ID:
            raise AuthConfigError(f"org_id must be in 0..{MAX_ORG_ID}")
        users[name] = {"org_id": org_id, "scram": {c.mechanism: c.to_json() for c in credentials}}
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_durable(path, text, tmp=f"{path}.tmp.{os.getpid()}", mode=0o600)
