"""A real Apache Kafka broker (KRaft) on 127.0.0.1 for tests, the example pipeline and benchmarks.

The broker is the released Kafka server from Maven Central (see ``maven_jars``), started with
``java -cp <jars> kafka.Kafka``. Its settings (``server.properties``, a template), logging and pom
come from ``project_files.conf_dir()``: the copy the package ships, or a checkout's ``conf/``; its
jars are downloaded once into ``project_files.cache_dir()``. Every node is a combined broker and controller; one node uses a
dynamic quorum formatted with ``--standalone``, several nodes a static voter set. Ports are
chosen free at start, readiness is a real admin call, and each node's output goes to a
``server.log`` whose path is printed whenever something fails.

As a command (``python -m pyspark_eos.testing.embedded_kafka start|stop|status|fetch-jars``) the cluster
outlives the command; its pids and ports are kept in ``cluster.json`` in its directory.
"""
from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import random
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .certificates import TlsFiles, make_tls_files
from .jvm_options import class_archive_options, extra_jvm_options
from .maven_jars import KAFKA_VERSION_ENV, OLDEST_KAFKA, kafka_broker
from .secure_listeners import SECURE_LISTENERS, broker_jvm_options, secure_settings
from .tcp_proxy import TcpProxy
from ..errors import EmbeddedKafkaError
from .project_files import conf_file

log = logging.getLogger(__name__)

STATE_FILE = "cluster.json"
DEFAULT_HEAP = "768m"
_PR_SET_PDEATHSIG = 1


@dataclass
class NodeSpec:
    """What a node needs to be restarted with the same identity: id, ports and directory."""

    node_id: int
    broker_port: int
    controller_port: int
    directory: str
    # The secured listeners' ports by listener name (secure_listeners), when the cluster has them.
    listener_ports: dict[str, int] = field(default_factory=dict)
    # A proxied cluster's: the port of the listener the node advertises at its proxy's port.
    proxied_port: int = 0
    proxy_port: int = 0

    @property
    def path(self) -> Path:
        return Path(self.directory)

    @property
    def config_path(self) -> Path:
        return self.path / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.path / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.path / "data"


def proxied_settings(broker_port: int, controller_port: int, proxied_port: int, proxy_port: int) -> str:
    """server.properties lines (appended: they win) adding a PROXIED listener advertised at the proxy."""
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port},"
                     f"PROXIED://127.0.0.1:{proxied_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port},PROXIED://127.0.0.1:{proxy_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT",
    }
    return "# the proxied listener (tcp_proxy.py)\n" + "".join(f"{k}={v}\n" for k, v in settings.items())


# Where free_ports looks first: below Linux's default ephemeral range, above the well-known ports.
_LOWEST_PORT = 20000


def free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1, below the kernel's ephemeral range where it can.

    A port from the ephemeral range (what binding port 0 gives) can be taken, between this answer
    and the server's bind, as the source port of any process's outgoing connection, and a probe of
    it before the server listens can connect to itself (TCP's simultaneous open): the probe then
    reports a server that is not there and holds the port the server wanted."""
    low, _ = _ephemeral_port_range()
    if low <= _LOWEST_PORT + 4 * count:
        return _kernel_ports(count)
    ports: list[int] = []
    for port in random.sample(range(_LOWEST_PORT, low), min(low - _LOWEST_PORT, 64 * count)):
        if _bindable(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    return ports + _kernel_ports(count - len(ports))


def _ephemeral_port_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kernel_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def random_cluster_id() -> str:
    """Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding.

    Like Kafka's own Uuid.randomUuid, never one starting with '-': the storage tool's argument
    parser would take it for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


# What a fresh interpreter runs before it becomes the program: it asks the kernel to kill it when
# the thread that started it ends, says so on a pipe, and execs. A preexec_fn would run this in the
# forked copy of the starting process instead, where Python first cleans up the other threads'
# state: a finalizer run there (a py4j connection's, which logs) waits for a lock another thread
# held at the fork, and the child, and Popen with it, hang for good.
_EXEC_DYING_WITH_PARENT = ("import ctypes, os, signal, sys; "
                           f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, signal.SIGKILL); "
                           "os.write(int(sys.argv[1]), b'1'); os.close(int(sys.argv[1])); "
                           "os.execvp(sys.argv[2], sys.argv[2:])")


