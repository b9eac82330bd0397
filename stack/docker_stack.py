"""The same topology from containers, for machines with a Docker engine.

Two ``apache/kafka`` containers on a private Docker network: a KRaft broker+controller and a
Kafka Connect distributed worker with the same settings as the embedded stack, published on the
host's loopback only. They carry
the label ``dev.ikkai.stack`` so ``down`` and ``status`` find them from any process. The
docker SDK (a dependency of testcontainers) drives them; containers outlive the CLI call.

This path is NOT exercised on ikkai's development and CI machines (they have no Docker
engine); the README says so. It stays small on purpose.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from stack.errors import StackError
from stack.probes import broker_answers, connect_plugins
from stack.stack_config import CONFIG_PROVIDERS, HOST, Ports, connect_properties, render_properties
from stack.status import ComponentStatus, StackStatus

IMAGE = "apache/kafka:4.3.1"
LABEL = "dev.ikkai.stack"
NETWORK = "ikkai-stack"
CONNECT_SCRIPT = "/opt/kafka/bin/connect-distributed.sh"
HOST_PORT = {"broker": 19092, "connect": 18083}


def docker_client() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise StackError("docker", "the docker SDK is not installed", fix="pip install -e '.[test]'") from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise StackError(
            "docker",
            f"no Docker engine answers ({type(exc).__name__})",
            fix="start Docker, or use the embedded stack: `ikkai stack up --runtime local`",
        ) from exc
    return client


def _broker_environment() -> dict[str, str]:
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@broker:9093",
        "KAFKA_LISTENERS": "INTERNAL://:9092,HOST://:19092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"INTERNAL://broker:9092,HOST://127.0.0.1:{HOST_PORT['broker']}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,HOST:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_MIN_INSYNC_REPLICAS": "1",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    }


def published(container_port: str, component: str) -> dict[str, tuple[str, int]]:
    """Docker's ``ports`` for one component: published on the host's loopback only (127.0.0.1), never on
    every interface (Docker's default), since the plaintext broker and the Connect REST API ask no one
    who they are."""
    return {container_port: (HOST, HOST_PORT[component])}


def _connect_command() -> list[str]:
    container_tmp = Path("/tmp")  # noqa: S108 - the container's own: the providers may read there, no host file is mounted
    properties = connect_properties(Ports(9092, 9093, 8083), [Path("/opt/kafka/libs")], secret_dirs=[container_tmp])
    properties.update(
        {"bootstrap.servers": "broker:9092", "listeners": "http://0.0.0.0:8083", "rest.advertised.host.name": "connect"}
    )
    assert set(CONFIG_PROVIDERS) <= set(properties["config.providers"].split(","))
    text = render_properties(properties).replace("'", "'\\''")
    script = f"printf '%s' '{text}' > /tmp/connect.properties && exec {CONNECT_SCRIPT} /tmp/connect.properties"
    return ["bash", "-c", script]


class DockerStack:
    def __init__(self, progress: TextIO = sys.stderr) -> None:
        self.progress = progress

    def _containers(self) -> dict[str, Any]:
        return {c.labels[LABEL]: c for c in docker_client().containers.list(filters={"label": LABEL})}

    def endpoints(self) -> Endpoints | None:
        if {"broker", "connect"} - self._containers().keys():
            return None
        return Endpoints(
            f"127.0.0.1:{HOST_PORT['broker']}", f"http://127.0.0.1:{HOST_PORT['connect']}", runtime="docker"
        )

    def status(self) -> StackStatus:
        endpoints = self.endpoints()
        broker = endpoints is not None and broker_answers(KafkaContext(endpoints.bootstrap_servers))
        connect = endpoints is not None and connect_plugins(endpoints.connect_url) is not None
        return StackStatus(
            Path("-"),
            endpoints,
            [ComponentStatus("broker", [], broker, Path("-")), ComponentStatus("connect", [], connect, Path("-"))],
        )

    def up(self) -> Endpoints:
        client = docker_client()
        if not client.networks.list(names=[NETWORK]):
            client.networks.create(NETWORK)
        running = self._containers()
        if "broker" not in running:
            client.containers.run(
                IMAGE, name="ikkai-broker", hostname="broker", network=NETWORK, detach=True,
                environment=_broker_environment(), ports=published("19092/tcp", "broker"), labels={LABEL: "broker"},
            )  # fmt: skip
        if "connect" not in running:
            client.containers.run(
                IMAGE, name="ikkai-connect", hostname="connect", network=NETWORK, detach=True,
                command=_connect_command(), ports=published("8083/tcp", "connect"), labels={LABEL: "connect"},
            )  # fmt: skip
        endpoints = self.endpoints()
        assert endpoints is not None
        deadline = time.monotonic() + 180
        while not all(c.healthy for c in self.status().components):
            if time.monotonic() > deadline:
                raise StackError(
                    "docker", "containers not ready after 180 s", fix="docker logs ikkai-broker / ikkai-connect"
                )
            time.sleep(1)
        return endpoints

    def down(self, *, purge: bool = False) -> list[int]:
        for container in self._containers().values():
            container.remove(force=True)
        return []
