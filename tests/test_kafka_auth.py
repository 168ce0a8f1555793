"""Authenticated Kafka (issue 11): TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) on the
listener, users from the auth config file that `walfs kafka-user` writes, each mapped to an
org: a tenant sees and writes only its own topics and groups. Real clients (kcat,
confluent-kafka) against `walfs serve`, a certificate made by `openssl` for each run."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_harness import (
    REPO,
    SMALL_WAL,
    SMALL_WAL_ARGS,
    ServeProcess,
    add_user,
    encode_request,
    is_closed,
    recv_frame,
    walfs_cli,
)

import walfs
from walfs.kafka.scram import ScramServer, make_credential

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ORGS = {"alice": 2, "bob": 3, "carol": 2}  # carol shares alice's org


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return d / "cert.pem", d / "key.pem"


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """alice, bob and carol, as `walfs kafka-user add` writes them (made once: each
    costs a process and two PBKDF2 runs)."""
    path = tmp_path_factory.mktemp("users") / "auth.json"
    for name in ("alice", "bob", "carol"):
        add_user(path, name, ORGS[name], PASSWORDS[name])
    return dict(json.loads(path.read_text())["users"])


def make_config(
    path: Path,
    users: dict[str, Any],
    cert: tuple[Path, Path] | None,
    protocol: str,
    mechanisms: list[str],
    **extra: Any,
) -> Path:
    data: dict[str, Any] = {"security_protocol": protocol, "sasl_mechanisms": mechanisms, **extra}
    if cert is not None:
        data["ssl_certfile"], data["ssl_keyfile"] = str(cert[0]), str(cert[1])
    data["users"] = users
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def sasl_ssl(
    tmp_path: Path, cert: tuple[Path, Path], users: dict[str, Any]
) -> Iterator[tuple[ServeProcess, Path]]:
    cfg = make_config(
        tmp_path / "auth.json", users, cert, "SASL_SSL", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
    )
    srv = ServeProcess(tmp_path / "data", *SMALL_WAL_ARGS, "--auth-config", str(cfg), "--allow-delete")
    try:
        yield srv, tmp_path / "data"
    finally:
        srv.stop()


def kcat_args(
    srv: ServeProcess,
    cert: tuple[Path, Path],
    user: str,
    mechanism: str = "SCRAM-SHA-256",
    password: str | None = None,
) -> list[str]:
    return [
        "kcat",
        "-b",
        srv.bootstrap,
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        f"ssl.ca.location={cert[0]}",
        "-X",
        f"sasl.mechanisms={mechanism}",
        "-X",
        f"sasl.username={user}",
        "-X",
        f"sasl.password={PASSWORDS[user] if password is None else password}",
    ]


def kcat(args: list[str], *more: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*args, *more], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def kcat_produce(args: list[str], topic: str, lines: list[str]) -> None:
    r = kcat(args, "-P", "-t", topic, stdin="".join(x + "\n" for x in lines))
    assert r.returncode == 0, r.stderr


def kcat_consume(args: list[str], topic: str) -> list[str]:
    r = kcat(args, "-C", "-t", topic, "-e", "-q")
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def kcat_topics(args: list[str]) -> list[str]:
    r = kcat(args, "-L", "-J")
    assert r.returncode == 0, r.stderr
    return sorted(t["topic"] for t in json.loads(r.stdout)["topics"])


def confluent_conf(
    srv: ServeProcess,
    cert: tuple[Path, Path],
    user: str,
    mechanism: str = "SCRAM-SHA-512",
    password: str | None = None,
) -> dict[str, Any]:
    return {
        "bootstrap.servers": srv.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(cert[0]),
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user] if password is None else password,
    }


def stored(data: Path, org: int) -> dict[str, list[bytes]]:
    """Every topic of an org and its records, read from the data directory itself."""
    with walfs.Wal(str(data), org_id=org, read_only=True, **SMALL_WAL) as w:
        return {t: w.read(t, 0, max_records=10_000) for t in w.topics()}


# -- SCRAM itself ---------------------------------------------------------------------


def test_scram_sha256_matches_rfc7677_example() -> None:
    # RFC 7677 section 3: user "user", password "pencil", salt and nonces as given there.
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    srv = ScramServer(
        "SCRAM-SHA-256",
        lambda name: cred if name == "user" else None,
        server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    first = srv.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = srv.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert srv.user == "user"


def test_config_file_holds_no_password_and_is_private(tmp_path: Path) -> None:
    cfg = tmp_path / "auth.json"
    add_user(cfg, "dave", 7, "a-long-password")
    text = cfg.read_text()
    assert "a-long-password" not in text
    assert os.stat(cfg).st_mode & 0o077 == 0
    user = json.loads(text)["users"]["dave"]
    assert user["org_id"] == 7 and sorted(user["scram"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    listed = walfs_cli("kafka-user", "list", "--config", str(cfg)).stdout
    assert listed.split("\t")[:2] == ["dave", "org 7"]
    walfs_cli("kafka-user", "remove", "dave", "--config", str(cfg))
    assert json.loads(cfg.read_text())["users"] == {}
    # A password written into the file by hand is refused at start.
    cfg.write_text(
        json.dumps({"security_protocol": "SASL_PLAINTEXT", "users": {"eve": {"org_id": 1, "password": "x"}}})
    )
    r = walfs_cli(
        "serve", str(tmp_path / "d"), "--kafka-listen", "127.0.0.1:0", "--auth-config", str(cfg), check=False
    )
    assert r.returncode == 2 and "plaintext passwords are not accepted" in r.stderr


# -- real clients over SASL_SSL ---------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_kcat_produces_and_consumes_over_tls(
    sasl_ssl: tuple[ServeProcess, Path], cert: tuple[Path, Path], mechanism: str
) -> None:
    srv, data = sasl_ssl
    args = kcat_args(srv, cert, "alice", mechanism)
    kcat_produce(args, "events", ["one", "two", "three"])
    assert kcat_consume(args, "events") == ["one", "two", "three"]
    assert kcat_topics(args) == ["events"]
    srv.stop()
    assert stored(data, 2) == {"events": [b"one", b"two", b"three"]}
    assert stored(data, 1) == {}  # nothing landed in the listener's default org


def test_kcat_moves_records_above_64_kib_over_tls(
    sasl_ssl: tuple[ServeProcess, Path], cert: tuple[Path, Path]
) -> None:
    # Produce frames and fetch answers this large take the listener's copy-free paths
    # (framing.py); over TLS they go through the TLS stream piece by piece instead.
    srv, _data = sasl_ssl
    args = kcat_args(srv, cert, "alice")
    lines = [f"{i:06d}" * 20_000 for i in range(30)]  # 120 KB each, ~3.6 MB in all
    kcat_produce(args, "large", lines)
    assert kcat_consume(args, "large") == lines


def test_confluent_kafka_scram_produce_consume_commit(
    sasl_ssl: tuple[ServeProcess, Path], cert: tuple[Path, Path]
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    srv, data = sasl_ssl
    p = Producer({**confluent_conf(srv, cert, "alice"), "acks": "all", "linger.ms": 0})
    for i in range(20):
        p.produce("orders", f"o{i}".encode(), key=f"k{i}".encode())
    assert p.flush(30) == 0
    c = Consumer(
        {
            **confluent_conf(srv, cert, "alice", "SCRAM-SHA-256"),
            "group.id": "billing",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe(["orders"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert got == [f"o{i}".encode() for i in range(20)]
        c.commit(asynchronous=False)
        assert c.committed([TopicPartition("orders", 0)], timeout=30)[0].offset == 20
    finally:
        c.close()
    srv.stop()
    with walfs.Wal(str(data), org_id=2, read_only=True, **SMALL_WAL) as w:
        assert w.committed("billing", "orders") == 20
        assert w.groups() == ["billing"]
    with walfs.Wal(str(data), org_id=1, read_only=True, **SMALL_WAL) as w:
        assert w.groups() == []


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_wrong_password_and_unknown_user_are_refused(
    sasl_ssl: tuple[ServeProcess, Path], cert: tuple[Path, Path], mechanism: str
) -> None:
    srv, data = sasl_ssl
    for args in (
        kcat_args(srv, cert, "alice", mechanism, password="wrong"),
        kcat_args(srv, cert, "alice", mechanism, password=PASSWORDS["bob"]),
        [
            *kcat_args(srv, cert, "alice", mechanism)[:-2],
            "-X",
            "sasl.username=mallory",
            "-X",
            "sasl.password=alice-secret",
        ],
    ):
        r = kcat(args, "-P", "-t", "intruded", "-m", "5", stdin="x\n")
        assert r.returncode != 0
        assert "Authentication failed" in r.stderr
    # The right password still works, and nothing was written by the refused attempts.
    assert kcat_topics(kcat_args(srv, cert, "alice", mechanism)) == []
    code, err = srv.stop()
    assert "authentication failed" in err
    assert all(stored(data, org) == {} for org in (1, 2, 3))


def test_confluent_kafka_wrong_password_gets_an_authentication_error(
    sasl_ssl: tuple[ServeProcess, Path], cert: tuple[Path, Path]
) -> None:
    from confluent_kafka import KafkaError, Producer

    srv, _data = sasl_ssl
    errors: list[Any] = []
    p = Producer(
        {
            **confluent_conf(srv, cert, "bob", password="nope"),
            "error_cb": errors.append,
            "message.timeout.ms": 5000,
        }
    )
    p.produce("t", b"x")
    p.flush(10)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_a_tenant_cannot_list_read_write_or_delete_another_orgs_topics_and_groups(
    sasl_ssl: tuple[ServeProcess, Path], cert: tuple[Path, Path]
) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    srv, data = sasl_ssl
    alice = kcat_args(srv, cert, "alice")
    bob = kcat_args(srv, cert, "bob", "SCRAM-SHA-512")
    kcat_produce(alice, "payroll", ["salary 1", "salary 2"])
    # alice's group commits on her topic.
    c = Consumer({**confluent_conf(srv, cert, "alice"), "group.id": "hr", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("payroll", 0, 2)], asynchronous=False)
    c.close()

    # bob does not see it listed, and asking for it by name does not reach it.
    assert kcat_topics(bob) == []
    admin = AdminClient(confluent_conf(srv, cert, "bob"))
    assert "payroll" not in admin.list_topics(timeout=30).topics
    r = kcat(bob, "-C", "-t", "payroll", "-e", "-q")
    assert r.stdout == ""
    # Deleting it by name fails for bob (his org has no such topic) ...
    fut = admin.delete_topics(["payroll"], operation_timeout=10)["payroll"]
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART"):
        fut.result(timeout=30)
    # ... alice's group offsets are not his ...
    cb = Consumer({**confluent_conf(srv, cert, "bob"), "group.id": "hr", "enable.auto.commit": False})
    try:
        kcat_produce(bob, "payroll", ["bob's own"])  # his own topic of that name
        assert cb.committed([TopicPartition("payroll", 0)], timeout=30)[0].offset < 0  # none committed
        cb.commit(offsets=[TopicPartition("payroll", 0, 1)], asynchronous=False)
    finally:
        cb.close()
    # ... and what he wrote is his: alice still reads exactly her records and her cursor.
    assert kcat_consume(alice, "payroll") == ["salary 1", "salary 2"]
    assert kcat_consume(bob, "payroll") == ["bob's own"]
    # carol, in alice's org, sees alice's topic and group.
    carol = kcat_args(srv, cert, "carol", "PLAIN")
    assert kcat_consume(carol, "payroll") == ["salary 1", "salary 2"]
    srv.stop()
    with walfs.Wal(str(data), org_id=2, read_only=True, **SMALL_WAL) as w:
        assert w.read("payroll", 0) == [b"salary 1", b"salary 2"]
        assert w.committed("hr", "payroll") == 2
        assert w.groups() == ["hr"]
    with walfs.Wal(str(data), org_id=3, read_only=True, **SMALL_WAL) as w:
        assert w.read("payroll", 0) == [b"bob's own"]
        assert w.committed("hr", "payroll") == 1
        assert w.groups() == ["hr"]


def test_users_added_while_serving_can_authenticate(
    sasl_ssl: tuple[ServeProcess, Path], cert: tuple[Path, Path], tmp_path: Path
) -> None:
    srv, data = sasl_ssl
    PASSWORDS["zed"] = "zed-secret"
    try:
        args = kcat_args(srv, cert, "zed")
        assert kcat(args, "-L").returncode != 0
        add_user(tmp_path / "auth.json", "zed", 9, "zed-secret")
        kcat_produce(args, "late", ["hi"])
        # A broken edit keeps the users the listener had; removing a user locks it out.
        cfg = tmp_path / "auth.json"
        good = cfg.read_text()
        cfg.write_text(good[: len(good) // 2])
        kcat_produce(args, "late", ["again"])
        cfg.write_text(good)
        walfs_cli("kafka-user", "remove", "zed", "--config", str(cfg))
        r = kcat(args, "-L")
        assert r.returncode != 0 and "Authentication failed" in r.stderr
    finally:
        del PASSWORDS["zed"]
    code, err = srv.stop()
    assert "keeping the previous users" in err
    assert stored(data, 9) == {"late": [b"hi", b"again"]}


# -- the protocol as Kafka speaks it -------------------------------------------------------


def _sasl_handshake(mechanism: str, version: int = 1, correlation_id: int = 5) -> bytes:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    return encode_request(17, version, correlation_id, SaslHandshakeRequest(mechanism=mechanism))


def _sasl_authenticate(token: bytes, correlation_id: int = 6) -> bytes:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest

    return encode_request(36, 2, correlation_id, SaslAuthenticateRequest(auth_bytes=token))


def _metadata_request() -> bytes:
    from kio.schema.metadata.v12.request import MetadataRequest

    return encode_request(
        3,
        12,
        9,
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )


def _decode(api_key: int, version: int, frame: bytes) -> Any:
    from kio.index import load_payload_module
    from kio.serial import entity_reader
    from kio.static.constants import EntityType

    mod = load_payload_module(api_key, version, EntityType.response)
    cls = next(v for k, v in vars(mod).items() if k.endswith("Response") and isinstance(v, type))
    header_cls = cls.__header_schema__
    _header, used = entity_reader(header_cls)(frame, 0)
    return entity_reader(cls)(frame, used)[0]


@pytest.fixture
def sasl_plaintext(tmp_path: Path, users: dict[str, Any]) -> Iterator[ServeProcess]:
    cfg = make_config(
        tmp_path / "auth.json",
        users,
        None,
        "SASL_PLAINTEXT",
        ["SCRAM-SHA-256", "PLAIN"],
        authentication_timeout_ms=1500,
    )
    srv = ServeProcess(tmp_path / "data", *SMALL_WAL_ARGS, "--auth-config", str(cfg))
    try:
        yield srv
    finally:
        srv.stop()


def _connect(srv: ServeProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    return s


def test_requests_before_authentication_close_the_connection(sasl_plaintext: ServeProcess) -> None:
    from walfs.kafka.messages import ErrorCode

    srv = sasl_plaintext
    # Metadata first: closed without an answer.
    with _connect(srv) as s:
        s.sendall(_metadata_request())
        assert is_closed(s)
    # SaslAuthenticate before SaslHandshake: closed too.
    with _connect(srv) as s:
        s.sendall(_sasl_authenticate(b"\0alice\0alice-secret"))
        assert is_closed(s)
    # After a handshake, anything but SaslAuthenticate: closed.
    with _connect(srv) as s:
        s.sendall(_sasl_handshake("PLAIN"))
        assert _decode(17, 1, recv_frame(s)).error_code == ErrorCode.none
        s.sendall(_metadata_request())
        assert is_closed(s)
    # A mechanism that is not enabled: UNSUPPORTED_SASL_MECHANISM with the enabled ones, closed.
    with _connect(srv) as s:
        s.sendall(_sasl_handshake("SCRAM-SHA-512"))
        resp = _decode(17, 1, recv_frame(s))
        assert resp.error_code == ErrorCode.unsupported_sasl_mechanism
        assert resp.mechanisms == ("SCRAM-SHA-256", "PLAIN")
        assert is_closed(s)
    # PLAIN with the right password, then Metadata works; a second handshake is
    # ILLEGAL_SASL_STATE, as Kafka answers it.
    with _connect(srv) as s:
        s.sendall(_sasl_handshake("PLAIN"))
        recv_frame(s)
        s.sendall(_sasl_authenticate(b"\0alice\0alice-secret"))
        assert _decode(36, 2, recv_frame(s)).error_code == ErrorCode.none
        s.sendall(_metadata_request())
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 9
        s.sendall(_sasl_handshake("PLAIN"))
        assert _decode(17, 1, recv_frame(s)).error_code == ErrorCode.illegal_sasl_state
    # A wrong PLAIN password: SASL_AUTHENTICATION_FAILED, then closed.
    with _connect(srv) as s:
        s.sendall(_sasl_handshake("PLAIN"))
        recv_frame(s)
        s.sendall(_sasl_authenticate(b"\0alice\0bob-secret"))
        resp = _decode(36, 2, recv_frame(s))
        assert resp.error_code == ErrorCode.sasl_authentication_failed
        assert "invalid credentials" in resp.error_message
        assert is_closed(s)
    # A connection that never authenticates is closed at authentication_timeout_ms.
    with _connect(srv) as s:
        assert is_closed(s)
    _code, err = srv.stop()
    assert "before SASL authentication" in err and "not done in time" in err


def test_sasl_handshake_v0_raw_tokens(sasl_plaintext: ServeProcess) -> None:
    # v0: after the handshake, bare size-prefixed tokens (Kafka's pre-KIP-152 framing).
    srv = sasl_plaintext
    with _connect(srv) as s:
        s.sendall(_sasl_handshake("PLAIN", version=0))
        recv_frame(s)
        token = b"\0bob\0bob-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert recv_frame(s) == b""
        s.sendall(_metadata_request())
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 9
    with _connect(srv) as s:
        s.sendall(_sasl_handshake("PLAIN", version=0))
        recv_frame(s)
        token = b"\0bob\0wrong"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert is_closed(s)


def test_sasl_requests_on_a_plaintext_listener_get_illegal_sasl_state(tmp_path: Path) -> None:
    from walfs.kafka.messages import ErrorCode

    srv = ServeProcess(tmp_path / "d", *SMALL_WAL_ARGS)
    try:
        with _connect(srv) as s:
            s.sendall(_sasl_handshake("PLAIN"))
            assert _decode(17, 1, recv_frame(s)).error_code == ErrorCode.illegal_sasl_state
            s.sendall(_sasl_authenticate(b"\0alice\0x"))
            assert _decode(36, 2, recv_frame(s)).error_code == ErrorCode.illegal_sasl_state
    finally:
        srv.stop()


def test_tls_handshake_not_finished_is_closed_and_plaintext_on_tls_refused(
    tmp_path: Path, cert: tuple[Path, Path], users: dict[str, Any]
) -> None:
    cfg = make_config(
        tmp_path / "auth.json", users, cert, "SSL", ["SCRAM-SHA-256"], authentication_timeout_ms=1500
    )
    srv = ServeProcess(tmp_path / "data", *SMALL_WAL_ARGS, "--auth-config", str(cfg))
    try:
        # A Kafka request in clear text to a TLS listener: no answer, connection closed.
        with _connect(srv) as s:
            s.sendall(_metadata_request())
            assert is_closed(s)
        # SSL without SASL: after the TLS handshake, the default org is served.
        ctx = ssl.create_default_context(cafile=str(cert[0]))
        with ctx.wrap_socket(_connect(srv), server_hostname="localhost") as s:
            s.sendall(_metadata_request())
            assert struct.unpack(">i", recv_frame(s)[:4])[0] == 9
        # A client that never starts TLS is closed at the timeout.
        with _connect(srv) as s:
            assert is_closed(s)
    finally:
        srv.stop()


# -- where a listener may bind -------------------------------------------------------------


def _serve(data: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "walfs.cli.serve", str(data), *SMALL_WAL_ARGS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def test_non_loopback_needs_sasl_or_insecure_listen(
    tmp_path: Path, cert: tuple[Path, Path], users: dict[str, Any]
) -> None:
    refused = _serve(tmp_path / "a", "--kafka-listen", "0.0.0.0:0")
    _out, err = refused.communicate(timeout=60)
    assert refused.returncode == 2 and "refusing to listen on 0.0.0.0 with PLAINTEXT" in err
    tls_only = make_config(tmp_path / "ssl.json", users, cert, "SSL", ["SCRAM-SHA-256"])
    refused = _serve(tmp_path / "a", "--kafka-listen", "0.0.0.0:0", "--auth-config", str(tls_only))
    _out, err = refused.communicate(timeout=60)
    assert refused.returncode == 2 and "refusing to listen on 0.0.0.0 with SSL" in err
    sasl = make_config(tmp_path / "sasl.json", users, cert, "SASL_SSL", ["SCRAM-SHA-256"])
    for args in (["--insecure-listen"], ["--auth-config", str(sasl)]):
        proc = _serve(tmp_path / "a", "--kafka-listen", "0.0.0.0:0", *args)
        try:
            assert proc.stdout is not None
            assert "kafka listening on 0.0.0.0:" in proc.stdout.readline()
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
        assert proc.returncode == 0