def start_dying_with_parent(command: Sequence[str], **popen_args) -> subprocess.Popen:
    """Popen ``command`` so that the kernel kills it when the thread that started it ends; returns
    once that holds (the thread may end at once).

    A test run killed with SIGKILL would otherwise leave JVMs holding ports and memory.
    """
    ready, told = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-S", "-c", _EXEC_DYING_WITH_PARENT, str(told), *command],
                                   pass_fds=(told,), **popen_args)
    finally:
        os.close(told)
    with os.fdopen(ready, "rb") as answer:
        answer.read(1)  # empty when the interpreter died first: Popen's caller sees the process gone
    return process


def _pid_is_node(pid: int, node: NodeSpec) -> bool:
    """True if pid is still the JVM started for this node (pids are recycled)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(node.config_path).encode() in cmdline


class EmbeddedKafkaCluster:
    """One or more KRaft nodes on 127.0.0.1, started and stopped by pid.

    Use as a context manager, or call ``start()``/``stop()``. ``kill_node``/``restart_node``
    simulate a broker crash and its recovery for broker-failure tests.
    """

    def __init__(
        self,
        nodes: int = 1,
        directory: str | os.PathLike | None = None,
        overrides: Mapping[str, object] | None = None,
        heap: str = DEFAULT_HEAP,
        tie_to_parent: bool = True,
        secure: bool = False,
        kafka_version: str | None = None,
        broker_jvm_options: Sequence[str] = (),
        proxied: bool = False,
    ):
        if nodes < 1:
            raise EmbeddedKafkaError(f"a cluster needs at least one node, got nodes={nodes}")
        if proxied and secure:
            raise EmbeddedKafkaError("a cluster is either secure or proxied, not both")
        self.node_count = nodes
        self.directory = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="eos-kafka-"))
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.tie_to_parent = tie_to_parent
        # Besides PLAINTEXT: TLS, mutual TLS and SASL_SSL listeners, and two with broken
        # certificates, with certificates made at start (secure_listeners).
        self.secure = secure
        # Beside PLAINTEXT, a PROXIED listener each node advertises at a TcpProxy's port, which
        # this object runs: clients bootstrapped at proxied_bootstrap_servers go through the proxies.
        self.proxied = proxied
        self.proxies: dict[int, TcpProxy] = {}
        # The Kafka release the nodes run (maven_jars.kafka_broker: default the pom's pin).
        self.jars = kafka_broker(kafka_version)
        self.broker_jvm_options = list(broker_jvm_options)
        self.tls: TlsFiles | None = None
        self.nodes: list[NodeSpec] = []
        self.pids: dict[int, int] = {}
        self._processes: dict[int, subprocess.Popen] = {}

    # ----------------------------------------------------------------------------- life cycle

    def start(self, timeout: float = 120.0) -> "EmbeddedKafkaCluster":
        classpath = self.jars.classpath()
        per_node = 2 + (len(SECURE_LISTENERS) if self.secure else 0) + (2 if self.proxied else 0)
        ports = free_ports(per_node * self.node_count)
        self.nodes = [self._node_spec(i + 1, ports[per_node * i:per_node * (i + 1)]) for i in range(self.node_count)]
        self.proxies = {node.node_id: TcpProxy(("127.0.0.1", node.proxied_port), node.proxy_port,
                                               name=f"node {node.node_id}").start()
                        for node in self.nodes if self.proxied}
        if self.secure:
            self.tls = make_tls_files(self.directory / "tls")
        log.info("starting a %d-node Apache Kafka %s cluster in %s",
                 self.node_count, self.kafka_version, self.directory)
        cluster_id = random_cluster_id()
        for node in self.nodes:
            self._render_config(node)
        self._format_storage(classpath, cluster_id)
        try:
            for node in self.nodes:
                self._launch(classpath, node)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.save_state()
        log.info("Kafka ready at %s", self.bootstrap_servers)
        return self

    def _node_spec(self, node_id: int, ports: list[int]) -> NodeSpec:
        broker, controller, *more = ports
        secured = dict(zip(SECURE_LISTENERS, more)) if self.secure else {}
        proxied, proxy = more if self.proxied else (0, 0)
        return NodeSpec(node_id, broker, controller, str(self.directory / f"node-{node_id}"), secured, proxied, proxy)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every node, SIGKILL those still alive after ``grace`` seconds."""
        live = [node for node in self.nodes if self._alive(node)]
        for node in live:
            os.kill(self.pids[node.node_id], signal.SIGTERM)
        deadline = time.monotonic() + grace
        for node in live:
            if not self._wait_exit(node, deadline):
                log.warning("node %d did not stop in %.0f s; killing it", node.node_id, grace)
                self.kill_node(node.node_id)
        self.pids.clear()
        self._processes.clear()
        self.save_state()
        for proxy in self.proxies.values():
            proxy.stop()

    def kill_node(self, node_id: int) -> None:
        """Crash a node (SIGKILL), as a failing machine would."""
        node = self.node(node_id)
        if self._alive(node):
            os.kill(self.pids[node_id], signal.SIGKILL)
            self._wait_exit(node, time.monotonic() + 30)
        self.pids.pop(node_id, None)
        self._processes.pop(node_id, None)
        self.save_state()

    def stop_node(self, node_id: int, grace: float = 60.0) -> None:
        """Stop a node cleanly (SIGTERM: it hands over its leaderships first); SIGKILL after ``grace``."""
        node = self.node(node_id)
        if self._alive(node):
            os.kill(self.pids[node_id], signal.SIGTERM)
            if not self._wait_exit(node, time.monotonic() + grace):
                log.warning("node %d did not stop in %.0f s; killing it", node_id, grace)
        self.kill_node(node_id)

    def restart_node(self, node_id: int, timeout: float = 120.0) -> None:
        """Start a stopped node again with its id, ports and data, and wait until it is back."""
        node = self.node(node_id)
        if self._alive(node):
            raise EmbeddedKafkaError(f"node {node_id} is running; kill or stop it before restarting it")
        self._launch(self.jars.classpath(), node)
        self.wait_ready(timeout)
        self.save_state()

    def __enter__(self) -> "EmbeddedKafkaCluster":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # ----------------------------------------------------------------------------- queries

    @property
    def kafka_version(self) -> str:
        return self.jars.version()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{node.broker_port}" for node in self.nodes)

    @property
    def proxied_bootstrap_servers(self) -> str:
        """The bootstrap servers of the PROXIED listener: clients there reach the brokers through
        ``proxies`` (a proxied cluster's)."""
        if not self.proxied:
            raise EmbeddedKafkaError("this cluster has no proxied listener: start it with proxied=True")
        return ",".join(self.proxies[node.node_id].address for node in self.nodes)

    def listener(self, name: str) -> str:
        """The bootstrap servers of a secured listener (one of SECURE_LISTENERS)."""
        if not self.secure:
            raise EmbeddedKafkaError("this cluster has no secured listeners: start it with secure=True")
        return ",".join(f"127.0.0.1:{node.listener_ports[name]}" for node in self.nodes)

    def node(self, node_id: int) -> NodeSpec:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise EmbeddedKafkaError(f"no node {node_id}; this cluster has nodes {[n.node_id for n in self.nodes]}")

    def running_node_ids(self) -> list[int]:
        return [node.node_id for node in self.nodes if self._alive(node)]

    def admin(self, **config):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, **config})

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until every running node is registered with the cluster and answers admin calls."""
        expected = set(self.running_node_ids())
        # librdkafka logs every refused connection; while nodes come up those are expected.
        admin = self.admin(log_level=0)
        deadline = time.monotonic() + timeout
        while True:
            self._check_processes()
            if expected <= self._registered_nodes(admin):
                return
            if time.monotonic() > deadline:
                raise EmbeddedKafkaError(
                    f"Kafka nodes {sorted(expected)} did not become ready in {timeout:.0f} s; "
                    f"see their logs: {', '.join(str(self.node(i).log_path) for i in sorted(expected))}"
                )
            time.sleep(0.2)

    def wait_in_sync(self, timeout: float = 120.0) -> None:
        """Wait until every partition, internal topics included, has all its replicas in sync."""
        admin = self.admin()
        deadline = time.monotonic() + timeout
        while True:
            lagging = self._out_of_sync_partitions(admin)
            if not lagging:
                return
            if time.monotonic() > deadline:
                raise EmbeddedKafkaError(
                    f"partitions still under-replicated after {timeout:.0f} s: {lagging[:10]}"
                )
            time.sleep(0.2)

    def describe(self) -> list[dict]:
        return [
            {**asdict(node), "pid": self.pids.get(node.node_id), "running": self._alive(node)}
            for node in self.nodes
        ]

    # ----------------------------------------------------------------------------- state file

    def save_state(self) -> None:
        if not self.nodes:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        state = {
            "kafka_version": self.kafka_version,
            "bootstrap_servers": self.bootstrap_servers,
            "nodes": [asdict(node) for node in self.nodes],
            "pids": {str(node_id): pid for node_id, pid in self.pids.items()},
        }
        (self.directory / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def from_directory(cls, directory: str | os.PathLike) -> "EmbeddedKafkaCluster":
        """The cluster a ``start`` command left running in ``directory``."""
        path = Path(directory) / STATE_FILE
        if not path.exists():
            raise EmbeddedKafkaError(f"no embedded Kafka cluster was started in {directory} ({path} is missing)")
        state = json.loads(path.read_text())
        cluster = cls(nodes=len(state["nodes"]), directory=directory, kafka_version=state.get("kafka_version"))
        cluster.nodes = [NodeSpec(**node) for node in state["nodes"]]
        cluster.pids = {int(node_id): pid for node_id, pid in state["pids"].items()}
        return cluster

    # ----------------------------------------------------------------------------- internals

    def _render_config(self, node: NodeSpec) -> None:
        if node.path.exists():
            shutil.rmtree(node.path)
        node.data_dir.mkdir(parents=True)
        replication = min(3, self.node_count)
        values = {
            "node_id": node.node_id,
            "broker_port": node.broker_port,
            "controller_port": node.controller_port,
            "log_dir": node.data_dir,
            "quorum": self._quorum_setting(),
            "replication_factor": replication,
            "min_insync_replicas": max(1, replication - 1),
        }
        template = string.Template(conf_file("server.properties").read_text())
        text = template.substitute(values)
        if self.secure:
            text += secure_settings(node.broker_port, node.controller_port, node.listener_ports, self.tls)
        if self.proxied:
            text += proxied_settings(node.broker_port, node.controller_port, node.proxied_port, node.proxy_port)
        # Overrides may name the node's own ports and directories, e.g. to add a listener.
        text += "".join(f"{key}={string.Template(str(value)).safe_substitute(values)}\n"
                        for key, value in self.overrides.items())
        node.config_path.write_text(text)

    def _quorum_setting(self) -> str:
        if self.node_count == 1:
            return f"controller.quorum.bootstrap.servers=127.0.0.1:{self.nodes[0].controller_port}"
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        return f"controller.quorum.voters={voters}"

    def _format_command(self, classpath: str, node: NodeSpec, cluster_id: str) -> list[str]:
        command = self._java(classpath, node) + [
            "kafka.tools.StorageTool", "format", "--ignore-formatted",
            "--cluster-id", cluster_id, "--config", str(node.config_path),
        ]
        if self.node_count == 1:
            command.append("--standalone")
        return command

    def _java(self, classpath: str, node: NodeSpec) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise EmbeddedKafkaError("java is not on PATH: the Kafka broker needs Java 17 or newer")
        extra = extra_jvm_options() + class_archive_options(kafka_classpath_key(classpath))
        # A JVM refuses two collectors: the extras' choice, if they make one, replaces Kafka's G1.
        collector = [] if any(o.startswith("-XX:+Use") and o.endswith("GC") for o in extra) else ["-XX:+UseG1GC"]
        return [
            java, f"-Xmx{self.heap}", "-Xms128m", *collector, "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={conf_file('broker-log4j2.properties')}",
            f"-Dkafka.logs.dir={node.path}", *extra, "-cp", classpath,
        ]

    def _format_storage(self, classpath: str, cluster_id: str) -> None:
        """Format every node's storage side by side (each is a JVM start); output goes to its log."""
        running = []
        for node in self.nodes:
            with open(node.log_path, "ab") as log_file:
                command = self._format_command(classpath, node, cluster_id)
                running.append((node, subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)))
        for node, process in running:
            if process.wait(timeout=120) != 0:
                raise EmbeddedKafkaError(
                    f"formatting the storage of Kafka node {node.node_id} failed (exit {process.returncode}); "
                    f"its log is {node.log_path}. Last lines:\n{log_tail(node.log_path)}"
                )

    def _launch(self, classpath: str, node: NodeSpec) -> None:
        with open(node.log_path, "ab") as log_file:
            secured = broker_jvm_options(self.tls) if self.secure else []
            command = self._java(classpath, node) + secured + self.broker_jvm_options + ["kafka.Kafka",
                                                                                          str(node.config_path)]
            start = start_dying_with_parent if self.tie_to_parent else subprocess.Popen
            process = start(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
        self._processes[node.node_id] = process
        self.pids[node.node_id] = process.pid
        log.info("node %d: pid %d, broker 127.0.0.1:%d, log %s",
                 node.node_id, process.pid, node.broker_port, node.log_path)

    def _alive(self, node: NodeSpec) -> bool:
        pid = self.pids.get(node.node_id)
        if pid is None:
            return False
        process = self._processes.get(node.node_id)
        if process is not None:
            return process.poll() is None
        return _pid_is_node(pid, node)

    def _wait_exit(self, node: NodeSpec, deadline: float) -> bool:
        while self._alive(node):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _check_processes(self) -> None:
        for node_id, process in self._processes.items():
            if process.poll() is not None:
                node = self.node(node_id)
                raise EmbeddedKafkaError(
                    f"Kafka node {node_id} exited with code {process.returncode} while starting; "
                    f"its log is {node.log_path}. Last lines:\n{log_tail(node.log_path)}"
                )

    @staticmethod
    def _registered_nodes(admin) -> set[int]:
        try:
            description = admin.describe_cluster(request_timeout=5).result()
        except Exception:  # the broker is not listening yet, or not yet part of the quorum
            return set()
        return {node.id for node in description.nodes}

    @staticmethod
    def _out_of_sync_partitions(admin) -> list[str]:
        metadata = admin.list_topics(timeout=10)
        return [
            f"{topic.topic}-{partition.id}"
            for topic in metadata.topics.values()
            for partition in topic.partitions.values()
            if set(partition.isrs) != set(partition.replicas) or partition.leader < 0
        ]


# --------------------------------------------------------------------------------- command line

def create_topic(bootstrap: str, name: str, partitions: int = 1, replication: int = 1,
                 config: Mapping[str, str] | None = None, timeout: float = 60.0) -> str:
    """Create a topic and wait until every partition's leader answers ListOffsets: the metadata
    can name a leader before that broker has applied the partition, and a producer sent there
    meanwhile gets NOT_LEADER_OR_FOLLOWER (a Java idempotent producer then OUT_OF_ORDER_SEQUENCE_NUMBER
    on its retries, until its delivery timeout)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication, config=dict(config or {}))],
                                  operation_timeout=30)
    futures[name].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while not (_has_leaders(admin, name, partitions) and _leaders_answer(admin, name, partitions)):
        if time.monotonic() > deadline:
            raise EmbeddedKafkaError(f"topic {name} has no leader answering for every partition after {timeout:.0f} s")
        time.sleep(0.1)
    return name


def _has_leaders(admin, topic: str, partitions: int) -> bool:
    metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None or len(metadata.partitions) != partitions:
        return False
    return all(p.leader >= 0 for p in metadata.partitions.values())


def _leaders_answer(admin, topic: str, partitions: int) -> bool:
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    try:
        for future in admin.list_offsets(request, request_timeout=10).values():
            future.result()
    except KafkaException:
        return False
    return True


def kafka_tool_command(main_class: str) -> list[str]:
    """What Kafka's bin/ scripts run: one of its command-line tools (kafka-acls.sh is
    ``org.apache.kafka.tools.AclCommand``), from the same released jars as the broker."""
    java = shutil.which("java") or "java"
    classpath = kafka_broker().classpath()
    return [java, f"-Dlog4j2.configurationFile={conf_file('broker-log4j2.properties')}", *extra_jvm_options(),
            *class_archive_options(kafka_classpath_key(classpath)), "-cp", classpath, main_class]


def kafka_classpath_key(classpath: str) -> str:
    return f"kafka {classpath}"


def _default_directory() -> Path:
    return Path(tempfile.gettempdir()) / f"eos-kafka-{os.getuid()}"


def _cmd_start(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    if (directory / STATE_FILE).exists():
        existing = EmbeddedKafkaCluster.from_directory(directory)
        if existing.running_node_ids():
            raise EmbeddedKafkaError(
                f"a cluster is already running in {directory} at {existing.bootstrap_servers}; "
                f"stop it first: python -m pyspark_eos.testing.embedded_kafka stop --dir {directory}"
            )
    cluster = EmbeddedKafkaCluster(nodes=args.nodes, directory=directory, tie_to_parent=False,
                                   kafka_version=args.kafka_version)
    cluster.start(timeout=args.timeout)
    print(cluster.bootstrap_servers)
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    cluster = EmbeddedKafkaCluster.from_directory(args.dir)
    running = cluster.running_node_ids()
    cluster.stop()
    print(f"stopped nodes {running}" if running else "no node was running")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    cluster = EmbeddedKafkaCluster.from_directory(args.dir)
    running = cluster.running_node_ids()
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    for node in cluster.describe():
        state = f"running (pid {node['pid']})" if node["running"] else "stopped"
        print(f"node {node['node_id']}: {state}, log {Path(node['directory']) / 'server.log'}")
    return 0 if running else 3


def _cmd_fetch_jars(args: argparse.Namespace) -> int:
    # The oldest supported release, which only make test's older-PySpark pipeline runs, is fetched
    # by the tests (tests/prefetch.py) rather than by every set-up: make demo never uses it.
    print(kafka_broker(args.kafka_version).ensure())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyspark_eos.testing.embedded_kafka",
        description="Run a real Apache Kafka broker (KRaft) on 127.0.0.1 for development.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, help_text in [
        ("start", _cmd_start, "start a cluster and print its bootstrap servers"),
        ("stop", _cmd_stop, "stop the cluster started in --dir"),
        ("status", _cmd_status, "show the nodes of the cluster in --dir (exit 3 if none runs)"),
        ("fetch-jars", _cmd_fetch_jars, "download the broker jars with Maven and print where they are"),
    ]:
        sub = commands.add_parser(name, help=help_text)
        sub.set_defaults(handler=handler)
        sub.add_argument("--dir", default=str(_default_directory()),
                         help="cluster directory: configs, data, logs, cluster.json (default: %(default)s)")
    for name in ("start", "fetch-jars"):
        commands.choices[name].add_argument(
            "--kafka-version", help=f"a Kafka release other than the pinned one, e.g. {OLDEST_KAFKA} "
                                    f"(default: ${KAFKA_VERSION_ENV}, else the pom's)")
    commands.choices["start"].add_argument("--nodes", type=int, default=1, help="number of nodes (default 1)")
    commands.choices["start"].add_argument("--timeout", type=float, default=120.0,
                                           help="seconds to wait for readiness (default 120)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        return args.handler(args)
    except EmbeddedKafkaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
