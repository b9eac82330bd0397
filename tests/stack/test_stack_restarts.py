"""Kill -9 and restart each component of the embedded stack many times in a row.

While a component is down, this test makes the kernel hand out thousands of loopback ports,
as the rest of a busy machine does: outbound connections (Kafka clients, the receiver) and
sockets bound to port 0 (a restarted Spark job's driver, py4j and block manager). Linux gives
connect() ports of one parity and bind(0) the other, so it is mostly the second kind that
lands on a port a dead listener left inside the ephemeral range. Each restart must come back
on its recorded port and answer.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.connect_rest import ConnectClient
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints, jars_dir
from stack.local_stack import BROKER, CONNECT, LocalStack
from stack.probes import broker_answers
from stack.processes import stack_processes
from stack.stack_config import HOST

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

RESTARTS = ((BROKER, 2), (CONNECT, 2))  # each a second restart on the same ports; ~15 s and ~11 s each, ~1 minute
OUTBOUND = 3000  # connections waiting in a listener's backlog (somaxconn is 4096 by default)
BOUND = 10000  # sockets bound to port 0: about 70% of the ports bind(0) picks from (every other one)


class PortPressure:
    """Loopback sockets holding kernel-chosen ports, all opened at once and closed at once (no threads)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind((HOST, 0))
        self.listener.listen(65535)  # never accepts: the connections stay in its backlog
        self.held: list[socket.socket] = []

    def take(self, outbound: int, bound: int) -> None:
        address = self.listener.getsockname()
        for _ in range(outbound):
            client = socket.socket()
            self.held.append(client)
            client.setblocking(False)
            client.connect_ex(address)  # EINPROGRESS; the kernel has chosen the local port already
        for _ in range(bound):
            server = socket.socket()
            self.held.append(server)
            server.bind((HOST, 0))

    def release(self) -> None:
        for held in self.held:
            held.close()
        self.held.clear()

    def close(self) -> None:
        self.release()
        self.listener.close()


@pytest.fixture
def pressure() -> Iterator[PortPressure]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard != resource.RLIM_INFINITY and hard < OUTBOUND + BOUND + 1000:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low to hold {OUTBOUND + BOUND} sockets")
    held = PortPressure()
    try:
        yield held
    finally:
        held.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path / "home", jars_dir(), progress=sys.stderr)
    try:
        yield local
    finally:
        local.down()
        for pids in stack_processes(local.home).values():  # never leak a JVM, even when a test failed
            for pid in pids:
                os.kill(pid, signal.SIGKILL)


def answers(component: str, endpoints: Endpoints) -> bool:
    if component == BROKER:
        return broker_answers(KafkaContext(endpoints.bootstrap_servers), timeout=10)
    return isinstance(ConnectClient(endpoints.connect_url).connectors(), list)


def test_components_come_back_on_their_ports_after_repeated_kill_9(stack: LocalStack, pressure: PortPressure) -> None:
    endpoints = stack.up()
    for component, times in RESTARTS:
        for attempt in range(1, times + 1):
            old = stack_processes(stack.home)[component]
            stack.kill(component)
            pressure.take(OUTBOUND, BOUND)
            try:
                stack.start(component)
                assert answers(component, endpoints), f"{component} restart {attempt}: not answering"
            finally:
                pressure.release()
            assert stack_processes(stack.home)[component] != old
    assert stack.endpoints() == endpoints, "every restart kept the recorded ports"
    assert stack.status().running
