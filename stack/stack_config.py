"""Pure rendering of the embedded stack's configuration files.

Nothing here touches the disk or a socket: every function maps ports and paths to the
text of a properties file, so the settings that make exactly-once work on a one-node
cluster (replication factor 1 for the transaction state log, min.insync.replicas 1) and on
three nodes (replication factor 3, min.insync.replicas 2) are unit-tested without starting a JVM.

A stack has one or more KRaft nodes, each a combined broker+controller. One node is named
``broker`` (its ports ``broker`` and ``controller``); N > 1 nodes are ``broker-1`` .. ``broker-N``
(ports ``broker-<i>`` and ``controller-<i>``), node ids 1..N, all of them controller voters.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stack.errors import StackError

HOST = "127.0.0.1"

CONNECT_GROUP = "ikkai-connect"
# The transaction timeout of exactly-once source tasks' producers (see connect_properties).
SOURCE_TRANSACTION_TIMEOUT_MS = 10_000
CONNECT_CONFIG_TOPIC = "_ikkai.connect.configs"
CONNECT_OFFSET_TOPIC = "_ikkai.connect.offsets"
CONNECT_STATUS_TOPIC = "_ikkai.connect.status"
# scheduled.rebalance.max.delay.ms of a group of several workers (connect_properties says why).
GROUP_REBALANCE_DELAY_MS = 5_000

CONFIG_PROVIDERS = {
    "file": "org.apache.kafka.common.config.provider.FileConfigProvider",
    "dir": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
    "env": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
}
PATH_PROVIDERS = ("file", "dir")  # read files: only under the worker's ``allowed.paths`` (KIP-993)
# The environment variables ``${env:…}`` may read (EnvVarConfigProvider's ``allowlist.pattern``, a full
# match, KIP-887): a connector secret put in the worker's environment on purpose, never its PATH, HOME
# or a cloud key it inherited.
ENV_SECRETS_PATTERN = "IKKAI_SECRET_[A-Za-z0-9_]+"
# The client settings a connector may override (``producer.override.<name>``, ``consumer.override.<name>``;
# Kafka 4.2+'s Allowlist policy, KIP-1188): those the shipped bundles set, and no other, so a connector
# cannot point its clients at another cluster, log in as someone else or load a class of its choosing.
CONNECTOR_CLIENT_OVERRIDES = (
    "acks",  # payments-ingest, postgres-cdc: producer.override.acks=all
    "enable.idempotence",  # payments-ingest, postgres-cdc
    "max.in.flight.requests.per.connection",  # payments-ingest
    "isolation.level",  # outbox-sink: consumer.override.isolation.level=read_committed (rule 3)
    "auto.offset.reset",  # outbox-sink
    "session.timeout.ms",  # outbox-sink
    "heartbeat.interval.ms",  # outbox-sink
)


BROKER = "broker"
CONTROLLER = "controller"
CONNECT = "connect"
MAX_REPLICATION = 3
NODE = re.compile(rf"{BROKER}-([1-9][0-9]*)")  # node i of a stack of N > 1: ``broker-<i>``


@dataclass(frozen=True)
class NodePorts:
    """One KRaft node's client listener and controller listener."""

    broker: int
    controller: int


@dataclass(frozen=True)
class Ports:
    """Where the stack listens: node 1's ports, Connect's, and those of nodes 2..N (``more_nodes``)."""

    broker: int
    controller: int
    connect: int
    more_nodes: tuple[NodePorts, ...] = ()

    @property
    def nodes(self) -> tuple[NodePorts, ...]:
        return (NodePorts(self.broker, self.controller), *self.more_nodes)

    def as_dict(self) -> dict[str, int]:
        """By role (``port_roles``): ``broker``, ``controller``, ``connect`` on one node, else per node."""
        return dict(zip(port_roles(len(self.nodes)), (*_flat(self.nodes), self.connect), strict=True))

    @classmethod
    def from_dict(cls, roles: Mapping[str, int]) -> Ports:
        """The inverse of ``as_dict``; KeyError or TypeError when a role is missing or not a port."""
        count = 1 if BROKER in roles else sum(1 for role in roles if role.startswith(f"{BROKER}-"))
        ports = [int(roles[role]) for role in port_roles(count)]
        nodes = [NodePorts(ports[i], ports[i + 1]) for i in range(0, 2 * count, 2)]
        return cls(nodes[0].broker, nodes[0].controller, ports[-1], tuple(nodes[1:]))


