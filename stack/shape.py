"""What the embedded stack is made of: the knobs asked for (``StackOptions``) over what its home recorded.

``ikkai stack up``'s eight options, the demo and the tests ask for a stack through one frozen ``StackOptions``,
passed from the command (or fixture) through ``select_stack`` to ``LocalStack`` unchanged. Each knob left None
keeps the home's choice (its ``stack.json``), else a new home's default. ``StackShape`` answers from both, without
starting anything: how many brokers, Connect and Spark workers, whether secured or with the local schema registry,
each component's name, where each answers. ``LocalStack`` (stack/local_stack.py) is the lifecycle built on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.kafka_security import NO_SECURITY, SecurityConfig
from ikkai.settings import Endpoints
from stack.errors import StackError
from stack.spark_cluster import SPARK_MASTER, UI, connect_components, master_url, spark_components, ui_url
from stack.stack_config import HOST, Ports, bootstrap_servers, broker_components
from stack.stack_security import StackSecrets, client_settings
from stack.state import StackHome


@dataclass(frozen=True)
class StackOptions:
    """What is asked of the embedded stack; None keeps the home's choice (a new home's default in brackets).

    ``broker_port``, ``connect_port``, ``registry_port``: the Kafka listener, Connect REST and schema registry ports
    [last run's, else free ones]. ``brokers``: KRaft nodes [1]. ``secure``: SASL_SSL and an HTTPS, basic-auth
    Connect REST API [plaintext]. ``registry``: the local schema registry too [none]. ``spark_workers``: a Spark
    standalone master and that many workers, 0 for none [0]. ``connect_workers``: Connect workers in the stack's
    group [1]."""

    broker_port: int | None = None
    connect_port: int | None = None
    brokers: int | None = None
    secure: bool | None = None
    registry: bool | None = None
    registry_port: int | None = None
    spark_workers: int | None = None
    connect_workers: int | None = None

    def __post_init__(self) -> None:
        if self.connect_workers is not None:
            connect_components(self.connect_workers)  # at least one
        if self.brokers is not None:
            broker_components(self.brokers)  # at least one


AS_RECORDED = StackOptions()  # nothing asked: every knob as the home recorded it (a new home's defaults)


class StackShape:
    """The embedded stack rooted at ``home`` as ``options`` ask for it and its home recorded it."""

    def __init__(self, home: Path, options: StackOptions) -> None:
        self.home = home.resolve()
        self._home = StackHome(self.home)
        self.options = options

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

    # -- the cluster's shape -------------------------------------------------------------------

    @property
    def broker_count(self) -> int:
        """The brokers this home holds (from stack.json), else those asked for, else 1."""
        return self._home.saved_broker_count() or self.options.brokers or 1

    @property
    def secure(self) -> bool:
        """Whether this home's stack is secured: as recorded once it exists, else as requested."""
        saved = self._home.saved_secure()
        return saved if saved is not None else bool(self.options.secure)

    def stack_secrets(self) -> StackSecrets | None:
        """The secured stack's certificates and credentials (made on first use); None for a plaintext stack."""
        return self._home.secrets(self.secure)

    def secure_listeners(self) -> dict[str, str]:
        """A secured one-broker stack's extra listeners by name (``mtls``, ``oauth``): their ``host:port``."""
        return self._home.secure_listeners()

    @property
    def with_registry(self) -> bool:
        """Whether this home's stack runs the local schema registry: as asked, else as recorded, else not."""
        requested = self.options.registry
        return requested if requested is not None else self._home.saved_registry()

    @property
    def brokers(self) -> tuple[str, ...]:
        """The brokers' component names: ``("broker",)``, or ``("broker-1", ..., "broker-N")``."""
        return broker_components(self.broker_count)

    @property
    def spark_worker_count(self) -> int:
        """The Spark workers ``up`` starts: as asked, else as recorded, else none (and then no master)."""
        asked = self.options.spark_workers
        return asked if asked is not None else self._home.saved_count("spark_workers") or 0

    @property
    def connect_worker_count(self) -> int:
        """The Connect workers ``up`` starts in the stack's group: as asked, else as recorded, else one."""
        asked = self.options.connect_workers
        return asked if asked is not None else self._home.saved_count("connect_workers") or 1

    @property
    def connect_workers(self) -> tuple[str, ...]:
        """``("connect",)``, or ``("connect", "connect-2", ..., "connect-N")``."""
        return connect_components(self.connect_worker_count)

    @property
    def spark(self) -> tuple[str, ...]:
        """``("spark-master", "spark-worker-1", ..., "spark-worker-N")``, or none."""
        return spark_components(self.spark_worker_count)

    @property
    def components(self) -> tuple[str, ...]:
        return (*self.brokers, *self.connect_workers, *self.spark)

    # -- where it answers ------------------------------------------------------------------------

    def endpoints(self) -> Endpoints | None:
        return self._home.endpoints(secure=self.secure, registry=self.with_registry)

    def _endpoints(self, ports: Ports) -> Endpoints:
        return self._home.endpoints_at(ports, secure=self.secure)

    def _saved_ports(self) -> Ports | None:
        return self._home.saved_ports()

    def spark_master_url(self) -> str | None:
        """The Spark master's ``spark://`` URL (for ``ikkai jobs submit --master``); None without Spark workers."""
        ports = self._home.saved_cluster_ports()
        return master_url(ports) if self.spark and SPARK_MASTER in ports else None

    def spark_ui_urls(self) -> list[str]:
        """The web UIs of the Spark master and each worker (applications, executors, their logs); [] without."""
        ports = self._home.saved_cluster_ports()
        return [ui_url(ports, c) for c in self.spark if f"{c}{UI}" in ports]

    def connect_urls(self) -> list[str]:
        """Every Connect worker's REST URL, the stack's ``connect_url`` first."""
        endpoints = self.endpoints()
        if endpoints is None:
            return []
        ports = self._home.saved_cluster_ports()
        scheme = endpoints.connect_url.split("://", 1)[0]
        more = [f"{scheme}://{HOST}:{ports[c]}" for c in self.connect_workers[1:] if c in ports]
        return [endpoints.connect_url, *more]

    def kafka_cluster(self, ports: Ports | None = None) -> KafkaContext:
        """This stack's Kafka cluster as its clients reach it: the brokers and, secured, the stack's client settings."""
        ports = ports or self._saved_ports()
        if ports is None:
            raise StackError("stack", f"never started in {self.home}", fix="run `ikkai stack up` first")
        stack = self.stack_secrets()
        security = SecurityConfig(client_settings(stack), str(stack.dir)) if stack else NO_SECURITY
        return KafkaContext(bootstrap_servers(ports), security)
