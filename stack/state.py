"""The embedded stack's home on disk: where its files are, what its state file records, where it listens.

::

    <home>/stack.json   broker count, ports, cluster id, whether secured / with a registry, and the
                        endpoints of the last ``up`` (kept across down/up: stable endpoints)

``StackHome`` reads and updates that file and names the home's paths; it starts nothing and asks no
process. The endpoints follow from the saved ports alone, so the control plane can find the embedded
Connect worker (``stack.status.embedded_endpoints``) without the lifecycle in stack.local_stack.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ikkai.settings import STACK_STATE, Endpoints
from stack.schema_registry import recorded_url
from stack.stack_config import BROKER, HOST, Ports, bootstrap_servers, broker_node_id, connect_url
from stack.stack_security import StackSecrets, ensure_secrets

LISTENERS_KEY = "secure_listeners"  # stack.json: a secured one-broker stack's extra listener ports


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
        self.state_file.write_text(json.dumps({**self.saved_state(), **entries}, indent=2) + "\n")

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

    def secure_listeners(self) -> dict[str, str]:
        """A secured one-broker stack's extra listeners by name (``mtls``, ``oauth``): their ``host:port``."""
        saved = self.saved_state().get(LISTENERS_KEY)
        return {name: f"{HOST}:{port}" for name, port in saved.items()} if isinstance(saved, dict) else {}

    # -- where it listens ----------------------------------------------------------------------

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
