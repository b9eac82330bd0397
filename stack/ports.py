"""Where the embedded stack listens: loopback ports outside the kernel's ephemeral range.

The kernel gives every outbound connection, and every server that binds port 0, a local
port from its ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``). A listener
inside that range is safe only while it runs: once a component is down, a Kafka client or a
restarting Spark job may be handed its port, and the component cannot come back on it. So
the stack's ports are picked at random from outside that range (from 20000 up; below it
live well-known services such as 5432, 8080 and 9092), never from port 0.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from stack.errors import NoFreePortError, PortInUseError
from stack.stack_config import BROKER, CONNECT, CONTROLLER, HOST, Ports, port_roles

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
RESERVED_PORTS_FILE = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
LOWEST_LISTEN_PORT = 20000
FIRST_UNPRIVILEGED_PORT = 1024
HIGHEST_PORT = 65535
TRIES = 100


@dataclass(frozen=True)
class PortRange:
    """Ports ``low`` to ``high``, both included."""

    low: int
    high: int

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.low <= port <= self.high

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"


# Where the kernel's range cannot be read (not Linux): Linux's default and the IANA range
# (49152-65535) that BSD, macOS and Windows use, together.
DEFAULT_EPHEMERAL = PortRange(32768, HIGHEST_PORT)


def parse_port_range(text: str) -> PortRange:
    """``ip_local_port_range`` as the kernel writes it: ``"32768\\t60999\\n"``."""
    low, high = (int(part) for part in text.split())
    if not 1 <= low <= high <= HIGHEST_PORT:
        raise ValueError(f"not a port range: {text.strip()!r}")
    return PortRange(low, high)


def parse_reserved_ports(text: str) -> frozenset[int]:
    """``ip_local_reserved_ports``: ports and ranges, comma-separated (``"8080,9000-9010"``), or empty."""
    reserved: set[int] = set()
    for item in text.replace("\n", "").split(","):
        if not item.strip():
            continue
        low, _, high = item.partition("-")
        reserved.update(range(int(low), int(high or low) + 1))
    return frozenset(reserved)


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> PortRange:
    """The range the kernel picks local ports from; ``DEFAULT_EPHEMERAL`` where it cannot be read."""
    try:
        return parse_port_range(path.read_text())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def reserved_ports(path: Path = RESERVED_PORTS_FILE) -> frozenset[int]:
    """Ports an administrator kept out of the ephemeral range for a service of theirs; we leave them alone."""
    try:
        return parse_reserved_ports(path.read_text())
    except (OSError, ValueError):
        return frozenset()


def listening_ports(ephemeral: PortRange, reserved: Collection[int] = frozenset()) -> list[int]:
    """The ports a server of ours may listen on: from 20000 up, outside ``ephemeral`` and ``reserved``.

    Only where the ephemeral range leaves nothing from 20000 up are lower ports (from 1024) used.
    """
    for first, last in ((LOWEST_LISTEN_PORT, HIGHEST_PORT), (FIRST_UNPRIVILEGED_PORT, LOWEST_LISTEN_PORT - 1)):
        below = range(first, min(last, ephemeral.low - 1) + 1)
        above = range(max(first, ephemeral.high + 1), last + 1)
        ports = [port for port in (*below, *above) if port not in reserved]
        if ports:
            return ports
    return []


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if a server could bind ``host:port`` now (SO_REUSEADDR, as Kafka and Jetty bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(
    host: str = HOST,
    avoid: Collection[int] = frozenset(),
    *,
    ephemeral: PortRange | None = None,
    reserved: Collection[int] | None = None,
) -> int:
    """A port to listen on: random among ``listening_ports``, free right now, not in ``avoid``.

    ``ephemeral`` and ``reserved`` default to what the kernel reports.
    """
    ephemeral = ephemeral_range() if ephemeral is None else ephemeral
    candidates = listening_ports(ephemeral, reserved_ports() if reserved is None else reserved)
    for port in random.SystemRandom().sample(candidates, min(TRIES, len(candidates))):
        if port not in avoid and port_is_free(port, host):
            return port
    raise NoFreePortError(host, str(ephemeral), tried=min(TRIES, len(candidates)))


def choose_ports(
    requested: Mapping[str, int | None],
    previous: Ports | None,
    *,
    ephemeral: PortRange,
    reserved: Collection[int] = frozenset(),
    brokers: int = 1,
) -> Ports:
    """The ports of a stack of ``brokers`` nodes: each requested one (it must be free), else the previous
    one if it is free and outside the ephemeral range (endpoints stay stable), else a new one from
    ``free_port``. ``requested`` pins node 1's ``broker`` and ``controller`` ports and ``connect``."""
    roles = port_roles(brokers)
    pinned = {roles[0]: requested.get(BROKER), roles[1]: requested.get(CONTROLLER), CONNECT: requested.get(CONNECT)}
    saved = previous.as_dict() if previous else {}
    taken: set[int] = set()
    chosen: dict[str, int] = {}
    for role in roles:
        port = pinned.get(role)
        if port is not None:
            if not port_is_free(port):
                flag = f"--{role.split('-')[0]}-port"
                raise PortInUseError(
                    HOST, port, role,
                    fix=f"free it (ss -ltnp 'sport = :{port}' shows who holds it) "
                        f"or pass another {flag}, or omit {flag} to pick a free port",
                )  # fmt: skip
        else:
            old = saved.get(role)
            if (
                old is not None
                and old not in taken
                and old not in ephemeral
                and old not in reserved
                and port_is_free(old)
            ):
                port = old
            else:
                port = free_port(avoid=taken, ephemeral=ephemeral, reserved=reserved)
        taken.add(port)
        chosen[role] = port
    return Ports.from_dict(chosen)
