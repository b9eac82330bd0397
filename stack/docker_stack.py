"""The same topology from containers, for machines with a Docker engine, built on testcontainers.

Two ``apache/kafka`` containers on a private Docker network (``ikkai-stack``): a KRaft broker+controller and a
Kafka Connect distributed worker with the embedded stack's settings (its config-provider and client-override
restrictions), each a testcontainers ``DockerContainer`` on a testcontainers ``Network``.

**Loopback only.** The plaintext broker and the Connect REST API ask no one who they are, so their ports are
published on the host's ``127.0.0.1`` only, never on every interface (Docker's default for a bare port).
testcontainers' ``with_bind_ports`` takes no host address, so ``LoopbackContainer`` turns every port it binds into
a ``(127.0.0.1, port)`` binding in ``_configure``, the hook testcontainers calls just before it asks Docker for the
container (testcontainers' own Docker client accepts such bindings and the docker SDK sends them as ``HostIp``).

**The stack outlives the CLI call.** testcontainers normally starts its Ryuk reaper, which removes every container
of the process's session (a label it puts on each) once the process exits: right for a test's throwaway container,
wrong for a stack that ``ikkai stack up`` leaves running for later commands. ``up`` therefore turns the reaper off
for its own process (``testcontainers_config.ryuk_disabled``, what ``TESTCONTAINERS_RYUK_DISABLED=true`` sets) and
never uses the containers as context managers (whose exit removes them); ``down`` removes them instead. A process
that has already started a reaper for containers of its own would take ikkai's with it when it exits, since the
session label cannot be left off: run ``up`` from one that has not (the CLI never has).

**Found again by label.** The containers and the network carry the label ``dev.ikkai.stack`` (``broker``,
``connect``, ``network``), so ``status`` and ``down`` find them from any later process. testcontainers has no call
to list containers by label or to adopt one it did not start, so those use the docker SDK client that
testcontainers itself holds (``DockerClient.client``). The containers keep their data inside themselves: ``down``
removes them with it, with or without ``--purge``.

ikkai's development and CI machines have no Docker engine: ``tests/stack/test_docker_stack.py`` checks what this
module asks Docker for against a fake of the docker SDK, and ``tests/stack/test_docker_engine.py`` (marker
``docker``) runs the real thing where an engine answers and skips, saying why, where none does.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from stack.errors import StackError
from stack.probes import broker_answers, connect_plugins
from stack.stack_config import CONFIG_PROVIDERS, HOST, Ports, connect_properties, render_properties
from stack.status import ComponentStatus, StackStatus

try:
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient
    from testcontainers.core.network import Network
except ImportError as exc:  # testcontainers comes with the `docker` extra; without it, a one-line error, no traceback
    raise StackError(
        "docker", "the docker runtime needs testcontainers, which is not installed", fix="pip install 'ikkai[docker]'"
    ) from exc

IMAGE = "apache/kafka:4.3.1"
LABEL = "dev.ikkai.stack"
NETWORK = "ikkai-stack"
CONNECT_SCRIPT = "/opt/kafka/bin/connect-distributed.sh"
NAME = {"broker": "ikkai-broker", "connect": "ikkai-connect"}
CONTAINER_PORT = {"broker": "19092/tcp", "connect": "8083/tcp"}
HOST_PORT = {"broker": 19092, "connect": 18083}
PING_TIMEOUT_S = 10
READY_S = 180


def engine(timeout: int = PING_TIMEOUT_S) -> DockerClient:
    """testcontainers' Docker client, once the engine answers a ping within ``timeout`` seconds."""
    try:
        client = DockerClient(timeout=timeout)
        client.client.ping()
    except Exception as exc:  # no socket, a refused or silent one, an API too old: each means no engine to use
        raise StackError(
            "docker",
            f"no Docker engine answers ({type(exc).__name__})",
            fix="start Docker, or use the embedded stack: `ikkai stack --runtime local up` (local is the default)",
        ) from exc
    return client


def published(ports: Mapping[str, int | None]) -> dict[str, tuple[str, int | None]]:
    """Docker's port bindings for ``ports`` (container port → host port, None for any free one): each on the host's
    loopback only, never on every interface (what a bare port number means to Docker)."""
    return {container_port: (HOST, host_port) for container_port, host_port in ports.items()}


class LoopbackContainer(DockerContainer):
    """A testcontainers container whose bound ports are published on the host's loopback only."""

    def _configure(self) -> None:
        # DockerContainer types its ports as host port numbers; the DockerClient.create it hands them to takes
        # (host address, port) pairs too, which is the only way to name the address in testcontainers 4.15.
        self.ports = published(self.ports)  # type: ignore[assignment]


