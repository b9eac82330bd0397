"""Errors of the embedded stack: starting, stopping and reaching it, its ports and its Maven builds."""

from __future__ import annotations

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
