"""The embedded stack: KRaft broker(s) and one Kafka Connect distributed worker on loopback.

One broker by default; ``brokers=3`` starts three combined broker+controller nodes (replication
factor 3, min.insync.replicas 2) for replication and broker-failure tests. Everything lives under
one home folder::

    <home>/stack.json          broker count, ports and cluster id (kept across down/up: stable endpoints)
    <home>/config/             rendered server.properties (server-<i>.properties per node of N > 1),
                               connect-distributed.properties, log4j2 per component
    <home>/kafka/data/         the broker's log.dirs (KRaft metadata included); kafka/data-<i>/ per node of N > 1
    <home>/logs/               broker.log (broker-<i>.log), connect.log (log4j2) and *.out (JVM stdout/stderr)
    <home>/schema-registry.json  with ``registry``: the local schema registry's port (stack/schema_registry.py)

The processes are found by their command line (stack/processes.py), not by trusting a pid
file, so ``up`` after a crash notices the half-dead stack, stops what is left and starts
clean, and ``down`` leaves no process of this home behind.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from ikkai.contract.kafka_security import SecurityConfig, librdkafka_settings
from ikkai.settings import Endpoints, endpoints_connect_auth
from stack import processes
from stack.artifacts import JarSet, ensure_jars
from stack.config_files import broker_config, write_configs
from stack.errors import PortInUseError, StackError
from stack.local_plugins import local_plugin_dirs_for_stack
from stack.ports import choose_ports, ephemeral_range, free_port, port_is_free, reserved_ports
from stack.prerequisites import check_java
from stack.probes import broker_answers, connect_plugins
from stack.schema_registry import REGISTRY, LocalSchemaRegistry
from stack.stack_config import BROKER as BROKER  # re-exported: callers name components by these
from stack.stack_config import CONNECT as CONNECT
from stack.stack_config import (
    CONTROLLER,
    HOST,
    NODE,
    Ports,
    bootstrap_servers,
    broker_components,
    broker_node_id,
)
from stack.stack_security import (
    SECURE_DIR,
    StackSecrets,
    broker_jvm_options,
    client_settings,
    connect_jvm_options,
    scram_credentials,
)
from stack.state import LISTENERS_KEY, StackHome
from stack.status import ComponentStatus, StackStatus

COMPONENTS = (BROKER, CONNECT)  # a one-broker stack's; ``LocalStack.components`` has the others'

BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"

READY_TIMEOUT = {BROKER: 90.0, CONNECT: 180.0}
STOP_GRACE = {CONNECT: 20.0, BROKER: 30.0}
EXTRA_LISTENERS = ("mtls", "oauth")


class LocalStack:
    """Start, inspect and stop the embedded stack rooted at ``home``."""

    def __init__(
        self,
        home: Path,
        jars_dir: Path,
        *,
        broker_port: int | None = None,
        connect_port: int | None = None,
        brokers: int | None = None,
        heap: str = "1g",
        extra_plugin_dirs: tuple[Path, ...] = (),
        progress: TextIO = sys.stderr,
        secure: bool | None = None,
        listener_ports: Mapping[str, int] | None = None,
        registry: bool | None = None,
        registry_port: int | None = None,
    ) -> None:
        """``brokers``: how many KRaft nodes ``up`` starts; None keeps the home's count (1 for a new home).
        ``secure``: SASL_SSL and an HTTPS, basic-auth Connect REST API; None keeps the home's choice.
        ``listener_ports``: a secured one-broker stack's ``mtls`` and ``oauth`` listener ports (default:
        last run's, else free ones)."""
        if brokers is not None:
            broker_components(brokers)  # at least one
        self.home = home.resolve()
        self._home = StackHome(self.home)
        self.jars_dir = jars_dir
        self.requested = {BROKER: broker_port, CONNECT: connect_port}
        self.requested_brokers = brokers
        self.heap = heap
        self.extra_plugin_dirs = extra_plugin_dirs
        self.progress = progress
        self.requested_secure = secure
        self.requested_listeners = dict(listener_ports or {})
        self.requested_registry = registry  # the local schema registry too; None keeps the home's choice
        self.registry_port = registry_port

    # -- paths (the home's, stack.state) ----------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self._home.state_file

    @property
    def config_dir(self) -> Path:
        return self._home.config_dir

    @property
    def data_dir(self) -> Path:
        return self._home.data_dir

    @property
    def logs_dir(self) -> Path:
        return self._home.logs_dir

    def log_file(self, component: str) -> Path:
        return self._home.log_file(component)

    def node_data_dir(self, component: str) -> Path:
        """A broker's log.dirs: ``kafka/data`` on a one-broker stack, ``kafka/data-<i>`` for node i of more."""
        return self._home.node_data_dir(component)

    def _server_properties(self, component: str) -> Path:
        return self._home.server_properties(component)

    # -- the cluster's shape -------------------------------------------------------------------

    @property
    def broker_count(self) -> int:
        """The brokers this home holds (from stack.json), else those asked for, else 1."""
        return self._saved_broker_count() or self.requested_brokers or 1

    @property
    def secure(self) -> bool:
        """Whether this home's stack is secured: as recorded once it exists, else as requested."""
        saved = self._home.saved_secure()
        return saved if saved is not None else bool(self.requested_secure)

    def stack_secrets(self) -> StackSecrets | None:
        """The secured stack's certificates and credentials (made on first use); None for a plaintext stack."""
        return self._home.secrets(self.secure)

    def secure_listeners(self) -> dict[str, str]:
        """A secured one-broker stack's extra listeners by name (``mtls``, ``oauth``): their ``host:port``."""
        return self._home.secure_listeners()

    @property
    def with_registry(self) -> bool:
        """Whether this home's stack runs the local schema registry: as asked, else as recorded, else not."""
        requested = self.requested_registry
        return requested if requested is not None else self._home.saved_registry()

    def schema_registry(self) -> LocalSchemaRegistry:
        return LocalSchemaRegistry(self.home, self.jars_dir, port=self.registry_port, progress=self.progress)

    @property
    def brokers(self) -> tuple[str, ...]:
        """The brokers' component names: ``("broker",)``, or ``("broker-1", ..., "broker-N")``."""
        return broker_components(self.broker_count)

    @property
    def components(self) -> tuple[str, ...]:
        return (*self.brokers, CONNECT)

    # -- public API ----------------------------------------------------------------------------

    def endpoints(self) -> Endpoints | None:
        return self._home.endpoints(secure=self.secure, registry=self.with_registry)

    def _endpoints(self, ports: Ports) -> Endpoints:
        return self._home.endpoints_at(ports, secure=self.secure)

    def status(self) -> StackStatus:
        live = processes.stack_processes(self.home)
        ports = self._saved_ports()
        components = []
        for name in self.components:
            pids = sorted(live.get(name, []))
            healthy = bool(pids) and ports is not None and self._answers(name, ports)
            components.append(ComponentStatus(name, pids, healthy, self.log_file(name)))
        if self.with_registry:
            registry = self.schema_registry().status()
            components.append(ComponentStatus(REGISTRY, registry.pids, registry.healthy, registry.log))
        return StackStatus(self.home, self.endpoints(), components)

    def up(self) -> Endpoints:
        """Bring the stack to running; a no-op (bar a health check) when it already is."""
        saved = self._saved_broker_count()
        if saved is not None and self.requested_brokers not in (None, saved):
            raise StackError(
                "stack",
                f"{self.home} holds a stack of {saved} broker(s), not {self.requested_brokers}: "
                "a KRaft cluster's storage cannot change its node count",
                fix=f"keep {saved} (omit --brokers), or delete it first with "
                f"`ikkai stack --home {self.home} down --purge`",
            )
        saved_secure = self._saved_state().get("secure")
        if (
            isinstance(saved_secure, bool)
            and self.requested_secure is not None
            and saved_secure != self.requested_secure
        ):
            kind = "a secured" if saved_secure else "a plaintext"
            raise StackError(
                "stack", f"{self.home} holds {kind} stack: its storage and clients were made that way",
                fix=f"omit --secure/--plaintext to keep it, or delete it first with "
                f"`ikkai stack --home {self.home} down --purge`",
            )  # fmt: skip
        current = self.status()
        current = dataclasses.replace(current, components=[c for c in current.components if c.name != REGISTRY])
        if current.running and current.endpoints:
            self._say("stack already up")
            return self._start_registry()
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
        for broker in self.brokers:
            self._format_storage(broker, java.executable, jars)
        # All nodes at once: a node of three is ready only once a quorum of controllers has formed.
        self._start(self.brokers, java.executable, jars, ports)
        self._start([CONNECT], java.executable, jars, ports)
        return self._start_registry()

    def down(self, *, purge: bool = False) -> list[int]:
        """Stop every process of this home (Connect first); with ``purge`` also delete its data."""
        stopped = self._stop_all()
        if purge:
            for path in (self.config_dir, self.home / "kafka", self.logs_dir, self.home / SECURE_DIR, self.state_file,
                         self.schema_registry().state_file):  # fmt: skip
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        return stopped

    def kill(self, component: str, sig: signal.Signals = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to one component (chaos tests, the demo's worker restart): ``connect``, ``broker``
        on a one-broker stack, ``broker-<i>`` on a stack of more (stack.chaos's ``ChaosStack.leader_of``
        and ``coordinator_of`` name the one that matters)."""
        self._check_component(component)
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
        self._check_component(component)
        if processes.stack_processes(self.home).get(component):
            return
        self._check_ports_free(component, ports)  # before the JVM: a taken port can never be bound
        java = check_java()
        jars = ensure_jars(self.jars_dir, progress=self.progress)
        self._write_configs(ports, jars, connect=component == CONNECT)
        self._start([component], java.executable, jars, ports)

    # -- steps ---------------------------------------------------------------------------------

    def _say(self, message: str) -> None:
        self.progress.write(f"{message}\n")
        self.progress.flush()

    def _start_registry(self) -> Endpoints:
        """With ``registry``: the local schema registry up (a no-op when it answers) and recorded; the endpoints."""
        registry = self.schema_registry()
        if self.requested_registry is False and registry.status().pids:
            self._say(f"stopping {REGISTRY} (--no-registry)")
            registry.down()
        if self.with_registry:
            started, fresh = time.monotonic(), not registry.status().healthy
            if fresh:
                self._say(f"starting {REGISTRY}")
            url = registry.up()
            if fresh:
                versions = _register_catalog(url)
                self._say(f"{REGISTRY} ready in {time.monotonic() - started:.1f}s on {url}; the catalog's {versions} "
                          "schema versions registered in catalog order (the same ids after every restart)")  # fmt: skip
        if self.requested_registry is not None:
            self._update_state(registry=self.requested_registry)
        endpoints = self.endpoints()
        assert endpoints is not None
        self._update_state(endpoints=endpoints.as_dict())  # for clients that read stack.json (the jobs)
        return endpoints

    def _update_state(self, **entries: object) -> None:
        self._home.update_state(**entries)

    def _check_component(self, component: str) -> None:
        if component not in self.components:
            raise StackError(component, f"no such component in {self.home}",
                             fix=f"name one of {', '.join(self.components)}")  # fmt: skip

    def _answers(self, component: str, ports: Ports) -> bool:
        stack = self.stack_secrets()
        client = librdkafka_settings(SecurityConfig(client_settings(stack), str(stack.dir))) if stack else {}
        if component == BROKER:
            return broker_answers(bootstrap_servers(ports), settings=client)
        if component != CONNECT:  # one node of several: it answers at its own address and is registered
            node_id = broker_node_id(component)
            return broker_answers(f"{HOST}:{ports.nodes[node_id - 1].broker}", node_id=node_id, settings=client)
        endpoints = self._endpoints(ports)
        plugins = connect_plugins(endpoints.connect_url, auth=endpoints_connect_auth(endpoints))
        return plugins is not None and FILE_SOURCE in plugins

    def _saved_state(self) -> dict[str, object]:
        return self._home.saved_state()

    def _saved_ports(self) -> Ports | None:
        return self._home.saved_ports()

    def _saved_broker_count(self) -> int | None:
        return self._home.saved_broker_count()

    def _choose_ports(self) -> Ports:
        """Requested ports must be free; otherwise reuse last run's ports if free and outside the kernel's
        ephemeral range, else pick new ones outside it (stack/ports.py says why)."""
        previous, ephemeral = self._saved_ports(), ephemeral_range()
        chosen = choose_ports(
            self.requested, previous, ephemeral=ephemeral, reserved=reserved_ports(), brokers=self.broker_count
        )
        for role, port in chosen.as_dict().items():
            old = previous.as_dict().get(role) if previous else None
            if old in ephemeral and old != port:
                self._say(
                    f"{role} port {old} is inside the kernel's ephemeral range {ephemeral}, where an outbound "
                    f"connection may take it while the stack is down; moving it to {port}"
                )
            elif port in ephemeral:  # only a pinned port can be
                flag = f"--{role.split('-')[0]}-port"
                self._say(
                    f"note: {role} port {port} is inside the kernel's ephemeral range {ephemeral}: an outbound "
                    f"connection may take it while the {role} is down (omit {flag} to pick one outside it)"
                )
        return chosen

    def _choose_listener_ports(self, ports: Ports, saved: dict[str, int]) -> dict[str, int]:
        """The MTLS and OAUTH listeners' ports: requested (must be free), else last run's if free, else new."""
        taken = set(ports.as_dict().values())
        chosen: dict[str, int] = {}
        for name in EXTRA_LISTENERS:
            port = self.requested_listeners.get(name)
            if port is not None and not port_is_free(port):
                raise PortInUseError(
                    HOST, port, f"{name} listener", fix=f"free it (ss -ltnp 'sport = :{port}' shows who holds it)"
                )
            if port is None:
                old = saved.get(name)
                free = isinstance(old, int) and old not in taken and port_is_free(old)
                port = old if free and isinstance(old, int) else free_port(avoid=taken)
            taken.add(port)
            chosen[name] = port
        return chosen

    def _check_ports_free(self, component: str, ports: Ports) -> None:
        roles = (CONNECT,) if component == CONNECT else (component, component.replace(BROKER, CONTROLLER, 1))
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
        state["brokers"] = len(ports.nodes)
        state["secure"] = self.secure
        if self.secure and len(ports.nodes) == 1:
            saved = state.get(LISTENERS_KEY)
            state[LISTENERS_KEY] = self._choose_listener_ports(ports, saved if isinstance(saved, dict) else {})
        state["endpoints"] = self._endpoints(ports).as_dict()
        state.setdefault("cluster_id", _new_cluster_id())
        self.state_file.write_text(json.dumps(state, indent=2) + "\n")

    def _write_configs(self, ports: Ports, jars: JarSet, *, connect: bool = True) -> None:
        """Every component's files; the brokers' only without ``connect`` (a broker restart builds no plugin)."""
        plugin_path = None
        if connect:
            built = local_plugin_dirs_for_stack(self.jars_dir, progress=self.progress)
            plugin_path = [jars.plugins, *built, *self.extra_plugin_dirs]
        write_configs(
            self._home, ports, self.stack_secrets(), plugin_path=plugin_path, scan_plugins=bool(self.extra_plugin_dirs)
        )

    def _broker_properties(self, ports: Ports, broker: str, node_id: int) -> dict[str, str]:
        return broker_config(self._home, ports, broker, node_id, self.stack_secrets())

    def _format_storage(self, broker: str, java: Path, jars: JarSet) -> None:
        data_dir = self.node_data_dir(broker)
        if (data_dir / "meta.properties").exists():
            return
        cluster_id = json.loads(self.state_file.read_text())["cluster_id"]
        data_dir.mkdir(parents=True, exist_ok=True)
        result = processes.run_java(
            java,
            classpath=jars.kafka_classpath(),
            main_class=STORAGE_TOOL,
            args=[
                "format",
                "--cluster-id",
                cluster_id,
                "--config",
                str(self._server_properties(broker)),
                "--ignore-formatted",
                *(scram_credentials(stack) if (stack := self.stack_secrets()) else []),
            ],
            jvm_options=[f"-Dlog4j2.configurationFile={self.config_dir / f'log4j2-{broker}.properties'}"],
        )
        if result.returncode != 0:
            raise StackError(
                "storage format" if broker == BROKER else f"{broker} storage format",
                (result.stderr or result.stdout).strip().splitlines()[-1]
                if (result.stderr or result.stdout).strip()
                else f"exit {result.returncode}",
                fix=f"run `ikkai stack down --purge` to start from empty storage in {data_dir}",
            )

    def _jvm_options(self, component: str) -> list[str]:
        stack = self.stack_secrets()
        security = [] if stack is None else connect_jvm_options(stack) if component == CONNECT else \
            broker_jvm_options(stack)  # fmt: skip
        return [*security,
            "-Xms128m", f"-Xmx{self.heap}",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.config_dir / f'log4j2-{component}.properties'}",
            f"-Dkafka.logs.dir={self.logs_dir}",
        ]  # fmt: skip

    def _start(self, components: Iterable[str], java: Path, jars: JarSet, ports: Ports) -> None:
        """Start ``components`` together, then wait until each answers."""
        started = time.monotonic()
        launched = []
        for component in components:
            if component == CONNECT:
                config, main_class, address = self.config_dir / "connect-distributed.properties", CONNECT_MAIN, \
                    self._endpoints(ports).connect_url  # fmt: skip
            else:
                port = ports.nodes[broker_node_id(component) - 1].broker
                config, main_class, address = self._server_properties(component), BROKER_MAIN, f"{HOST}:{port}"
            self._say(f"starting {component} on {address}")
            process = processes.start_java(
                java,
                home=self.home,
                component=component,
                main_class=main_class,
                classpath=jars.kafka_classpath(),
                args=[str(config)],
                jvm_options=self._jvm_options(component),
                output=self.logs_dir / f"{component}.out",
            )
            launched.append((component, process))
        for component, process in launched:
            self._wait_ready(component, process, lambda c=component: self._answers(c, ports), started)  # type: ignore[misc]
            self._say(f"{component} ready in {time.monotonic() - started:.1f}s (pid {process.pid})")
        if len(ports.nodes) > 1 and any(component != CONNECT for component, _ in launched):
            self._wait_all_registered(ports, started)

    def _wait_all_registered(self, ports: Ports, started: float) -> None:
        """Every broker, asked at its own address, lists every node: only then is a cluster of N ready.

        One node answering for itself is not enough: a topic of replication factor N needs all N
        registered (INVALID_REPLICATION_FACTOR otherwise), and a broker whose metadata still lacks a
        peer gives the next client a stale answer.
        """
        stack = self.stack_secrets()
        client = librdkafka_settings(SecurityConfig(client_settings(stack), str(stack.dir))) if stack else {}
        nodes = range(1, len(ports.nodes) + 1)
        deadline = started + READY_TIMEOUT[BROKER]
        while True:
            unknown = [
                (asked, node)
                for asked in nodes
                for node in nodes
                if not broker_answers(f"{HOST}:{ports.nodes[asked - 1].broker}", node_id=node, settings=client)
            ]
            if not unknown:
                self._say(f"all {len(ports.nodes)} brokers registered in {time.monotonic() - started:.1f}s")
                return
            if time.monotonic() > deadline:
                shown = ", ".join(f"broker-{asked} does not list broker-{node}" for asked, node in unknown[:3])
                raise StackError(
                    "cluster", f"not every broker registered after {READY_TIMEOUT[BROKER]:.0f}s: {shown}",
                    fix="check the brokers' logs (`ikkai stack status`) and that they reach each other",
                )  # fmt: skip
            time.sleep(0.25)

    def _wait_ready(
        self, component: str, process: subprocess.Popen[bytes], ready: Callable[[], bool], started: float
    ) -> None:
        deadline = started + READY_TIMEOUT[_kind(component)]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise self._startup_failure(component, f"exited with code {process.returncode} during start-up")
            if ready():
                return
            time.sleep(0.25)
        processes.stop(process.pid, self.home, component, grace_seconds=5)
        raise self._startup_failure(component, f"not ready after {READY_TIMEOUT[_kind(component)]:.0f}s")

    def _startup_failure(self, component: str, problem: str) -> Exception:
        log = self.log_file(component)
        text = ""
        for path in (log, self.logs_dir / f"{component}.out"):
            if path.exists():
                text += path.read_text(errors="replace")
        if "Address already in use" in text:
            ports = self._saved_ports()
            port = ports.as_dict().get(component, 0) if ports else 0
            return PortInUseError(
                HOST, port, component,
                fix="another process took it during start-up; run `ikkai stack up` again to pick free ports",
            )  # fmt: skip
        errors = [line for line in text.splitlines() if " ERROR " in line or "Exception" in line]
        detail = f"; last error: {errors[-1].strip()[:300]}" if errors else ""
        return StackError(component, problem + detail, log=log)

    def _stop_all(self) -> list[int]:
        # Connect first: it needs the brokers to leave cleanly. Brokers all at once: a node stopped after
        # the others could not reach a controller quorum for its clean shutdown, and would wait it out.
        stopped = self._stop([CONNECT]) + self._stop(self.brokers)
        return stopped + self._stop(processes.stack_processes(self.home), grace_seconds=5)  # anything unexpected

    def _stop(self, components: Iterable[str], grace_seconds: float | None = None) -> list[int]:
        live = processes.stack_processes(self.home)
        targets = [(component, pid) for component in components for pid in live.get(component, [])]
        if targets:
            with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                for component, pid in targets:
                    grace = STOP_GRACE.get(_kind(component), 5) if grace_seconds is None else grace_seconds
                    pool.submit(processes.stop, pid, self.home, component, grace_seconds=grace)
        return [pid for _, pid in targets]


def _register_catalog(url: str) -> int:
    """Register every schema version of the catalog, in order, into the empty registry at ``url``; how many.

    The registry keeps its schemas in memory and numbers them as they come: registered in one fixed
    order right after each start, the catalog's schemas get the same ids every time, so records kept
    in the stack's topics across ``down``/``up`` still name the schema they were written with.
    """
    try:
        from ikkai.contract.registry import RegistryCodec  # the registry extra
    except ImportError as exc:
        raise StackError(REGISTRY, f"the schema registry client cannot load: {exc}",
                         fix="pip install 'ikkai[registry]'") from exc  # fmt: skip
    from ikkai.contract.codec import default_codec

    codec = RegistryCodec(default_codec().catalog, {"url": url})
    try:
        return sum(len(ids) for ids in codec.register_catalog().values())
    finally:
        codec.close()


def _kind(component: str) -> str:
    """``broker`` for every broker, else the component's own name."""
    return BROKER if component == BROKER or NODE.fullmatch(component) else component


def _new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as StorageTool makes).

    Never one that starts with '-' (1 in 64 do): kafka-storage would read it as an option and fail
    with "expected one argument", as Kafka's own Uuid.randomUuid avoids too.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
