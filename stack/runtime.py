"""Which stack ikkai talks to: the embedded one, one from Docker, or an existing cluster.

All three answer the same small protocol, so the CLI, the demo and the tests never care
which one they got. ``select_stack`` makes the choice: an external cluster named in the
environment always wins (nothing is started), then the ``runtime`` asked for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Protocol, TextIO

from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints, endpoints_connect_auth, external_endpoints, ikkai_home, jars_dir
from stack.errors import StackError
from stack.local_stack import LocalStack
from stack.probes import broker_answers, connect_plugins
from stack.shape import AS_RECORDED, StackOptions
from stack.status import ComponentStatus, StackStatus

RUNTIMES = ("local", "docker")


class Stack(Protocol):
    def up(self) -> Endpoints: ...
    def down(self, *, purge: bool = False) -> list[int]: ...
    def status(self) -> StackStatus: ...
    def endpoints(self) -> Endpoints | None: ...


class ExternalStack:
    """An existing Kafka + Kafka Connect cluster: probed, never started or stopped."""

    def __init__(self, endpoints: Endpoints, progress: TextIO = sys.stderr) -> None:
        self._endpoints = endpoints
        self.progress = progress

    def endpoints(self) -> Endpoints:
        return self._endpoints

    def status(self) -> StackStatus:
        cluster = KafkaContext.recorded(self._endpoints)
        broker = broker_answers(cluster, timeout=5)
        auth = endpoints_connect_auth(self._endpoints)
        connect = connect_plugins(self._endpoints.connect_url, timeout=5, auth=auth) is not None
        return StackStatus(
            Path("-"),
            self._endpoints,
            [ComponentStatus("broker", [], broker, Path("-")), ComponentStatus("connect", [], connect, Path("-"))],
        )

    def up(self) -> Endpoints:
        self.progress.write(
            f"using the existing cluster named by the environment "
            f"({self._endpoints.bootstrap_servers}, {self._endpoints.connect_url}); nothing started\n"
        )
        for component in self.status().components:
            if not component.healthy:
                where = self._endpoints.bootstrap_servers if component.name == "broker" else self._endpoints.connect_url
                raise StackError(
                    component.name,
                    f"the external {component.name} at {where} does not answer",
                    fix="check IKKAI_BOOTSTRAP_SERVERS / IKKAI_CONNECT_URL, or unset both to use the embedded stack",
                )
        return self._endpoints

    def down(self, *, purge: bool = False) -> list[int]:
        self.progress.write("external cluster: nothing to stop\n")
        return []


def select_stack(
    runtime: str = "local",
    *,
    home: Path | None = None,
    options: StackOptions = AS_RECORDED,
    progress: TextIO = sys.stderr,
) -> Stack:
    """The stack ``runtime`` names, as ``options`` ask; only the embedded stack has a choice of its brokers,
    security, schema registry and Spark and Connect workers (the others refuse them)."""
    brokers, secure, registry = options.brokers, options.secure, options.registry
    external = external_endpoints()
    if external is not None:
        return ExternalStack(external, progress)
    if brokers not in (None, 1) and runtime != "local":
        raise StackError(
            "stack", f"--brokers {brokers} is for the embedded stack only", fix="use --runtime local, or omit --brokers"
        )
    workers = (("--spark-workers", options.spark_workers, 0), ("--connect-workers", options.connect_workers, 1))
    for flag, count, default in workers:
        if count not in (None, default) and runtime != "local":
            raise StackError("stack", f"{flag} {count} is for the embedded stack only",
                             fix=f"use --runtime local, or omit {flag}")  # fmt: skip
    if secure and runtime != "local":
        raise StackError(
            "stack", "--secure is for the embedded stack only",
            fix="for an existing cluster, name its client settings in IKKAI_KAFKA_CONFIG and IKKAI_CONNECT_CREDENTIALS",
        )  # fmt: skip
    if registry and runtime != "local":
        raise StackError("stack", "--registry is for the embedded stack only",
                         fix="for an existing registry, export IKKAI_SCHEMA_REGISTRY_URL")  # fmt: skip
    if runtime == "docker":
        from stack.docker_stack import DockerStack  # imported lazily: needs the docker SDK

        return DockerStack(progress=progress)
    return LocalStack(home or ikkai_home(), jars_dir(), options, progress=progress)
