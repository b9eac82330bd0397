"""The docker runtime against a real Docker engine, driven as a user drives it: ``ikkai stack --runtime docker up``
in a process of its own, then a produce and a read_committed consume through the published broker port, the
Connect REST root answering, the ports bound on the host's loopback only, ``status`` from a later process once the
first has long exited (no reaper took the containers), and ``down`` leaving no container and no network.

Marked ``docker``: they run where an engine answers, ``pytest -m docker``. ikkai's development and CI machines
have none; there the module's ``engine`` fixture skips every test with the reason (``-ra`` prints it), never a
silent pass. Not also marked ``integration``: that marker means the embedded stack, and tests/conftest.py fails a
CI run in which any ``integration`` test was skipped, which this one always is on CI's engine-less machines.

The runtime has fixed container names and host ports (one docker stack per engine), so the whole life is one test
(safe under any pytest-xdist distribution), and it refuses to touch a docker stack of ikkai that is already there.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Consumer, Producer
from testcontainers.core.docker_client import DockerClient

from ikkai.contract.kafka import KafkaContext, ensure_topics
from stack import docker_stack
from stack.errors import StackError
from tests.cli.cli_runner import run_ikkai

pytestmark = [pytest.mark.docker]

# Ryuk, had it been started, would reap the containers RYUK_RECONNECTION_TIMEOUT (10 s by default) after the
# process that started them is gone: status is asked only after that.
REAPER_GRACE_S = 15
TOPIC = "docker.check"


def _labelled(engine: DockerClient) -> list[Any]:
    return list(engine.client.containers.list(all=True, filters={"label": docker_stack.LABEL}))


@pytest.fixture(scope="module", autouse=True)
def engine() -> DockerClient:
    try:
        client = docker_stack.engine(timeout=5)
    except StackError as exc:
        cause = exc.__cause__
        pytest.skip(
            f"no Docker engine answers here ({type(cause).__name__}: {cause}): the docker runtime's tests run where "
            "one does"
        )
    if _labelled(client):
        pytest.skip(
            "a docker stack of ikkai is already on this engine and these tests would remove it: "
            "`ikkai stack --runtime docker down` first"
        )
    return client


def _round_trip(bootstrap_servers: str) -> list[tuple[bytes | None, bytes | None]]:
    """Produce one record through the published port and read it back as a read_committed consumer."""
    kafka = KafkaContext(bootstrap_servers)
    ensure_topics(kafka, [TOPIC], 1)
    producer = Producer(kafka.producer_config())
    producer.produce(TOPIC, key=b"payment-1", value=b"through the published port")
    assert producer.flush(30) == 0
    consumer = Consumer(kafka.consumer_config("ikkai-docker-check", **{"auto.offset.reset": "earliest"}))
    seen: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                seen.append((message.key(), message.value()))
    finally:
        consumer.close()
    return seen


def test_up_serves_on_loopback_outlives_its_process_and_down_leaves_no_container(
    engine: DockerClient, tmp_path: Path
) -> None:
    home = {"IKKAI_HOME": str(tmp_path)}  # the docker runtime keeps nothing there; never the user's ~/.ikkai anyway
    up = run_ikkai("stack", "--runtime", "docker", "up", "-o", "json", env=home, timeout=900)
    up_exited = time.monotonic()
    try:
        assert up.returncode == 0, up.stderr
        endpoints = json.loads(up.stdout)
        assert endpoints["runtime"] == "docker"
        assert endpoints["bootstrap_servers"] == f"127.0.0.1:{docker_stack.HOST_PORT['broker']}"

        assert _round_trip(endpoints["bootstrap_servers"]) == [(b"payment-1", b"through the published port")]

        root = requests.get(endpoints["connect_url"] + "/", timeout=10)
        assert root.status_code == 200, root.text
        assert "version" in root.json()

        containers = _labelled(engine)
        assert sorted(c.name for c in containers) == ["ikkai-broker", "ikkai-connect"]
        for container in containers:  # what the engine really bound: the host's loopback, never every interface
            bindings = [b for port in container.attrs["HostConfig"]["PortBindings"].values() for b in port]
            assert bindings and all(b["HostIp"] == "127.0.0.1" for b in bindings), (container.name, bindings)

        time.sleep(max(0.0, up_exited + REAPER_GRACE_S - time.monotonic()))
        status = run_ikkai("stack", "--runtime", "docker", "status", "-o", "json", env=home)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["state"] == "running"
        assert {c["name"]: c["healthy"] for c in state["components"]} == {"broker": True, "connect": True}
    finally:
        down = run_ikkai("stack", "--runtime", "docker", "down", env=home)
    assert down.returncode == 0, down.stderr
    assert _labelled(engine) == []
    assert engine.client.networks.list(filters={"label": docker_stack.LABEL}) == []
