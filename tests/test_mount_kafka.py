"""The mount and the Kafka listener in one daemon (`walfs mount --kafka-listen`), driven
with real tools: `echo >>` then `kcat -C`, a Kafka produce then `cat`, and a produce with
acks=-1 that survives a SIGKILL of the daemon."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable

from conftest_mount import Mount

pytest_plugins = ["conftest_mount"]


def free_port() -> int:
    # The mount daemon forks away, so it cannot report a port-0 binding; reserve one.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kcat(*args: str, stdin: str | None = None) -> str:
    res = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_echo_then_kcat_and_kcat_then_cat(make_mount: Callable[[], Mount]) -> None:
    m = make_mount()
    port = free_port()
    m.start("--kafka-listen", f"127.0.0.1:{port}")
    bootstrap = f"127.0.0.1:{port}"
    m.sh("echo 'order 1 paid' >> orders; echo 'order 2 open' >> orders")
    got = kcat("-b", bootstrap, "-C", "-t", "orders", "-e", "-Z", "-f", "%k|%s\n")
    assert got == "NULL|order 1 paid\nNULL|order 2 open\n"

    kcat("-b", bootstrap, "-P", "-t", "from-kafka", "-K", ":", stdin="k1:first\nk2:second\n")
    assert m.out("cat from-kafka") == "first\nsecond\n"
    assert "from-kafka" in m.out("ls").split()
    # The mount keeps appending to a topic Kafka made, and Kafka sees it.
    m.sh("echo third >> from-kafka")
    got = kcat("-b", bootstrap, "-C", "-t", "from-kafka", "-e", "-f", "%s\n")
    assert got == "first\nsecond\nthird\n"
    m.stop()


def test_partitions_and_mount_option_form(make_mount: Callable[[], Mount]) -> None:
    """-o kafka_listen=... (fstab, mount helper); a partition=<n> file is Kafka partition n."""
    m = make_mount()
    port = free_port()
    m.start("-o", f"kafka_listen=127.0.0.1:{port}")
    bootstrap = f"127.0.0.1:{port}"
    m.sh("mkdir partition=3; printf 'p3 a\\np3 b\\n' >> partition=3/t; echo p0 >> t")
    got = kcat("-b", bootstrap, "-C", "-t", "t", "-p", "3", "-e", "-f", "%p:%o:%s\n")
    assert got == "3:0:p3 a\n3:1:p3 b\n"
    kcat("-b", bootstrap, "-P", "-t", "t", "-p", "3", stdin="p3 c\n")
    assert m.out("cat partition=3/t") == "p3 a\np3 b\np3 c\n"
    assert m.out("cat t") == "p0\n"
    m.stop()
    # The listener went with the daemon: the port is free again.
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_acks_all_produce_survives_sigkill(make_mount: Callable[[], Mount]) -> None:
    from confluent_kafka import Producer

    m = make_mount()
    port = free_port()
    m.start("--kafka-listen", f"127.0.0.1:{port}", "--fsync", "never")
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "linger.ms": 0})
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(200):
        producer.produce("durable", value=f"rec {i}".encode(), key=b"k", on_delivery=delivered)
    assert producer.flush(30) == 0
    assert errors == []
    m.kill()  # every record was acknowledged after it was durable: nothing may be lost
    m.start()
    assert m.out("cat durable") == "".join(f"rec {i}\n" for i in range(200))
    m.stop()


def test_listen_address_in_use_fails_the_mount(make_mount: Callable[[], Mount]) -> None:
    from conftest_mount import cli, is_mounted

    m = make_mount()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = cli("mount", str(m.data), str(m.path), "--kafka-listen", f"127.0.0.1:{port}", check=False)
    assert res.returncode == 1
    said = f"walfs mount: --kafka-listen 127.0.0.1:{port}: cannot listen: Address already in use"
    assert said in res.stderr
    assert not is_mounted(m.path)
    bad = cli("mount", str(m.data), str(m.path), "--kafka-listen", "no-port", check=False)
    assert bad.returncode == 2 and "--kafka-listen: expected HOST:PORT" in bad.stderr
    assert not is_mounted(m.path)
