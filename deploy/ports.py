"""Loopback port probing for the embedded stack."""

from __future__ import annotations

import socket

from deploy.stack_config import HOST


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if a server could bind ``host:port`` now (SO_REUSEADDR, as Kafka and Jetty bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST, avoid: set[int] | frozenset[int] = frozenset()) -> int:
    """A port the kernel considers free right now, not in ``avoid``."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port not in avoid:
            return port
    raise RuntimeError("no free loopback port found after 50 tries")
