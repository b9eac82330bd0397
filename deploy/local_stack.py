"""The embedded stack: one KRaft broker and one Kafka Connect distributed worker on loopback.

Everything lives under one home folder::

    <home>/stack.json          ports and cluster id (kept across down/up, so endpoints stay stable)
    <home>/config/             rendered server.properties, connect-distributed.properties, log4j2
    <home>/kafka/data/         the broker's log.dirs (KRaft metadata included)
    <home>/logs/               broker.log, connect.log (log4j2) and *.out (JVM stdout/stderr)

The processes are found by their command line (deploy/processes.py), not by trusting a pid
file, so ``up`` after a crash notices the half-dead stack, stops what is left and starts
clean, and ``down`` leaves no process of this home behind.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from deploy import processes
from deploy.artifacts import JarSet, ensure_jars
from deploy.connect_plugins import ensure_ikkai_plugins
from deploy.errors import PortInUseError, StackError
from deploy.local_plugins import local_plugin_dirs_for_stack
from deploy.ports import choose_ports, ephemeral_range, port_is_free, reserved_ports
from deploy.prerequisites import check_java
from deploy.probes import broker_answers, connect_plugins
from deploy.settings import Endpoints
from deploy.stack_config import (
    HOST,
    Ports,
    bootstrap_servers,
    broker_properties,
    connect_properties,
    connect_url,
    log4j2_properties,
    render_properties,
)

BROKER = "broker"
CONNECT = "connect"
COMPONENTS = (BROKER, CONNECT)

BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"

READY_TIMEOUT = {BROKER: 90.0, CONNECT: 180.0}
STOP_GRACE = {CONNECT: 20.0, BROKER: 30.0}


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pids: list[int]
    healthy: bool
    log: Path

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "pids": self.pids, "healthy": self.healthy, "log": str(self.log)}


@dataclass(frozen=True)
class StackStatus:
    home: Path
    endpoints: Endpoints | None
    components: list[ComponentStatus] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return bool(self.components) and all(c.healthy and len(c.pids) <= 1 for c in self.components)

    @property
    def stopped(self) -> bool:
        return all(not c.pids for c in self.components)

    def as_dict(self) -> dict[str, object]:
        return {
            "home": str(self.home),
            "state": "running" if self.running else "stopped" if self.stopped else "degraded",
            **(self.endpoints.as_dict() if self.endpoints else {"runtime": "local"}),
            "components": [c.as_dict() for c in self.components],
        }


class LocalStack:
    """Start, inspect and stop the embedded stack rooted at ``home``."""

    def __init__(
        self,
        home: Path,
        jars_dir: Path,
        *,
        broker_port: int | None = None,
        connect_port: int | None = None,
        heap: str = "1g",
        extra_plugin_dirs: tuple[Path, ...] = (),
        progress: TextIO = sys.stderr,
    ) -> None:
        self.home = home.resolve()
        self.jars_dir = jars_dir
        self.requested = {BROKER: broker_port, CONNECT: connect_port}
        self.heap = heap
        self.extra_plugin_dirs = extra_plugin_dirs
        self.progress = progress

    # -- paths ---------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.home / "stack.json"

    @property
    def config_dir(self) -> Path:
        return self.home / "config"

    @property
    def data_dir(self) -> Path:
        return self.home / "kafka" / "data"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    def log_file(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    # -- public API ----------------------------------------------------------------------------

    def endpoints(self) -> Endpoints | None:
        ports = self._saved_ports()
        if ports is None:
            return None
        return Endpoints(bootstrap_servers(ports), connect_url(ports), runtime="local")

    def status(self) -> StackStatus:
        live = processes.stack_processes(self.home)
        endpoints = self.endpoints()
        components = []
        for name in COMPONENTS:
            pids = sorted(live.get(name, []))
            healthy = bool(pids) and endpoints is not None and self._answers(name, endpoints)
            components.append(ComponentStatus(name, pids, healthy, self.log_file(name)))
        return StackStatus(self.home, endpoints, components)

    def up(self) -> Endpoints:
        """Bring the stack to running; a no-op (bar a health check) when it already is."""
        current = self.status()
        if current.running and current.endpoints:
            self._say("stack already up")
            return current.endpoints
        if not current.stopped:
            dead = [c.name for c in current.components if not c.pids]
            self._say(
                f"previous stack in {self.home} is not healthy "
                f"({', '.join(dead) + ' gone' if dead else 'not answering'}); stopping what is left"
            )
            self._stop_all()
        ports = self._choose_ports()  # before anything slow: a taken port fails at once
        java = check_java()
        jars = ensure_jars(self.jars_dir, progress=self.progress)
        self._write_state(ports)
        self._write_configs(ports, jars)
        self._format_storage(java.executable, jars)
        self._start(BROKER, java.executable, jars, ports)
        self._start(CONNECT, java.executable, jars, ports)
        endpoints = self.endpoints()
        assert endpoints is not None
        return endpoints

    def down(self, *, purge: bool = False) -> list[int]:
        """Stop every process of this home (Connect first); with ``purge`` also delete its data."""
        stopped = self._stop_all()
        if purge:
            for path in (self.config_dir, self.home / "kafka", self.logs_dir, self.state_file):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        return stopped

    def kill(self, component: str, sig: signal.Signals = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to one component (chaos tests, the demo's worker restart)."""
        pids = processes.stack_processes(self.home).get(component, [])
        for pid in pids:
            processes.signal_group(pid, sig)
        if sig == signal.SIGKILL and not processes.wait_exited(pids, 30):  # every thread: its ports are free
            raise StackError(component, f"still alive 30 s after {sig.name}")
        return pids

    def start(self, component: str) -> None:
        """Start one stopped component again on its recorded ports."""
        ports = self._saved_ports()
        if ports is None:
            raise StackError(component, "the stack was never started here", fix="run `ikkai stack up` first")
        if processes.stack_processes(self.home).get(component):
            return
        self._check_ports_free(component, ports)  # before the JVM: a taken port can never be bound
        java = check_java()
        jars = ensure_jars(self.jars_dir, progress=self.progress)
        self._write_configs(ports, jars)
        self._start(component, java.executable, jars, ports)

    # -- steps ---------------------------------------------------------------------------------

    def _say(self, message: str) -> None:
        self.progress.write(f"{message}\n")
        self.progress.flush()

    def _answers(self, component: str, endpoints: Endpoints) -> bool:
        if component == BROKER:
            return broker_answers(endpoints.bootstrap_servers)
        plugins = connect_plugins(endpoints.connect_url)
        return plugins is not None and FILE_SOURCE in plugins

    def _saved_ports(self) -> Ports | None:
        try:
            state = json.loads(self.state_file.read_text())
            return Ports(**state["ports"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _choose_ports(self) -> Ports:
        """Requested ports must be free; otherwise reuse last run's ports if free and outside the kernel's
        ephemeral range, else pick new ones outside it (deploy/ports.py says why)."""
        previous, ephemeral = self._saved_ports(), ephemeral_range()
        chosen = choose_ports(self.requested, previous, ephemeral=ephemeral, reserved=reserved_ports())
        for role, port in chosen.as_dict().items():
            old = previous.as_dict()[role] if previous else None
            if old in ephemeral and old != port:
                self._say(
                    f"{role} port {old} is inside the kernel's ephemeral range {ephemeral}, where an outbound "
                    f"connection may take it while the stack is down; moving it to {port}"
                )
            elif self.requested.get(role) in ephemeral:
                self._say(
                    f"note: {role} port {port} is inside the kernel's ephemeral range {ephemeral}: an outbound "
                    f"connection may take it while the {role} is down (omit --{role}-port to pick one outside it)"
                )
        return chosen

    def _check_ports_free(self, component: str, ports: Ports) -> None:
        roles = (BROKER, "controller") if component == BROKER else (CONNECT,)
        for role in roles:
            port = ports.as_dict()[role]
            if not port_is_free(port):
                raise PortInUseError(
                    HOST, port, role,
                    fix=f"another process holds it (ss -ltnp 'sport = :{port}' shows which): stop it, or move "
                        f"the stack to free ports with `ikkai stack --home {self.home} down` and "
                        f"`ikkai stack --home {self.home} up`",
                )  # fmt: skip

    def _write_state(self, ports: Ports) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            state = {}
        state["ports"] = ports.as_dict()
        state.setdefault("cluster_id", _new_cluster_id())
        self.state_file.write_text(json.dumps(state, indent=2) + "\n")

    def _write_configs(self, ports: Ports, jars: JarSet) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        header = "written by ikkai (deploy/local_stack.py); edits are overwritten on the next `ikkai stack up`"
        files = {
            "server.properties": broker_properties(ports, self.data_dir),
            "connect-distributed.properties": connect_properties(
                ports,
                [
                    jars.plugins,
                    ensure_ikkai_plugins(self.jars_dir, jars),
                    *local_plugin_dirs_for_stack(self.jars_dir, progress=self.progress),
                    *self.extra_plugin_dirs,
                ],
            ),
            f"log4j2-{BROKER}.properties": log4j2_properties(self.log_file(BROKER)),
            f"log4j2-{CONNECT}.properties": log4j2_properties(self.log_file(CONNECT)),
        }
        for name, properties in files.items():
            (self.config_dir / name).write_text(render_properties(properties, header))

    def _format_storage(self, java: Path, jars: JarSet) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = json.loads(self.state_file.read_text())["cluster_id"]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        result = processes.run_java(
            java,
            classpath=jars.kafka_classpath(),
            main_class=STORAGE_TOOL,
            args=[
                "format",
                "--cluster-id",
                cluster_id,
                "--config",
                str(self.config_dir / "server.properties"),
                "--ignore-formatted",
            ],
            jvm_options=[f"-Dlog4j2.configurationFile={self.config_dir / f'log4j2-{BROKER}.properties'}"],
        )
        if result.returncode != 0:
            raise StackError(
                "storage format",
                (result.stderr or result.stdout).strip().splitlines()[-1]
                if (result.stderr or result.stdout).strip()
                else f"exit {result.returncode}",
                fix=f"run `ikkai stack down --purge` to start from empty storage in {self.data_dir}",
            )

    def _jvm_options(self, component: str) -> list[str]:
        return [
            "-Xms128m", f"-Xmx{self.heap}",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.config_dir / f'log4j2-{component}.properties'}",
            f"-Dkafka.logs.dir={self.logs_dir}",
        ]  # fmt: skip

    def _start(self, component: str, java: Path, jars: JarSet, ports: Ports) -> None:
        config = "server.properties" if component == BROKER else "connect-distributed.properties"
        main_class = BROKER_MAIN if component == BROKER else CONNECT_MAIN
        address = bootstrap_servers(ports) if component == BROKER else connect_url(ports)
        self._say(f"starting {component} on {address}")
        started = time.monotonic()
        process = processes.start_java(
            java,
            home=self.home,
            component=component,
            main_class=main_class,
            classpath=jars.kafka_classpath(),
            args=[str(self.config_dir / config)],
            jvm_options=self._jvm_options(component),
            output=self.logs_dir / f"{component}.out",
        )
        endpoints = Endpoints(bootstrap_servers(ports), connect_url(ports), runtime="local")
        self._wait_ready(component, process, lambda: self._answers(component, endpoints), started)
        self._say(f"{component} ready in {time.monotonic() - started:.1f}s (pid {process.pid})")

    def _wait_ready(
        self, component: str, process: subprocess.Popen[bytes], ready: Callable[[], bool], started: float
    ) -> None:
        deadline = started + READY_TIMEOUT[component]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise self._startup_failure(component, f"exited with code {process.returncode} during start-up")
            if ready():
                return
            time.sleep(0.25)
        processes.stop(process.pid, self.home, component, grace_seconds=5)
        raise self._startup_failure(component, f"not ready after {READY_TIMEOUT[component]:.0f}s")

    def _startup_failure(self, component: str, problem: str) -> Exception:
        log = self.log_file(component)
        text = ""
        for path in (log, self.logs_dir / f"{component}.out"):
            if path.exists():
                text += path.read_text(errors="replace")
        if "Address already in use" in text:
            ports = self._saved_ports()
            port = (ports.broker if component == BROKER else ports.connect) if ports else 0
            return PortInUseError(
                HOST, port, component,
                fix="another process took it during start-up; run `ikkai stack up` again to pick free ports",
            )  # fmt: skip
        errors = [line for line in text.splitlines() if " ERROR " in line or "Exception" in line]
        detail = f"; last error: {errors[-1].strip()[:300]}" if errors else ""
        return StackError(component, problem + detail, log=log)

    def _stop_all(self) -> list[int]:
        stopped: list[int] = []
        for component in (CONNECT, BROKER):  # Connect first: it needs the broker to leave cleanly
            for pid in processes.stack_processes(self.home).get(component, []):
                processes.stop(pid, self.home, component, grace_seconds=STOP_GRACE[component])
                stopped.append(pid)
        for component, pids in processes.stack_processes(self.home).items():  # anything unexpected
            for pid in pids:
                processes.stop(pid, self.home, component, grace_seconds=5)
                stopped.append(pid)
        return stopped


def _new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as StorageTool makes).

    Never one that starts with '-' (1 in 64 do): kafka-storage would read it as an option and fail
    with "expected one argument", as Kafka's own Uuid.randomUuid avoids too.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
