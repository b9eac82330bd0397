"""Pure rendering of the embedded stack's configuration files.

Nothing here touches the disk or a socket: every function maps ports and paths to the
text of a properties file, so the settings that make exactly-once work on a one-node
cluster (replication factor 1 for the transaction state log, min.insync.replicas 1) are
unit-tested without starting a JVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"

CONNECT_GROUP = "ikkai-connect"
CONNECT_CONFIG_TOPIC = "_ikkai.connect.configs"
CONNECT_OFFSET_TOPIC = "_ikkai.connect.offsets"
CONNECT_STATUS_TOPIC = "_ikkai.connect.status"

CONFIG_PROVIDERS = {
    "file": "org.apache.kafka.common.config.provider.FileConfigProvider",
    "dir": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
    "env": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
}


@dataclass(frozen=True)
class Ports:
    broker: int
    controller: int
    connect: int

    def as_dict(self) -> dict[str, int]:
        return {"broker": self.broker, "controller": self.controller, "connect": self.connect}


def bootstrap_servers(ports: Ports) -> str:
    return f"{HOST}:{ports.broker}"


def connect_url(ports: Ports) -> str:
    return f"http://{HOST}:{ports.connect}"


def broker_properties(ports: Ports, data_dir: Path) -> dict[str, str]:
    """A single combined broker+controller in KRaft mode, loopback only."""
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{ports.controller}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{HOST}:{ports.broker},CONTROLLER://{HOST}:{ports.controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{ports.broker}",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        # One node: every internal topic, the transaction state log included, has one replica.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        # Topics are created on purpose (names carry meaning: ingest.*, events.*, outbox.*, dlq.*).
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.flush.interval.messages": "9223372036854775807",
    }


def connect_properties(ports: Ports, plugin_path: list[Path]) -> dict[str, str]:
    """A Kafka Connect distributed worker with exactly-once source support and secret providers."""
    properties = {
        "bootstrap.servers": f"{HOST}:{ports.broker}",
        "group.id": CONNECT_GROUP,
        "config.storage.topic": CONNECT_CONFIG_TOPIC,
        "offset.storage.topic": CONNECT_OFFSET_TOPIC,
        "status.storage.topic": CONNECT_STATUS_TOPIC,
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
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
        # Connectors may override client settings (consumer.override.isolation.level=read_committed,
        # producer.override.acks=all); the policy lint decides which overrides are required.
        "connector.client.config.override.policy": "All",
        "offset.flush.interval.ms": "1000",
        # One worker: after a restart its connectors come back within seconds, not the 5-minute default.
        "scheduled.rebalance.max.delay.ms": "5000",
        "config.providers": ",".join(CONFIG_PROVIDERS),
    }
    for name, cls in CONFIG_PROVIDERS.items():
        properties[f"config.providers.{name}.class"] = cls
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
