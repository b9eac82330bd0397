"""The embedded stack: KRaft broker(s), Kafka Connect distributed worker(s) and a Spark cluster on loopback.

One broker by default; ``brokers=3`` starts three combined broker+controller nodes (replication
factor 3, min.insync.replicas 2) for replication and broker-failure tests. One Connect worker by
default; ``connect_workers=N`` runs N in one group. No Spark by default; ``spark_workers=N`` adds a
Spark standalone master and N workers (stack/spark_cluster.py, where their files live). Everything
lives under one home folder::

    <home>/stack.json          broker count, ports and cluster id (kept across down/up: stable endpoints)
    <home>/config/             rendered server.properties (server-<i>.properties per node of N > 1),
                               connect-distributed.properties, log4j2 per component (0700, files 0600:
                               a secured stack's hold its passwords)
    <home>/kafka/data/         the broker's log.dirs (KRaft metadata included); kafka/data-<i>/ per node of N > 1
    <home>/logs/               broker.log (broker-<i>.log), connect.log (log4j2) and *.out (JVM stdout/stderr)
    <home>/schema-registry.json  with ``registry``: the local schema registry's port (stack/schema_registry.py)

The processes are found by their command line (stack/processes.py), not by trusting a pid
file, so ``up`` after a crash notices the half-dead stack, stops what is left and starts
clean, and ``down`` leaves no process of this home behind.

This module is the lifecycle: ``up``, ``down``, ``kill``, ``start`` and the waits until each component
answers. What the stack is made of (the knobs asked for, ``StackOptions``, over the home's record) is
stack/shape.py's ``StackShape``, which ``LocalStack`` extends. The home's paths, its ``stack.json`` and
the choice of ports are stack/state.py's; the text of the config files is stack/stack_config.py's and
their writing stack/config_files.py's; each JVM's main class, options, storage format and start-up
diagnosis are stack/launch.py's. The broker-failure queries
(which broker leads a partition or coordinates a transaction, waiting until replicas are in sync) are
``ChaosStack`` in stack/kit/chaos.py, which only the demo, benchmarks and tests import.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from ikkai.settings import Endpoints, endpoints_connect_auth
from stack import attached, processes
from stack.artifacts import JarSet, ensure_jars
from stack.config_files import broker_config, write_configs
from stack.errors import StackError
from stack.launch import READY_TIMEOUT as READY_TIMEOUT  # re-exported: the readiness tests read them here
from stack.launch import (
    STOP_GRACE,
    component_kind,
    format_storage,
    jvm_options,
    main_and_config,
    register_catalog,
    startup_failure,
)
from stack.local_plugins import local_plugin_dirs_for_stack
from stack.prerequisites import check_java
from stack.probes import broker_answers, connect_plugins, spark_answers
from stack.schema_registry import REGISTRY, LocalSchemaRegistry
from stack.shape import AS_RECORDED, StackOptions, StackShape
from stack.spark_cluster import (
    DAEMON_HEAP,
    SPARK_MASTER,
    cluster_port_roles,
    connect_components,
    is_spark,
    launcher_java_options,
    master_ui_url,
    master_url,
    spark_launch,
)
from stack.stack_config import BROKER as BROKER  # re-exported: callers name components by these
from stack.stack_config import CONNECT as CONNECT
from stack.stack_config import HOST, Ports, broker_node_id
from stack.stack_security import SECURE_DIR
from stack.status import ComponentStatus, StackStatus

COMPONENTS = (BROKER, CONNECT)  # a one-broker stack's; ``LocalStack.components`` has the others'

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"


class LocalStack(StackShape):
    """Start, inspect and stop the embedded stack rooted at ``home``, shaped as ``options`` ask (stack/shape.py)."""

    def __init__(
        self,
        home: Path,
        jars_dir: Path,
        options: StackOptions = AS_RECORDED,
        *,
        heap: str = "1g",
        extra_plugin_dirs: tuple[Path, ...] = (),
        progress: TextIO = sys.stderr,
        listener_ports: Mapping[str, int] | None = None,
    ) -> None:
        """``listener_ports``: a secured one-broker stack's ``mtls`` and ``oauth`` listener ports (default: last
        run's, else free ones)."""
        super().__init__(home, options)
        self.jars_dir = jars_dir
        self.heap = heap
        self.extra_plugin_dirs = extra_plugin_dirs
        self.progress = progress
        self.requested_listeners = dict(listener_ports or {})

    def schema_registry(self) -> LocalSchemaRegistry:
        return LocalSchemaRegistry(self.home, self.jars_dir, port=self.options.registry_port, progress=self.progress)

    # -- public API ----------------------------------------------------------------------------

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
        return StackStatus(self.home, self.endpoints(), components, spark_master_url=self.spark_master_url(),
                           connect_urls=self.connect_urls() if len(self.connect_workers) > 1 else [])  # fmt: skip

    def up(self) -> Endpoints:
        """Bring the stack to running; a no-op (bar a health check) when it already is."""
        self._home.check_request(brokers=self.options.brokers, secure=self.options.secure)
        current = self.status()
        current = dataclasses.replace(current, components=[c for c in current.components if c.name != REGISTRY])
        unexpected = set(processes.stack_processes(self.home)) - {*self.components, REGISTRY}  # fewer workers asked
        if current.running and current.endpoints and not unexpected:
            self._say("stack already up")
            return self._start_registry()
        if not current.stopped or unexpected:
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
        self._home.update_state(spark_workers=self.spark_worker_count, connect_workers=self.connect_worker_count)
        self._home.choose_cluster_ports(cluster_port_roles(self.spark_worker_count, self.connect_worker_count), ports)
        self._write_configs(ports, jars)
        for broker in self.brokers:
            format_storage(self._home, broker, java.executable, jars, self.stack_secrets())
        # All nodes at once: a node of three is ready only once a quorum of controllers has formed.
        self._start(self.brokers, java.executable, jars, ports)
        self._start(self.connect_workers, java.executable, jars, ports)
        if self.spark:  # the master first: a worker registers with it at start-up
            self._start(self.spark[:1], java.executable, jars, ports)
            self._start(self.spark[1:], java.executable, jars, ports)
        return self._start_registry()

    def down(self, *, purge: bool = False) -> list[int]:
        """Stop every process of this home (first what runs against it: ``stack.attached``; then Connect); with
        ``purge`` also delete its data."""
        attached.stop_attached(self.home)
        stopped = self._stop_all()
        if purge:
            for path in (self.config_dir, self.home / "kafka", self.logs_dir, self.home / SECURE_DIR, self.state_file,
                         self.schema_registry().state_file, self.home / "spark"):  # fmt: skip
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        return stopped

    def kill(self, component: str, sig: signal.Signals = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to one component (chaos tests, the demo's worker restart): ``connect``, ``broker``
        on a one-broker stack, ``broker-<i>`` on a stack of more (stack.kit.chaos's ``ChaosStack.leader_of``
        and ``coordinator_of`` name the one that matters), ``connect-<i>``, ``spark-master``, ``spark-worker-<i>``
        (with its executors: they are in its process group)."""
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
        self._home.check_ports_free(component, ports)  # before the JVM: a taken port can never be bound
        java = check_java()
        jars = ensure_jars(self.jars_dir, progress=self.progress)
        self._write_configs(ports, jars, connect=component in self.connect_workers)
        self._start([component], java.executable, jars, ports)

    def add_connect_worker(self) -> str:
        """Start one more Connect worker into the running group (a rebalance with no failure); its name.

        The new worker, ``connect-<N+1>``, gets a port of its own, and the home records N+1 workers, so
        ``up`` and ``down`` cover it from now on."""
        ports = self._saved_ports()
        if ports is None or not processes.stack_processes(self.home).get(CONNECT):
            raise StackError(CONNECT, f"no running Connect group in {self.home} to join",
                             fix="run `ikkai stack up` first")  # fmt: skip
        count = self.connect_worker_count + 1
        worker = connect_components(count)[-1]
        self._home.choose_cluster_ports((worker,), ports)
        self.options = dataclasses.replace(self.options, connect_workers=count)
        self._home.update_state(connect_workers=count)
        java = check_java()
        jars = ensure_jars(self.jars_dir, progress=self.progress)
        self._write_configs(ports, jars)
        self._start([worker], java.executable, jars, ports)
        return worker

    # -- steps ---------------------------------------------------------------------------------

    def _say(self, message: str) -> None:
        self.progress.write(f"{message}\n")
        self.progress.flush()

    def _start_registry(self) -> Endpoints:
        """With ``registry``: the local schema registry up (a no-op when it answers) and recorded; the endpoints."""
        registry = self.schema_registry()
        if self.options.registry is False and registry.status().pids:
            self._say(f"stopping {REGISTRY} (--no-registry)")
            registry.down()
        if self.with_registry:
            started, fresh = time.monotonic(), not registry.status().healthy
            if fresh:
                self._say(f"starting {REGISTRY}")
            url = registry.up()
            if fresh:
                versions = register_catalog(url)
                self._say(f"{REGISTRY} ready in {time.monotonic() - started:.1f}s on {url}; the catalog's {versions} "
                          "schema versions registered in catalog order (the same ids after every restart)")  # fmt: skip
        if self.options.registry is not None:
            self._home.update_state(registry=self.options.registry)
        endpoints = self.endpoints()
        assert endpoints is not None
        self._home.update_state(endpoints=endpoints.as_dict())  # for clients that read stack.json (the jobs)
        return endpoints

    def _check_component(self, component: str) -> None:
        if component not in self.components:
            raise StackError(component, f"no such component in {self.home}",
                             fix=f"name one of {', '.join(self.components)}")  # fmt: skip

    def _answers(self, component: str, ports: Ports) -> bool:
        if is_spark(component):
            cluster_ports = self._home.saved_cluster_ports()
            worker_port = None if component == SPARK_MASTER else cluster_ports[component]
            return spark_answers(master_ui_url(cluster_ports), worker_port=worker_port)
        if component in self.connect_workers[1:]:
            url = self.connect_urls()[self.connect_workers.index(component)]
            endpoints = self._endpoints(ports)
            plugins = connect_plugins(url, auth=endpoints_connect_auth(endpoints))
            return plugins is not None and FILE_SOURCE in plugins
        cluster = self.kafka_cluster(ports)
        if component == BROKER:
            return broker_answers(cluster)
        if component != CONNECT:  # one node of several: it answers at its own address and is registered
            node_id = broker_node_id(component)
            return broker_answers(cluster.broker(f"{HOST}:{ports.nodes[node_id - 1].broker}"), node_id=node_id)
        endpoints = self._endpoints(ports)
        plugins = connect_plugins(endpoints.connect_url, auth=endpoints_connect_auth(endpoints))
        return plugins is not None and FILE_SOURCE in plugins

    def _choose_ports(self) -> Ports:
        """Requested ports, else last run's, else new ones (``StackHome.choose_ports``); says which moved."""
        requested = {BROKER: self.options.broker_port, CONNECT: self.options.connect_port}
        chosen, notes = self._home.choose_ports(requested, self.broker_count)
        for note in notes:
            self._say(note)
        return chosen

    def _write_state(self, ports: Ports) -> None:
        self._home.write_state(ports, secure=self.secure, listener_ports=self.requested_listeners)

    def _write_configs(self, ports: Ports, jars: JarSet, *, connect: bool = True) -> None:
        """Every component's files; the brokers' only without ``connect`` (a broker restart builds no plugin)."""
        plugin_path = None
        if connect:
            built = local_plugin_dirs_for_stack(self.jars_dir, progress=self.progress)
            plugin_path = [jars.plugins, *built, *self.extra_plugin_dirs]
        cluster_ports = self._home.saved_cluster_ports()
        connect_ports = {CONNECT: ports.connect} | {w: cluster_ports[w] for w in self.connect_workers[1:]}
        write_configs(
            self._home, ports, self.stack_secrets(), plugin_path=plugin_path, scan_plugins=bool(self.extra_plugin_dirs),
            connect_ports=connect_ports, log_only=self.spark,
        )  # fmt: skip

    def _broker_properties(self, ports: Ports, broker: str, node_id: int) -> dict[str, str]:
        return broker_config(self._home, ports, broker, node_id, self.stack_secrets())

    def _start(self, components: Iterable[str], java: Path, jars: JarSet, ports: Ports) -> None:
        """Start ``components`` together, then wait until each answers."""
        started = time.monotonic()
        launched = []
        for component in components:
            if is_spark(component):
                process = self._start_spark(component, java)
                launched.append((component, process))
                continue
            main_class, config = main_and_config(self._home, component)
            if component in self.connect_workers:
                address = self.connect_urls()[self.connect_workers.index(component)]
            else:
                address = f"{HOST}:{ports.nodes[broker_node_id(component) - 1].broker}"
            self._say(f"starting {component} on {address}")
            process = processes.start_java(
                java,
                home=self.home,
                component=component,
                main_class=main_class,
                classpath=jars.kafka_classpath(),
                args=[str(config)],
                jvm_options=jvm_options(self._home, component, self.stack_secrets(), self.heap),
                output=self.logs_dir / f"{component}.out",
            )
            launched.append((component, process))
        for component, process in launched:
            self._wait_ready(component, process, lambda c=component: self._answers(c, ports), started)  # type: ignore[misc]
            self._say(f"{component} ready in {time.monotonic() - started:.1f}s (pid {process.pid})")
        if len(ports.nodes) > 1 and any(component in self.brokers for component, _ in launched):
            self._wait_all_registered(ports, started)

    def _start_spark(self, component: str, java: Path) -> subprocess.Popen[bytes]:
        """Start the Spark master or a worker: the classes ``spark-class`` runs, with the options its launcher gives."""
        ports = self._home.saved_cluster_ports()
        launch = spark_launch(self.home, component, ports)
        address = master_url(ports) if component == SPARK_MASTER else f"{HOST}:{ports[component]}"
        self._say(f"starting {component} on {address}")
        return processes.start_java(
            java,
            home=self.home,
            component=component,
            main_class=launch.main_class,
            classpath=launch.classpath,
            args=launch.args,
            jvm_options=[*launcher_java_options(java), *jvm_options(self._home, component, None, DAEMON_HEAP)],
            output=self.logs_dir / f"{component}.out",
            env=launch.env,
        )

    def _wait_all_registered(self, ports: Ports, started: float) -> None:
        """Every broker, asked at its own address, lists every node: only then is a cluster of N ready.

        One node answering for itself is not enough: a topic of replication factor N needs all N
        registered (INVALID_REPLICATION_FACTOR otherwise), and a broker whose metadata still lacks a
        peer gives the next client a stale answer.
        """
        cluster = self.kafka_cluster(ports)
        nodes = range(1, len(ports.nodes) + 1)
        deadline = started + READY_TIMEOUT[BROKER]
        while True:
            unknown = [
                (asked, node)
                for asked in nodes
                for node in nodes
                if not broker_answers(cluster.broker(f"{HOST}:{ports.nodes[asked - 1].broker}"), node_id=node)
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
        deadline = started + READY_TIMEOUT[component_kind(component)]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise startup_failure(self._home, component, f"exited with code {process.returncode} during start-up")
            if ready():
                return
            time.sleep(0.25)
        processes.stop(process.pid, self.home, component, grace_seconds=5)
        raise startup_failure(self._home, component, f"not ready after {READY_TIMEOUT[component_kind(component)]:.0f}s")

    def _stop_all(self) -> list[int]:
        # Connect first: it needs the brokers to leave cleanly. Brokers all at once: a node stopped after
        # the others could not reach a controller quorum for its clean shutdown, and would wait it out.
        # Spark's workers before their master (a worker stops its executors as it goes).
        stopped = self._stop(self.spark[1:]) + self._stop(self.spark[:1])
        stopped += self._stop(self.connect_workers) + self._stop(self.brokers)
        return stopped + self._stop(processes.stack_processes(self.home), grace_seconds=5)  # anything unexpected

    def _stop(self, components: Iterable[str], grace_seconds: float | None = None) -> list[int]:
        live = processes.stack_processes(self.home)
        targets = [(component, pid) for component in components for pid in live.get(component, [])]
        if targets:
            with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                for component, pid in targets:
                    grace = STOP_GRACE.get(component_kind(component), 5) if grace_seconds is None else grace_seconds
                    pool.submit(processes.stop, pid, self.home, component, grace_seconds=grace)
        return [pid for _, pid in targets]
