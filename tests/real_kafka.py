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


def wait_for_port(
    port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None, host: str = "127.0.0.1"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} answered")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing answered on {host}:{port} within {timeout:.0f} s")


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
    """A KRaft cluster id: a random UUID in Kafka's URL-safe base64, 22 characters (not
    starting with "-", which the storage tool would take for an option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class KafkaCluster:
    """`nodes` KRaft nodes (broker and controller in each JVM) on free ports, one cluster id.

    `extra` adds server.properties lines (e.g. {"log.flush.interval.messages": "1"}). With
    three nodes the internal topics and new topics get replication factor 3 and
    min.insync.replicas=2, as a production cluster would. Nodes can be killed and
    restarted by index (`kill(i)`, `restart(i)`) to test failover. `host` is the address
    the brokers listen on and advertise to clients (loopback by default; another local
    address for clients in other network namespaces); the controllers stay on loopback.
    `controllers` nodes (all by default) are KRaft controllers as well as brokers; the others
    are brokers only (a cluster of many brokers keeps a small quorum). `heap` is each node's.
    """

    def __init__(
        self,
        nodes: int = 3,
        extra: dict[str, str] | None = None,
        heap: str = "512m",
        startup_timeout: float = 120,
        directory: Path | None = None,
        base_port: int | None = None,
        host: str = "127.0.0.1",
        controllers: int | None = None,
    ) -> None:
        self.n = nodes
        self.controllers = nodes if controllers is None else max(1, min(nodes, controllers))
        self.host = host
        self.extra = extra or {}
        self.heap = heap
        self.startup_timeout = startup_timeout
        # A given directory and base port make a cluster that outlives this process
        # (tools/kafka_cluster.py); the defaults make a throw-away one for a test.
        self.dir = directory if directory is not None else Path(tempfile.mkdtemp(prefix="walfs-kafka-"))
        if base_port is not None:
            self.ports = [base_port + i for i in range(nodes)]
            self.controller_ports = [base_port + 100 + i for i in range(nodes)]
        else:
            self.ports = [free_port() for _ in range(nodes)]
            self.controller_ports = [free_port() for _ in range(nodes)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * nodes
        self.id = cluster_id()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{p}" for p in self.ports)

    def _properties(self, i: int) -> str:
        rf = str(min(3, self.n))
        isr = str(2 if self.n >= 3 else 1)
        voters = ",".join(
            f"{k + 1}@127.0.0.1:{p}" for k, p in enumerate(self.controller_ports[: self.controllers])
        )
        port, cport = self.ports[i], self.controller_ports[i]
        controller = i < self.controllers
        props = {
            "process.roles": "broker,controller" if controller else "broker",
            "node.id": str(i + 1),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{port}"
            + (f",CONTROLLER://127.0.0.1:{cport}" if controller else ""),
            "advertised.listeners": f"PLAINTEXT://{self.host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.dir / f"node{i + 1}"),
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "1",
            **self.extra,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _conf(self, i: int) -> Path:
        return self.dir / f"server{i + 1}.properties"

    def start(self) -> KafkaCluster:
        cp = classpath()
        formats = []
        for i in range(self.n):  # the nodes' log dirs are formatted in parallel
            self._conf(i).write_text(self._properties(i))
            cmd = ["java", "-cp", cp, "kafka.tools.StorageTool", "format", "-t", self.id]
            formats.append(
                subprocess.Popen(
                    [*cmd, "-c", str(self._conf(i))], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                )
            )
        for f in formats:
            out, _ = f.communicate(timeout=300)
            if f.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed: {out.decode(errors='replace')}")
        try:
            for i in range(self.n):
                self._spawn(i)
            for i in range(self.n):
                wait_for_port(self.ports[i], self.startup_timeout, self.procs[i], self.host)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, i: int) -> None:
        heap = self.heap
        log = open(self.dir / f"node{i + 1}.log", "ab")  # noqa: SIM115 (lives as long as the node)
        self.procs[i] = subprocess.Popen(
            [
                "java",
                f"-Xmx{heap}",
                "-XX:+UseSerialGC",
                "-cp",
                classpath(),
                "kafka.Kafka",
                str(self._conf(i)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def pid(self, i: int = 0) -> int:
        proc = self.procs[i]
        assert proc is not None
        return proc.pid

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Kills node i (SIGKILL by default: a lost machine, no clean shutdown)."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=60)

    def restart(self, i: int) -> None:
        self.kill(i)
        self._spawn(i)
        wait_for_port(self.ports[i], self.startup_timeout, self.procs[i], self.host)

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            if proc is None:
                continue
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_SHARED: list[KafkaCluster] = []


def shared_broker() -> KafkaCluster:
    """One single-node broker for the whole test run, started on first use and stopped at
    exit (the conformance suite and the mount tests on the Kafka engine share it)."""
    if not _SHARED:
        import atexit

        _SHARED.append(KafkaBroker().start())
        atexit.register(_SHARED[0].stop)
    return _SHARED[0]


def fresh_target(regions: int = 2) -> str:
    """A new, empty walfs namespace on the shared broker."""
    return f"kafka://{shared_broker().bootstrap}/t{uuid.uuid4().hex[:12]}?regions={regions}"


class KafkaBroker(KafkaCluster):
    """A single KRaft node on free ports; `with KafkaBroker() as k: k.bootstrap`."""

    def __init__(
        self,
        extra: dict[str, str] | None = None,
        heap: str = "512m",
        startup_timeout: float = 90,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(1, extra, heap, startup_timeout, host=host)

    @property
    def port(self) -> int:
        return self.ports[0]

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.procs[0]