def _flat(nodes: tuple[NodePorts, ...]) -> list[int]:
    return [port for node in nodes for port in (node.broker, node.controller)]


def broker_components(count: int) -> tuple[str, ...]:
    """The process names of the stack's KRaft nodes: ``broker`` alone, else ``broker-1`` .. ``broker-N``."""
    if count < 1:
        raise ValueError(f"a stack needs at least one broker, not {count}")
    return (BROKER,) if count == 1 else tuple(f"{BROKER}-{node_id}" for node_id in range(1, count + 1))


def broker_node_id(broker: str) -> int:
    """``broker`` is node 1 of a one-broker stack; ``broker-<i>`` is node i."""
    if broker == BROKER:
        return 1
    match = NODE.fullmatch(broker)
    if match is None:
        raise StackError(broker, "is not a broker's name", fix=f"name `{BROKER}` or `{BROKER}-<node id>`")
    return int(match.group(1))


def port_roles(count: int) -> tuple[str, ...]:
    """The stack's port names, in the order ports are chosen: each node's broker and controller, then Connect."""
    nodes = broker_components(count)
    controllers = [name.replace(BROKER, CONTROLLER, 1) for name in nodes]
    return (*(role for pair in zip(nodes, controllers, strict=True) for role in pair), CONNECT)


