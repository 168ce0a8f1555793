"""Orgs (tenants) on one data directory (issue 11): a mount shows its own org's topics and
consumer groups only, and Kafka tenants authenticated on the mount's listener write to
their own orgs, which never show in the mount's tree."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest_mount import REPO, Mount, cli, wait_until
from kafka_harness import add_user

import walfs

pytest_plugins = ["conftest_mount"]

SMALL = {"segment_size": 16 << 20, "block_size": 1 << 20}


def test_consumers_lists_only_the_mounts_own_groups(make_mount: Callable[[], Mount]) -> None:
    m = make_mount()
    with walfs.Wal(str(m.data), org_id=2, **SMALL) as other:
        other.append("t", b"theirs")
        other.commit("their-group", "t", 1)
        other.engine.create_group("their-empty-group")
    with walfs.Wal(str(m.data), org_id=1, **SMALL) as own:
        own.append("mine", b"a")
        own.engine.create_group("own-group")
    m.start()
    try:
        assert m.out("ls .consumers").split() == ["own-group"]
        assert m.out("ls").split() == ["mine", "partition=0"]
        # Another org's group name is free in this org.
        m.sh("mkdir .consumers/their-group")
        assert m.out("ls .consumers").split() == ["own-group", "their-group"]
        assert m.sh("cat .consumers/their-empty-group/mine", check=False).returncode != 0
    finally:
        m.stop()
    with walfs.Wal(str(m.data), org_id=2, read_only=True, **SMALL) as other:
        assert other.groups() == ["their-empty-group", "their-group"]
        assert other.committed("their-group", "t") == 1
    with walfs.Wal(str(m.data), org_id=1, read_only=True, **SMALL) as own:
        assert own.groups() == ["own-group", "their-group"]
        assert own.committed("their-group", "mine") is None


def test_salvage_keeps_the_org_of_empty_groups(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    with walfs.Wal(str(src), org_id=2, **SMALL) as w:
        w.append("t", b"x")
        w.engine.create_group("g2")
    r = subprocess.run(
        [sys.executable, "-m", "walfs", "fsck", str(src), "--repair", "--into", str(dst)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert r.returncode == 0 and "everything kept" in r.stdout, r.stdout + r.stderr
    for org, groups in ((2, ["g2"]), (1, [])):
        with walfs.Wal(str(dst), org_id=org, read_only=True, **SMALL) as w:
            assert w.groups() == groups


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kcat(port: int, user: str, password: str, *args: str, stdin: str | None = None) -> str:
    r = subprocess.run(
        [
            "kcat",
            "-b",
            f"127.0.0.1:{port}",
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanisms=SCRAM-SHA-256",
            "-X",
            f"sasl.username={user}",
            "-X",
            f"sasl.password={password}",
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_tenants_on_the_mounts_listener_stay_out_of_its_tree(
    make_mount: Callable[[], Mount], tmp_path: Path
) -> None:
    cfg = tmp_path / "auth.json"
    cfg.write_text('{"security_protocol": "SASL_PLAINTEXT"}')
    add_user(cfg, "local", 1, "local-pw")  # the mount's own org
    add_user(cfg, "tenant", 5, "tenant-pw")
    m = make_mount()
    port = _free_port()
    m.start("--kafka-listen", f"127.0.0.1:{port}", "--kafka-auth-config", str(cfg))
    try:
        m.sh("echo from-the-mount >> shared")
        _kcat(port, "tenant", "tenant-pw", "-P", "-t", "shared", stdin="from-the-tenant\n")
        _kcat(port, "tenant", "tenant-pw", "-P", "-t", "tenant-only", stdin="t\n")
        _kcat(port, "local", "local-pw", "-P", "-t", "shared", stdin="from-kafka\n")
        wait_until(lambda: m.out("cat shared") == "from-the-mount\nfrom-kafka\n", 30, "the local produce")
        # The tenant's topics are in its org only: not in the tree, not in its listing.
        assert m.out("ls").split() == ["partition=0", "shared"]
        assert m.sh("cat tenant-only", check=False).returncode != 0
        assert _kcat(port, "tenant", "tenant-pw", "-C", "-t", "shared", "-e", "-q") == "from-the-tenant\n"
    finally:
        m.stop()
    with walfs.Wal(str(m.data), org_id=5, read_only=True, **SMALL) as w:
        assert w.topics() == ["shared", "tenant-only"]


def test_mount_refuses_a_bad_auth_config_or_an_open_address(
    make_mount: Callable[[], Mount], tmp_path: Path
) -> None:
    m = make_mount()
    bad = tmp_path / "bad.json"
    bad.write_text('{"security_protocol": "SASL_SSL"}')  # no certificate
    r = cli(
        "mount",
        str(m.data),
        str(m.path),
        "--kafka-listen",
        "127.0.0.1:0",
        "--kafka-auth-config",
        str(bad),
        check=False,
    )
    assert r.returncode != 0 and "needs ssl_certfile and ssl_keyfile" in r.stderr
    r = cli("mount", str(m.data), str(m.path), "--kafka-listen", "0.0.0.0:0", check=False)
    assert r.returncode != 0 and "refusing to listen on 0.0.0.0" in r.stderr