def _broker_environment() -> dict[str, str]:
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@broker:9093",
        "KAFKA_LISTENERS": "INTERNAL://:9092,HOST://:19092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"INTERNAL://broker:9092,HOST://{HOST}:{HOST_PORT['broker']}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,HOST:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_MIN_INSYNC_REPLICAS": "1",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    }


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


def _container(role: str, network: Network) -> DockerContainer:
    """The ``role`` (broker, connect) container, named, labelled and reachable on the network by its role."""
    container = LoopbackContainer(IMAGE, name=NAME[role], network=network, network_aliases=[role])
    container.with_bind_ports(CONTAINER_PORT[role], HOST_PORT[role])
    container.with_kwargs(hostname=role, labels={LABEL: role})  # one call: with_kwargs replaces, it does not add
    if role == "broker":
        return container.with_envs(**_broker_environment())
    return container.with_command(_connect_command())


def _network(client: DockerClient) -> Network:
    """The stack's private network, created on first use and found again by its name afterwards."""
    network = Network(docker_network_kw={"labels": {LABEL: "network"}})
    network.name = NETWORK  # testcontainers names a network at random; ikkai's must be found by a later process
    if not _networks(client):
        network.create()
    return network


def _networks(client: DockerClient) -> list[Any]:
    """The stack's network, if there is one (by its exact name: Docker's name filter also matches longer names)."""
    return [n for n in client.client.networks.list(names=[NETWORK]) if n.name == NETWORK]


def _labelled(client: DockerClient) -> dict[str, Any]:
    """ikkai's containers by role, running or not (docker SDK objects)."""
    return {c.labels[LABEL]: c for c in client.client.containers.list(all=True, filters={"label": LABEL})}


class DockerStack:
    def __init__(self, progress: TextIO = sys.stderr) -> None:
        self.progress = progress

    def endpoints(self) -> Endpoints | None:
        running = {role for role, c in _labelled(engine()).items() if c.status == "running"}
        if {"broker", "connect"} - running:
            return None
        return Endpoints(f"{HOST}:{HOST_PORT['broker']}", f"http://{HOST}:{HOST_PORT['connect']}", runtime="docker")

    def _components(self, endpoints: Endpoints | None) -> list[ComponentStatus]:
        broker = endpoints is not None and broker_answers(KafkaContext(endpoints.bootstrap_servers))
        connect = endpoints is not None and connect_plugins(endpoints.connect_url) is not None
        return [ComponentStatus("broker", [], broker, Path("-")), ComponentStatus("connect", [], connect, Path("-"))]

    def status(self) -> StackStatus:
        endpoints = self.endpoints()
        return StackStatus(Path("-"), endpoints, self._components(endpoints))

    def up(self) -> Endpoints:
        client = engine()
        testcontainers_config.ryuk_disabled = True  # the stack outlives this process (see the module docstring)
        network = _network(client)
        present = _labelled(client)
        for role in ("broker", "connect"):
            existing = present.get(role)
            if existing is not None and existing.status == "running":
                continue
            if existing is not None:  # left stopped by a crash or a reboot: start clean, as the embedded stack does
                self.progress.write(f"removing the stopped {NAME[role]}\n")
                existing.remove(force=True)
            self.progress.write(f"starting {NAME[role]} from {IMAGE} (pulled first if missing)\n")
            _container(role, network).start()
        endpoints = self.endpoints()
        if endpoints is None:
            raise StackError("docker", "the containers stopped right after they started",
                             fix=f"docker logs {NAME['broker']} / {NAME['connect']}")  # fmt: skip
        deadline = time.monotonic() + READY_S
        while not all(c.healthy for c in self._components(endpoints)):
            if time.monotonic() > deadline:
                raise StackError("docker", f"containers not ready after {READY_S} s",
                                 fix=f"docker logs {NAME['broker']} / {NAME['connect']}")  # fmt: skip
            time.sleep(1)
        return endpoints

    def down(self, *, purge: bool = False) -> list[int]:
        """Remove the stack's containers and its network; no process of this machine is stopped (none is ours)."""
        client = engine()
        for role, container in sorted(_labelled(client).items()):
            self.progress.write(f"removing {NAME.get(role, container.name)}\n")
            container.remove(force=True)
        for network in _networks(client):
            network.remove()
        return []
