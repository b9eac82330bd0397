"""A stack of three brokers is ready only when every broker lists every other (issue 27, item 7).

The stale answers are built on purpose: a scripted ``broker_answers`` in which one broker, asked
at its own address, does not yet list a peer for a while, as a loaded machine makes it happen.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import IkkaiError
from stack import local_stack
from stack.local_stack import LocalStack
from stack.shape import StackOptions
from stack.stack_config import NodePorts, Ports

PORTS = Ports(9092, 9093, 8083, (NodePorts(9192, 9193), NodePorts(9292, 9293)))


class _Registrations:
    """Broker-1 learns of broker-3 only after ``lag`` answers; every other pair knows each other from the start."""

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self.asked: list[tuple[int, int]] = []

    def __call__(self, cluster: KafkaContext, *_: object, node_id: int | None = None, **__: object) -> bool:
        asked = {9092: 1, 9192: 2, 9292: 3}[int(cluster.bootstrap_servers.rsplit(":", 1)[1])]
        assert node_id is not None
        self.asked.append((asked, node_id))
        if (asked, node_id) == (1, 3) and self.lag > 0:
            self.lag -= 1
            return False
        return True


def test_three_brokers_are_ready_only_once_each_lists_every_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: each node was ready when it answered for itself, and the first topic of replication 3 created right
    after failed with INVALID_REPLICATION_FACTOR ("only 2 broker(s) are registered")."""
    registrations = _Registrations(lag=3)
    monkeypatch.setattr(local_stack, "broker_answers", registrations)
    monkeypatch.setattr(local_stack.time, "sleep", lambda _s: None)
    stack = LocalStack(tmp_path / "home", tmp_path / "jars", StackOptions(brokers=3), progress=io.StringIO())
    stack._wait_all_registered(PORTS, local_stack.time.monotonic())
    assert registrations.lag == 0  # asked again until broker-1 listed broker-3
    assert registrations.asked[-9:] == [(a, n) for a in (1, 2, 3) for n in (1, 2, 3)]  # the last round: all nine


def test_a_broker_that_never_registers_is_named_within_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_stack, "broker_answers", _Registrations(lag=10**9))
    monkeypatch.setattr(local_stack.time, "sleep", lambda _s: None)
    stack = LocalStack(tmp_path / "home", tmp_path / "jars", StackOptions(brokers=3), progress=io.StringIO())
    started = local_stack.time.monotonic() - local_stack.READY_TIMEOUT[local_stack.BROKER]  # the deadline is now
    with pytest.raises(IkkaiError, match="broker-1 does not list broker-3"):
        stack._wait_all_registered(PORTS, started)
