"""Real Apache Kafka 4.1.1 beside walfs: the class path `make kafka` resolves, a single-node
KRaft broker (broker and controller in one JVM) on free loopback ports in a temporary
directory, and a runner for Kafka's own command-line and perf tools by class name.

Used by the tests that compare walfs with Kafka and by bench/ (import it with tests/ on
sys.path). Nothing is skipped when Kafka is missing: `classpath()` raises with the command
that fetches it, so a machine without the jars fails loudly.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLASSPATH_FILE = REPO / "kafka" / "classpath.txt"


def classpath() -> str:
    """The jars of Kafka 4.1.1 (broker, tools, slf4j-simple), fetched by `make kafka`."""
    if not CLASSPATH_FILE.exists():
        subprocess.run(["make", "-C", str(REPO), "--no-print-directory", "kafka"], check=True, timeout=900)
    cp = CLASSPATH_FILE.read_text().strip()
    missing = [j for j in cp.split(":") if j and not os.path.exists(j)]
    if not cp or missing:
        raise RuntimeError(f"Kafka's jars are missing ({missing[:2]}...): run `make kafka`")
    return cp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} answered")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing answered on 127.0.0.1:{port} within {timeout:.0f} s")


def run_tool(
    main_class: str, *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """One of Kafka's tools by class name (e.g. org.apache.kafka.tools.TopicCommand)."""
    cmd = [
        "java",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        classpath(),
        main_class,
        *args,
    ]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and cp.returncode != 0:
        raise RuntimeError(f"{main_class} {' '.join(args)} exited {cp.returncode}:\n{cp.stdout}\n{cp.stderr}")
    return cp


def cluster_id() -> str:
    """A KRaft cluster id: a random UUID in Kafka's URL-safe base64, 22 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class KafkaBroker:
    """A single KRaft node on free ports; `with KafkaBroker() as k: k.bootstrap`.

    `extra` adds server.properties lines (e.g. {"log.flush.interval.messages": "1"}).
    """

    def __init__(
        self, extra: dict[str, str] | None = None, heap: str = "512m", startup_timeout: float = 90
    ) -> None:
        self.extra = extra or {}
        self.heap = heap
        self.startup_timeout = startup_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="walfs-kafka-"))
        self.port = free_port()
        self.controller_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.dir / "logs"),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "1",
            **self.extra,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self) -> KafkaBroker:
        cp = classpath()
        conf = self.dir / "server.properties"
        conf.write_text(self._properties())
        subprocess.run(
            ["java", "-cp", cp, "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(conf)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        log = open(self.dir / "broker.log", "wb")  # noqa: SIM115 (lives as long as the broker)
        self.proc = subprocess.Popen(
            ["java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-cp", cp, "kafka.Kafka", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for_port(self.port, self.startup_timeout, self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
