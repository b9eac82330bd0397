"""The docker runtime, without a Docker engine: what it asks Docker for, through testcontainers.

A tiny fake of the docker SDK (``docker.from_env``, which testcontainers' Docker client wraps) records what
testcontainers asks the engine for, so these tests see the request as Docker would get it. The plaintext broker
and the Connect REST API ask no one who they are, so every published port binds the host's loopback only, never
every interface (Docker's default for a bare port number); the worker runs with the embedded stack's provider and
override restrictions; no reaper is started, since the stack must outlive the process that starts it; ``down``
finds the containers by label and leaves none.
"""

from __future__ import annotations

import io
import itertools
from types import SimpleNamespace
from typing import Any

import docker
import pytest
from docker.errors import DockerException
from docker.utils import convert_port_bindings
from testcontainers.core.config import testcontainers_config

from stack import docker_stack
from stack.docker_stack import DockerStack
from stack.errors import StackError

_ids = itertools.count(1)


class _Container:
    def __init__(self, engine: _Engine, image: str, options: dict[str, Any]) -> None:
        self.engine, self.image, self.options = engine, image, options
        self.name: str = options["name"]
        self.labels: dict[str, str] = options["labels"]
        self.id = self.short_id = f"c{next(_ids)}"
        self.status = "created"

    def start(self) -> None:
        self.status = "running"

    def remove(self, **_: object) -> None:
        self.status = "removed"
        self.engine.removed.append(self.name)


class _Network:
    def __init__(self, engine: _Engine, name: str, labels: dict[str, str]) -> None:
        self.engine, self.name, self.labels = engine, name, labels
        self.removed = False

    def remove(self) -> None:
        self.removed = True
        self.engine.networks_removed.append(self.name)


class _Engine:
    """docker-py's client, as testcontainers holds it: what is created, listed and removed."""

    def __init__(self) -> None:
        self.api = SimpleNamespace(headers={}, base_url="http+docker://localhost")
        self.created: list[_Container] = []
        self.removed: list[str] = []
        self.made_networks: list[_Network] = []
        self.networks_removed: list[str] = []
        self.containers, self.networks, self.images = self, self._Networks(self), self._Images()

    def ping(self) -> bool:
        return True

    # containers
    def create(self, image: str, **options: Any) -> _Container:
        assert image != testcontainers_config.ryuk_image, "a reaper would remove the stack when the CLI exits"
        container = _Container(self, image, options)
        self.created.append(container)
        return container

    def list(self, *, all: bool = False, filters: dict[str, str]) -> list[_Container]:
        assert all, "a stopped container of the stack must be found too (its name is taken until it is removed)"
        assert filters == {"label": docker_stack.LABEL}
        return [c for c in self.created if c.status != "removed"]

    class _Networks:
        def __init__(self, engine: _Engine) -> None:
            self.engine = engine

        def list(self, **_: object) -> list[_Network]:
            return [n for n in self.engine.made_networks if not n.removed]

        def create(self, name: str, **options: Any) -> _Network:
            network = _Network(self.engine, name, options["labels"])
            self.engine.made_networks.append(network)
            return network

    class _Images:
        def get(self, image: str) -> object:
            return object()


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> _Engine:
    fake = _Engine()
    monkeypatch.setattr(docker, "from_env", lambda **_: fake)
    monkeypatch.setattr(testcontainers_config, "ryuk_disabled", False)  # as a fresh CLI process has it
    monkeypatch.setattr(docker_stack, "broker_answers", lambda *_, **__: True)
    monkeypatch.setattr(docker_stack, "connect_plugins", lambda *_, **__: [])
    return fake


def _created(engine: _Engine) -> dict[str, dict[str, Any]]:
    return {c.name: c.options for c in engine.created}


def test_the_containers_are_published_on_loopback_only(engine: _Engine) -> None:
    DockerStack(progress=io.StringIO()).up()
    created = _created(engine)
    assert set(created) == {"ikkai-broker", "ikkai-connect"}
    # What the docker SDK sends the engine as PortBindings: HostIp 127.0.0.1, never "" (every interface).
    bindings = {name: convert_port_bindings(options["ports"]) for name, options in created.items()}
    assert bindings == {
        "ikkai-broker": {"19092/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(docker_stack.HOST_PORT["broker"])}]},
        "ikkai-connect": {"8083/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(docker_stack.HOST_PORT["connect"])}]},
    }


def test_the_worker_in_its_container_restricts_providers_and_overrides(engine: _Engine) -> None:
    DockerStack(progress=io.StringIO()).up()
    script = _created(engine)["ikkai-connect"]["command"][-1]
    assert "connector.client.config.override.policy=Allowlist" in script
    assert "config.providers.file.param.allowed.paths=/tmp\n" in script
    assert "config.providers.dir.param.allowed.paths=/tmp\n" in script
    assert "config.providers.env.param.allowlist.pattern=" in script


def test_both_containers_join_the_stack_network_labelled_and_no_reaper_is_started(engine: _Engine) -> None:
    DockerStack(progress=io.StringIO()).up()
    assert [n.name for n in engine.made_networks] == [docker_stack.NETWORK]
    assert engine.made_networks[0].labels[docker_stack.LABEL] == "network"
    for role in ("broker", "connect"):
        options = _created(engine)[docker_stack.NAME[role]]
        assert options["network"] == docker_stack.NETWORK
        assert options["labels"][docker_stack.LABEL] == role
        assert options["hostname"] == role
    assert {c.image for c in engine.created} == {docker_stack.IMAGE}  # no Ryuk container
    assert testcontainers_config.ryuk_disabled


def test_up_on_a_running_stack_starts_nothing_and_down_leaves_no_container(engine: _Engine) -> None:
    stack = DockerStack(progress=io.StringIO())
    first = stack.up()
    assert stack.up() == first
    assert len(engine.created) == 2 and len(engine.made_networks) == 1
    assert stack.status().running
    assert stack.down() == []
    assert sorted(engine.removed) == ["ikkai-broker", "ikkai-connect"]
    assert engine.networks_removed == [docker_stack.NETWORK]
    assert stack.endpoints() is None


def test_a_container_left_stopped_is_replaced(engine: _Engine) -> None:
    stack = DockerStack(progress=io.StringIO())
    stack.up()
    engine.created[0].status = "exited"  # the broker, after a reboot
    stack.up()
    assert engine.removed == ["ikkai-broker"]
    assert [c.name for c in engine.created] == ["ikkai-broker", "ikkai-connect", "ikkai-broker"]


def test_no_engine_is_a_stack_error_that_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(**_: object) -> None:
        raise DockerException("Error while fetching server API version: connection refused")

    monkeypatch.setattr(docker, "from_env", refused)
    with pytest.raises(StackError, match="no Docker engine answers") as caught:
        DockerStack(progress=io.StringIO()).status()
    assert "--runtime local" in str(caught.value)
