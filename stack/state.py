"""The embedded stack's home on disk: where its files are, what its state file records, where it listens.

::

    <home>/stack.json   broker count, ports, cluster id, whether secured / with a registry, and the
                        endpoints of the last ``up`` (kept across down/up: stable endpoints)

``StackHome`` reads and writes that file, names the home's paths, refuses a request the home's
storage cannot become (another broker count, secured <-> plaintext) and chooses the ports the next
start listens on; it starts nothing and asks no process (choosing a port only tries to bind it).
The endpoints follow from the saved ports alone, so the control plane can find the embedded
Connect worker (``stack.status.embedded_endpoints``) without the lifecycle in stack.local_stack.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ikkai.settings import STACK_STATE, Endpoints
from stack.errors import PortInUseError, StackError
from stack.ports import choose_ports, ephemeral_range, free_port, port_is_free, reserved_ports
from stack.schema_registry import recorded_url
from stack.stack_config import (
    BROKER,
    CONTROLLER,
    HOST,
    Ports,
    bootstrap_servers,
    broker_node_id,
    connect_url,
)
from stack.stack_security import StackSecrets, ensure_secrets, write_private

LISTENERS_KEY = "secure_listeners"  # stack.json: a secured one-broker stack's extra listener ports
CLUSTER_PORTS_KEY = "cluster_ports"  # stack.json: the Spark cluster's and the extra Connect workers' ports
EXTRA_LISTENERS = ("mtls", "oauth")


@dataclass(frozen=True)
class StackHome:
    """The folder one embedded stack lives in (resolved), and what its ``stack.json`` says."""

    home: Path

    # -- paths ---------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.home / STACK_STATE

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

    def node_data_dir(self, component: str) -> Path:
        """A broker's log.dirs: ``kafka/data`` on a one-broker stack, ``kafka/data-<i>`` for node i of more."""
        return self.data_dir if component == BROKER else self.home / "kafka" / f"data-{broker_node_id(component)}"

    def server_properties(self, component: str) -> Path:
        name = "server.properties" if component == BROKER else f"server-{broker_node_id(component)}.properties"
        return self.config_dir / name

    # -- the state file ------------------------------------------------------------------------

    def saved_state(self) -> dict[str, object]:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def update_state(self, **entries: object) -> None:
        write_private(self.state_file, json.dumps({**self.saved_state(), **entries}, indent=2) + "\n")

    def saved_ports(self) -> Ports | None:
        try:
            return Ports.from_dict(self.saved_state()["ports"])  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def saved_broker_count(self) -> int | None:
        """From stack.json: ``brokers``, else (a state file of an older ikkai) the nodes of its ports."""
        count = self.saved_state().get("brokers")
        if isinstance(count, int) and count >= 1:
            return count
        ports = self.saved_ports()
        return len(ports.nodes) if ports else None

    def saved_secure(self) -> bool | None:
        """Whether the stack was secured, as recorded; None for a home that never recorded it."""
        saved = self.saved_state().get("secure")
        return saved if isinstance(saved, bool) else None

    def saved_registry(self) -> bool:
        """Whether the stack runs the local schema registry, as recorded (False when never recorded)."""
        return self.saved_state().get("registry") is True

    def saved_count(self, key: str) -> int | None:
        """A count ``up`` recorded (``spark_workers``, ``connect_workers``); None when never recorded."""
        count = self.saved_state().get(key)
        return count if isinstance(count, int) and count >= 0 else None

    def saved_cluster_ports(self) -> dict[str, int]:
        """The Spark cluster's and the extra Connect workers' ports by role (stack/spark_cluster.py)."""
        saved = self.saved_state().get(CLUSTER_PORTS_KEY)
        return {k: v for k, v in saved.items() if isinstance(v, int)} if isinstance(saved, dict) else {}

    def choose_cluster_ports(self, roles: tuple[str, ...], ports: Ports) -> dict[str, int]:
        """The ports of ``roles``, chosen as ``choose_ports`` chooses the others: last run's if free and outside
        the kernel's ephemeral range, else new ones; never one of ``ports``. Recorded in stack.json."""
        saved, ephemeral, reserved = self.saved_cluster_ports(), ephemeral_range(), reserved_ports()
        taken = set(ports.as_dict().values())
        chosen: dict[str, int] = {}
        for role in roles:
            old = saved.get(role)
            if old is not None and old not in taken and old not in ephemeral and old not in reserved \
                    and port_is_free(old):  # fmt: skip
                port = old
            else:
                port = free_port(avoid=taken, ephemeral=ephemeral, reserved=reserved)
            taken.add(port)
            chosen[role] = port
        self.update_state(**{CLUSTER_PORTS_KEY: {**saved, **chosen}})
        return chosen

    def secure_listeners(self) -> dict[str, str]:
        """A secured one-broker stack's extra listeners by name (``mtls``, ``oauth``): their ``host:port``."""
        saved = self.saved_state().get(LISTENERS_KEY)
        return {name: f"{HOST}:{port}" for name, port in saved.items()} if isinstance(saved, dict) else {}

    def write_state(self, ports: Ports, *, secure: bool, listener_ports: Mapping[str, int]) -> None:
        """Record a start on ``ports``: the broker count, ``secure``, a secured one-broker stack's extra
        listener ports (``listener_ports`` asked for, else ``choose_listener_ports``'s), the endpoints,
        and a cluster id once (kept for good: the brokers' storage is formatted with it)."""
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new home is its user's only
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            state = {}
        state["ports"] = ports.as_dict()
        state["brokers"] = len(ports.nodes)
        state["secure"] = secure
        if secure and len(ports.nodes) == 1:
            saved = state.get(LISTENERS_KEY)
            state[LISTENERS_KEY] = choose_listener_ports(
                ports, listener_ports, saved if isinstance(saved, dict) else {}
            )
        state["endpoints"] = self.endpoints_at(ports, secure=secure).as_dict()
        state.setdefault("cluster_id", new_cluster_id())
        # 0600 whatever the home's mode (the cluster id and the ports: the user's only, as every file of the stack)
        write_private(self.state_file, json.dumps(state, indent=2) + "\n")

    # -- what it can become --------------------------------------------------------------------

    def check_request(self, *, brokers: int | None, secure: bool | None) -> None:
        """Refuse what this home's storage cannot become: another broker count, or secured <-> plaintext."""
        saved = self.saved_broker_count()
        if saved is not None and brokers not in (None, saved):
            raise StackError(
                "stack",
                f"{self.home} holds a stack of {saved} broker(s), not {brokers}: "
                "a KRaft cluster's storage cannot change its node count",
                fix=f"keep {saved} (omit --brokers), or delete it first with "
                f"`ikkai stack --home {self.home} down --purge`",
            )
        saved_secure = self.saved_state().get("secure")
        if isinstance(saved_secure, bool) and secure is not None and saved_secure != secure:
            kind = "a secured" if saved_secure else "a plaintext"
            raise StackError(
                "stack", f"{self.home} holds {kind} stack: its storage and clients were made that way",
                fix=f"omit --secure/--plaintext to keep it, or delete it first with "
                f"`ikkai stack --home {self.home} down --purge`",
            )  # fmt: skip

    # -- where it listens ----------------------------------------------------------------------

    def choose_ports(self, requested: Mapping[str, int | None], brokers: int) -> tuple[Ports, list[str]]:
        """The ports of the next start, and a note for each that sits where the kernel may take it.

        Requested ports must be free; otherwise last run's are reused if free and outside the kernel's
        ephemeral range, else new ones are picked outside it (stack/ports.py says why).
        """
        previous, ephemeral = self.saved_ports(), ephemeral_range()
        chosen = choose_ports(requested, previous, ephemeral=ephemeral, reserved=reserved_ports(), brokers=brokers)
        notes = []
        for role, port in chosen.as_dict().items():
            old = previous.as_dict().get(role) if previous else None
            if old in ephemeral and old != port:
                notes.append(
                    f"{role} port {old} is inside the kernel's ephemeral range {ephemeral}, where an outbound "
                    f"connection may take it while the stack is down; moving it to {port}"
                )
            elif port in ephemeral:  # only a pinned port can be
                flag = f"--{role.split('-')[0]}-port"
                notes.append(
                    f"note: {role} port {port} is inside the kernel's ephemeral range {ephemeral}: an outbound "
                    f"connection may take it while the {role} is down (omit {flag} to pick one outside it)"
                )
        return chosen, notes

    def check_ports_free(self, component: str, ports: Ports) -> None:
        """Refuse to restart ``component`` when another process holds one of its recorded ports."""
        by_role = {**self.saved_cluster_ports(), **ports.as_dict()}
        if component in by_role and not component.startswith(BROKER):  # Connect, Spark: their port (and UI's)
            roles: tuple[str, ...] = tuple(role for role in (component, f"{component}-ui") if role in by_role)
        else:
            roles = (component, component.replace(BROKER, CONTROLLER, 1))
        for role in roles:
            port = by_role[role]
            if not port_is_free(port):
                raise PortInUseError(
                    HOST, port, role,
                    fix=f"another process holds it (ss -ltnp 'sport = :{port}' shows which): stop it, or move "
                        f"the stack to free ports with `ikkai stack --home {self.home} down` and "
                        f"`ikkai stack --home {self.home} up`",
                )  # fmt: skip

    def secrets(self, secure: bool) -> StackSecrets | None:
        """The secured stack's certificates and credentials (made on first use); None for a plaintext stack."""
        return ensure_secrets(self.home) if secure else None

    def endpoints(self, *, secure: bool, registry: bool) -> Endpoints | None:
        """Where the stack listens, from its saved ports; None if it never chose any."""
        ports = self.saved_ports()
        if ports is None:
            return None
        endpoints = self.endpoints_at(ports, secure=secure)
        url = recorded_url(self.home) if registry else None
        return dataclasses.replace(endpoints, schema_registry_url=url) if url else endpoints

    def endpoints_at(self, ports: Ports, *, secure: bool) -> Endpoints:
        stack = self.secrets(secure)
        if stack is None:
            return Endpoints(bootstrap_servers(ports), connect_url(ports), runtime="local")
        https = connect_url(ports).replace("http://", "https://", 1)
        return Endpoints(bootstrap_servers(ports), https, runtime="local", kafka_config=str(stack.client_properties),
                         connect_credentials=str(stack.rest_credentials))  # fmt: skip


def choose_listener_ports(ports: Ports, requested: Mapping[str, int], saved: Mapping[str, object]) -> dict[str, int]:
    """The MTLS and OAUTH listeners' ports: requested (must be free), else last run's if free, else new."""
    taken = set(ports.as_dict().values())
    chosen: dict[str, int] = {}
    for name in EXTRA_LISTENERS:
        port = requested.get(name)
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


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as StorageTool makes).

    Never one that starts with '-' (1 in 64 do): kafka-storage would read it as an option and fail
    with "expected one argument", as Kafka's own Uuid.randomUuid avoids too.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
