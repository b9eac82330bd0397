"""Errors of the deploy component: starting, stopping and reaching the stack, operating its connectors."""

from __future__ import annotations

import difflib
from pathlib import Path

from ikkai.errors import IkkaiError


class PortInUseError(IkkaiError):
    """A port the stack was told to use is taken by another process."""

    def __init__(self, host: str, port: int, role: str, fix: str) -> None:
        super().__init__(f"{role} port {host}:{port} is already in use", fix=fix)
        self.host = host
        self.port = port
        self.role = role


class NoFreePortError(IkkaiError):
    """No loopback port outside the kernel's ephemeral range was free to listen on."""

    def __init__(self, host: str, ephemeral: str, *, tried: int) -> None:
        super().__init__(
            f"no free port on {host} outside the kernel's ephemeral range {ephemeral} ({tried} tried)",
            fix="narrow the range (sysctl net.ipv4.ip_local_port_range) or pin ports with --broker-port "
            "and --connect-port",
        )
        self.host = host
        self.ephemeral = ephemeral
        self.tried = tried


class StackError(IkkaiError):
    """A stack component failed to start, stop or answer. ``log`` is where to look."""

    def __init__(self, component: str, problem: str, *, log: Path | None = None, fix: str | None = None) -> None:
        where = f" (log: {log})" if log else ""
        super().__init__(f"{component}: {problem}{where}", fix=fix)
        self.component = component
        self.problem = problem
        self.log = log


class ArtifactError(IkkaiError):
    """Maven could not resolve the jars the stack needs."""

    def __init__(self, pom: Path, problem: str, *, log: Path | None = None) -> None:
        where = f" (full output: {log})" if log else ""
        super().__init__(
            f"resolving jars from {pom} failed: {problem}{where}",
            fix="check that Maven Central is reachable (mvn -v, ~/.m2/settings.xml proxies), then rerun `ikkai setup`",
        )
        self.pom = pom
        self.problem = problem
        self.log = log


class ConnectorNotFound(IkkaiError):
    """A command named a connector the Connect cluster does not have."""

    def __init__(self, connector: str, connect_url: str, known: list[str]) -> None:
        close = difflib.get_close_matches(connector, known, n=1)
        listing = ", ".join(known[:10]) + (f" (and {len(known) - 10} more)" if len(known) > 10 else "")
        super().__init__(
            f"connector {connector} does not exist on {connect_url}",
            fix=(f"did you mean {close[0]}? " if close else "")
            + (f"connectors there: {listing}" if known else "that cluster has no connectors"),
        )
        self.connector = connector
        self.connect_url = connect_url
        self.known = known


class ConnectorStateError(IkkaiError):
    """A connector did not reach the state an operation needs (offsets change only while STOPPED)."""

    def __init__(self, connector: str, state: str, wanted: str, problem: str, fix: str) -> None:
        super().__init__(f"connector {connector} is {state}, not {wanted}: {problem}", fix=fix)
        self.connector = connector
        self.state = state
        self.wanted = wanted
        self.problem = problem