def replication(count: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of ``count`` brokers.

    One broker: 1 and 1. Three or more: 3 and 2, so a write acknowledged by acks=all survives the
    loss of any one broker, and producing goes on while one broker is down.
    """
    factor = min(count, MAX_REPLICATION)
    return factor, max(1, factor - 1)


def bootstrap_servers(ports: Ports) -> str:
    return ",".join(f"{HOST}:{node.broker}" for node in ports.nodes)


def connect_url(ports: Ports) -> str:
    return f"http://{HOST}:{ports.connect}"


def broker_properties(ports: Ports, data_dir: Path, node_id: int = 1) -> dict[str, str]:
    """Node ``node_id`` (1-based) of the stack: a combined broker+controller in KRaft mode, loopback only.

    Every node is a controller voter, so three nodes keep a quorum (two) when any one of them dies.
    """
    node = ports.nodes[node_id - 1]
    factor, min_isr = (str(value) for value in replication(len(ports.nodes)))
    voters = ",".join(f"{i}@{HOST}:{n.controller}" for i, n in enumerate(ports.nodes, start=1))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{HOST}:{node.broker},CONTROLLER://{HOST}:{node.controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.broker}",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        # Every internal topic, the transaction state log included, and every topic created with the
        # broker default (replication factor -1, as ikkai's jobs do): one replica on one node, three
        # replicas with min.insync.replicas 2 on three or more.
        "offsets.topic.replication.factor": factor,
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": factor,
        "share.coordinator.state.topic.min.isr": min_isr,
        "default.replication.factor": factor,
        "min.insync.replicas": min_isr,
        # Topics are created on purpose (names carry meaning: ingest.*, events.*, outbox.*, dlq.*).
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.flush.interval.messages": "9223372036854775807",
        # How often the coordinator looks for transactions past their timeout (Kafka's default: 10 s,
        # which adds up to 10 s to every timed-out transaction's hold on read_committed readers).
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    }


def connect_properties(
    ports: Ports, plugin_path: list[Path], *, secret_dirs: Sequence[Path] = (), group_size: int = 1
) -> dict[str, str]:
    """A Kafka Connect distributed worker with exactly-once source support and secret providers.

    ``secret_dirs``: the folders the ``file`` and ``dir`` providers may read (each must exist when the
    worker starts); none given, the system's temporary folder, where the dev values, ``ikkai smoke``
    and the tests put their secret files. ``group_size``: how many workers the group has (the stack's
    ``connect_workers``); it decides how long a departed worker's tasks wait before they move.
    """
    factor = str(replication(len(ports.nodes))[0])
    properties = {
        "bootstrap.servers": bootstrap_servers(ports),
        "group.id": CONNECT_GROUP,
        "config.storage.topic": CONNECT_CONFIG_TOPIC,
        "offset.storage.topic": CONNECT_OFFSET_TOPIC,
        "status.storage.topic": CONNECT_STATUS_TOPIC,
        # Connect's own topics follow the broker count (their min.insync.replicas is the broker default).
        "config.storage.replication.factor": factor,
        "offset.storage.replication.factor": factor,
        "status.storage.replication.factor": factor,
        "offset.storage.partitions": "5",
        "status.storage.partitions": "1",
        "listeners": f"http://{HOST}:{ports.connect}",
        "rest.advertised.host.name": HOST,
        "rest.advertised.port": str(ports.connect),
        "plugin.path": ",".join(str(path) for path in plugin_path),
        # Raw bytes stay raw unless a connector says otherwise; bundles name their converters.
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "exactly.once.source.support": "enabled",
        # Connectors may override the client settings the bundles need (consumer.override.isolation.level=
        # read_committed, producer.override.acks=all) and no other; the policy lint decides which are required.
        "connector.client.config.override.policy": "Allowlist",
        "connector.client.config.override.allowlist": ",".join(CONNECTOR_CLIENT_OVERRIDES),
        "offset.flush.interval.ms": "1000",
        # Exactly-once source tasks write records and offsets in transactions; the worker reads its offsets
        # topic read_committed when it starts. A task killed with a transaction open holds that read (and
        # every read_committed reader of its topics) until the broker times the transaction out: by the
        # client default, 60 s, measured in `make demo` as a restarted worker's 61 s wait. A source
        # transaction spans one poll batch (transaction.boundary=poll), so 10 s, Kafka Streams'
        # exactly-once default, is ample and bounds the wait.
        "producer.transaction.timeout.ms": str(SOURCE_TRANSACTION_TIMEOUT_MS),
        # How long a departed worker's connectors and tasks stay unassigned, in case it comes back,
        # before the group hands them to the others (Kafka's default: 5 minutes). One worker: 0, no
        # other can take over, so a restarted worker gets its connectors back at once. A group of
        # several: 5 s, so a kill -9'd worker's tasks move to the others within seconds (its member
        # leaves after at most 6 s, then at most 5 s) instead of minutes, by the delayed path a
        # production group takes (docs/running-jobs-on-a-cluster.md), and a worker back within 5 s
        # keeps its own.
        # A kill -9'd worker's old member leaves the group after 6 s (the brokers'
        # group.min.session.timeout.ms) instead of 10 s.
        "scheduled.rebalance.max.delay.ms": "0" if group_size == 1 else str(GROUP_REBALANCE_DELAY_MS),
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "2000",
        # Find plugins by their ServiceLoader manifests only (KIP-898): every plugin the stack puts on
        # plugin.path has them, and the default (hybrid_warn) also scans every class of every plugin
        # jar by reflection, the longest step of a worker's start (benchmarks/recovery.py). A plugin
        # without manifests is then not found: LocalStack falls back to hybrid_warn for plugin
        # folders from elsewhere (extra_plugin_dirs).
        "plugin.discovery": "service_load",
        "config.providers": ",".join(CONFIG_PROVIDERS),
    }
    for name, cls in CONFIG_PROVIDERS.items():
        properties[f"config.providers.{name}.class"] = cls
    allowed = ",".join(str(path) for path in secret_dirs) or tempfile.gettempdir()
    for name in PATH_PROVIDERS:
        properties[f"config.providers.{name}.param.allowed.paths"] = allowed
    properties["config.providers.env.param.allowlist.pattern"] = ENV_SECRETS_PATTERN
    return properties


def log4j2_properties(log_file: Path) -> dict[str, str]:
    """log4j2 writing INFO and above to one file; noisy client internals at WARN."""
    return {
        "status": "warn",
        "appender.file.type": "File",
        "appender.file.name": "FILE",
        "appender.file.fileName": str(log_file),
        "appender.file.layout.type": "PatternLayout",
        "appender.file.layout.pattern": "[%d] %p %m (%c)%n",
        "rootLogger.level": "INFO",
        "rootLogger.appenderRef.file.ref": "FILE",
        "logger.clients.name": "org.apache.kafka.clients",
        "logger.clients.level": "WARN",
        "logger.reflections.name": "org.reflections",
        "logger.reflections.level": "ERROR",
    }


def render_properties(properties: Mapping[str, str], header: str = "") -> str:
    lines = [f"# {line}" for line in header.splitlines()]
    for key in sorted(properties):
        value = properties[key].replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"
