"""Two walfs mounts in two network namespaces over one Kafka cluster (issue 16): two
"hosts" on this machine. Each namespace gets a veth pair to the host; the broker listens on
the host-side address of the first pair only (not on loopback), and each namespace routes
to it through its own pair. Each mount daemon runs in its namespace (`nsenter --net`, so
its FUSE mount stays visible here) and the shell writers run there too; both mounts show
every line of both, in one order, and a consumer group committed on one is where the
other continues. Needs root (network namespaces), as the FUSE tests do."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_mount import Mount, is_mounted, wait_until
from real_kafka import KafkaBroker

PYTHON = sys.executable
REPO = Path(__file__).resolve().parent.parent


def ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")


class Host:
    """A network namespace joined to this machine by a veth pair: 10.N.K.2 inside, 10.N.K.1
    on the host side, and a default route to the host."""

    def __init__(self, tag: str, net: int, k: int) -> None:
        self.ns = f"wf{tag}{k}"
        self.veth = f"wf{tag}{k}h"
        self.inner = f"wf{tag}{k}n"
        self.host_addr = f"10.{net}.{k}.1"
        self.addr = f"10.{net}.{k}.2"

    def create(self) -> None:
        ip("netns", "add", self.ns)
        ip("link", "add", self.veth, "type", "veth", "peer", "name", self.inner)
        ip("link", "set", self.inner, "netns", self.ns)
        ip("addr", "add", f"{self.host_addr}/24", "dev", self.veth)
        ip("link", "set", self.veth, "up")
        ip("-n", self.ns, "addr", "add", f"{self.addr}/24", "dev", self.inner)
        ip("-n", self.ns, "link", "set", self.inner, "up")
        ip("-n", self.ns, "link", "set", "lo", "up")
        ip("-n", self.ns, "route", "add", "default", "via", self.host_addr)

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)

    def run(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nsenter", f"--net=/run/netns/{self.ns}", *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(REPO),
        )

    def sh(self, script: str, cwd: Path) -> str:
        res = self.run("sh", "-ec", f"cd {cwd}; {script}")
        assert res.returncode == 0, f"{self.ns}: {script!r} failed: {res.stderr}"
        return res.stdout

    def net_inode(self) -> int:
        return os.stat(f"/run/netns/{self.ns}").st_ino


class NetnsMount(Mount):
    """A Mount whose daemon runs in a Host's network namespace."""

    def __init__(self, base: Path, host: Host, target: str) -> None:
        super().__init__(base, host.ns, target)
        self.host = host

    def start(self, *options: str) -> None:
        res = self.host.run(
            PYTHON, "-m", "walfs.cli.mount", str(self.data), str(self.path), "--log-file", str(self.log)
        )
        assert res.returncode == 0, f"mount in {self.host.ns} failed: {res.stderr}\n{self.read_log()}"
        assert is_mounted(self.path)
        self.pid = int(os.getxattr(self.path, "user.walfs.pid"))

    def out(self, script: str) -> str:
        return self.host.sh(script, self.path)


@pytest.fixture
def hosts() -> Iterator[tuple[Host, Host]]:
    tag = uuid.uuid4().hex[:4]
    net = 100 + int(tag, 16) % 100
    a, b = Host(tag, net, 1), Host(tag, net, 2)
    try:
        a.create()
        b.create()
        yield a, b
    finally:
        a.destroy()
        b.destroy()


def test_two_mounts_in_two_network_namespaces_see_each_other(
    hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    a_host, b_host = hosts
    # The broker listens on a's host-side address only: b reaches it through its own pair
    # and the host's routing, neither namespace through loopback.
    with KafkaBroker(host=a_host.host_addr) as broker:
        target = f"kafka://{broker.bootstrap}/nets{uuid.uuid4().hex[:8]}?regions=2"
        for h in hosts:  # the namespaces are real: loopback there has no broker
            probe = h.run(
                PYTHON, "-c", f"import socket; socket.create_connection(('127.0.0.1', {broker.port}), 3)"
            )
            assert probe.returncode != 0 and "refused" in probe.stderr.lower(), probe.stderr
        a, b = NetnsMount(tmp_path, a_host, target), NetnsMount(tmp_path, b_host, target)
        try:
            a.start()
            b.start()
            for m in (a, b):  # each daemon lives in its own network namespace
                assert os.stat(f"/proc/{m.pid}/ns/net").st_ino == m.host.net_inode()
            a.out("for i in $(seq 1 40); do echo a$i >> t; done")
            b.out("for i in $(seq 1 40); do echo b$i >> t; done")
            a.out("for i in $(seq 41 60); do echo a$i >> t; done")
            for m in (a, b):
                wait_until(lambda m=m: m.out("wc -l < t").strip() == "100", 60, f"{m.host.ns} at 100 lines")
            seen_a, seen_b = a.out("cat t").splitlines(), b.out("cat t").splitlines()
            assert seen_a == seen_b
            assert [x for x in seen_a if x.startswith("a")] == [f"a{i}" for i in range(1, 61)]
            assert [x for x in seen_a if x.startswith("b")] == [f"b{i}" for i in range(1, 41)]
            # A consumer group committed through b is where a continues.
            b.out(
                "mkdir -p .consumers/g && head -c $(( $(head -n 25 t | wc -c) )) .consumers/g/t > /dev/null"
            )
            wait_until(lambda: "g" in a.out("ls .consumers").split(), 60, "the group on mount a")
            cfile = a.path / ".consumers" / "g" / "t"
            wait_until(
                lambda: os.getxattr(cfile, "user.walfs.committed_offset") == b"25",
                60,
                "b's commit on mount a",
            )
            assert a.out("cat .consumers/g/t").splitlines() == seen_a[25:]
        finally:
            a.cleanup()
            b.cleanup()
