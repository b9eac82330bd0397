"""The docker runtime, without a Docker engine: what it asks Docker for (a tiny fake of the SDK records it).

The plaintext broker and the Connect REST API ask no one who they are, so their ports are published on
the host's loopback only, never on every interface (Docker's default for a bare port number); the
worker runs with the embedded stack's provider and override restrictions.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from stack import docker_stack
from stack.docker_stack import DockerStack


class _Containers:
    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}

    def list(self, **_: object) -> list[object]:
        return []

    def run(self, image: str, **options: Any) -> None:
        self.runs[options["name"]] = options


class _Networks:
    def list(self, **_: object) -> list[object]:
        return [object()]


class _Docker:
    def __init__(self) -> None:
        self.containers = _Containers()
        self.networks = _Networks()


@pytest.fixture
def docker(monkeypatch: pytest.MonkeyPatch) -> _Docker:
    fake = _Docker()
    monkeypatch.setattr(docker_stack, "docker_client", lambda: fake)
    monkeypatch.setattr(docker_stack, "broker_answers", lambda *_, **__: True)
    monkeypatch.setattr(docker_stack, "connect_plugins", lambda *_, **__: [])
    monkeypatch.setattr(DockerStack, "endpoints", lambda self: docker_stack.Endpoints("b", "c", runtime="docker"))
    return fake


def test_the_containers_are_published_on_loopback_only(docker: _Docker) -> None:
    DockerStack(progress=io.StringIO()).up()
    published = {name: run["ports"] for name, run in docker.containers.runs.items()}
    assert set(published) == {"ikkai-broker", "ikkai-connect"}
    bindings = [binding for ports in published.values() for binding in ports.values()]
    assert bindings == [
        ("127.0.0.1", docker_stack.HOST_PORT["broker"]),
        ("127.0.0.1", docker_stack.HOST_PORT["connect"]),
    ]


def test_the_worker_in_its_container_restricts_providers_and_overrides(docker: _Docker) -> None:
    DockerStack(progress=io.StringIO()).up()
    script = docker.containers.runs["ikkai-connect"]["command"][-1]
    assert "connector.client.config.override.policy=Allowlist" in script
    assert "config.providers.file.param.allowed.paths=/tmp\n" in script
    assert "config.providers.dir.param.allowed.paths=/tmp\n" in script
    assert "config.providers.env.param.allowlist.pattern=" in script
