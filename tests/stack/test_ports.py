"""Where the embedded stack listens: never inside the kernel's ephemeral port range.

An outbound connection (a Kafka client, the receiver, a Spark job binding port 0) may be
given any port of that range while a component is down; a listener there could then never
come back on its recorded port.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ikkai.settings import jars_dir
from stack.errors import NoFreePortError, PortInUseError, StackError
from stack.local_stack import BROKER, CONNECT, LocalStack
from stack.ports import (
    DEFAULT_EPHEMERAL,
    PortRange,
    choose_ports,
    ephemeral_range,
    free_port,
    listening_ports,
    parse_port_range,
    parse_reserved_ports,
)
from stack.processes import stack_processes
from stack.shape import StackOptions
from stack.stack_config import Ports

KERNEL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.fixture
def kernel_range() -> range:
    if not KERNEL_RANGE_FILE.exists():
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range here (not Linux)")
    low, high = (int(part) for part in KERNEL_RANGE_FILE.read_text().split())
    return range(low, high + 1)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    for pids in stack_processes(home.resolve()).values():  # a JVM started by a failing test
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


def a_port_inside(kernel_range: range) -> int:
    """A free port the kernel would hand out itself (bind to port 0 picks inside its range)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    assert port in kernel_range
    return port


def test_the_stack_chooses_its_ports_outside_the_kernels_ephemeral_range(home: Path, kernel_range: range) -> None:
    stack = LocalStack(home, jars_dir())
    chosen = [stack._choose_ports() for _ in range(200)]
    inside = sorted({p for ports in chosen for p in ports.as_dict().values() if p in kernel_range})
    assert not inside, f"{len(inside)} chosen ports inside {kernel_range}: {inside[:10]}"
    assert len({ports.connect for ports in chosen}) > 20, "ports are picked at random, not one fixed guess"


def test_free_port_is_outside_the_kernels_ephemeral_range(kernel_range: range) -> None:
    picked = [free_port() for _ in range(300)]
    assert not [p for p in picked if p in kernel_range]


def test_saved_ports_inside_the_ephemeral_range_move_on_the_next_up(home: Path, kernel_range: range) -> None:
    home.mkdir()
    old = {"broker": a_port_inside(kernel_range), "controller": free_port(), "connect": a_port_inside(kernel_range)}
    (home / "stack.json").write_text(json.dumps({"ports": old, "cluster_id": "x"}))
    ports = LocalStack(home, jars_dir())._choose_ports()
    assert ports.controller == old["controller"], "a saved port outside the range is kept (stable endpoints)"
    assert ports.broker not in kernel_range and ports.connect not in kernel_range


def test_a_pinned_port_is_kept_even_inside_the_ephemeral_range(home: Path, kernel_range: range) -> None:
    pinned = a_port_inside(kernel_range)
    ports = LocalStack(home, jars_dir(), StackOptions(connect_port=pinned))._choose_ports()
    assert ports.connect == pinned


@pytest.mark.parametrize("component", [BROKER, CONNECT])
def test_a_restart_on_a_taken_port_fails_at_once_and_starts_nothing(home: Path, component: str) -> None:
    home.mkdir()
    ports = {"broker": free_port(), "controller": free_port(), "connect": free_port()}
    (home / "stack.json").write_text(json.dumps({"ports": ports, "cluster_id": "x"}))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[component]))
        holder.listen()
        started = time.monotonic()
        with pytest.raises(PortInUseError) as raised:
            LocalStack(home, jars_dir()).start(component)
        elapsed = time.monotonic() - started
    assert elapsed < 2, f"took {elapsed:.1f}s: the JVM was started before the port was checked"
    assert not (home / "logs" / f"{component}.out").exists(), "nothing may be started"
    assert raised.value.port == ports[component] and raised.value.role == component
    assert f"ss -ltnp 'sport = :{ports[component]}'" in str(raised.value)


# -- the pure parts, with made-up ranges ---------------------------------------------------------


def test_the_kernels_range_file_is_parsed() -> None:
    assert parse_port_range("32768\t60999\n") == PortRange(32768, 60999)
    assert parse_port_range("1024 65535") == PortRange(1024, 65535)
    for garbage in ("", "32768", "1 2 3", "60999 32768", "0 100", "1024 70000", "a b"):
        with pytest.raises(ValueError):
            parse_port_range(garbage)


def test_reserved_ports_are_parsed() -> None:
    assert parse_reserved_ports("\n") == frozenset()
    assert parse_reserved_ports("8080,9000-9002\n") == {8080, 9000, 9001, 9002}


def test_an_unreadable_range_falls_back_to_linuxs_and_the_iana_range(tmp_path: Path) -> None:
    (tmp_path / "range").write_text("40000\t50000\n")
    assert ephemeral_range(tmp_path / "range") == PortRange(40000, 50000)
    assert ephemeral_range(tmp_path / "missing") == DEFAULT_EPHEMERAL == PortRange(32768, 65535)
    (tmp_path / "range").write_text("nonsense\n")
    assert ephemeral_range(tmp_path / "range") == DEFAULT_EPHEMERAL


def test_listening_ports_lie_outside_the_range_and_the_reserved_ports() -> None:
    ports = listening_ports(PortRange(32768, 60999), reserved={20000, 61000})
    assert ports[0] == 20001 and ports[-1] == 65535
    assert not [p for p in ports if 32768 <= p <= 60999 or p in {20000, 61000}]
    assert listening_ports(PortRange(15000, 65535)) == list(range(1024, 15000)), "lower ports only as a last resort"
    assert listening_ports(PortRange(1024, 65535)) == []


def test_free_port_with_a_made_up_range_stays_outside_it() -> None:
    picked = {free_port(ephemeral=PortRange(20000, 65000), reserved=()) for _ in range(100)}
    assert picked <= set(range(65001, 65536)) and len(picked) > 20
    low = {free_port(ephemeral=PortRange(25000, 65535), reserved=()) for _ in range(100)}
    assert low <= set(range(20000, 25000))


def test_free_port_skips_taken_avoided_and_reserved_ports() -> None:
    candidates = PortRange(20000, 65530)  # leaves 65531-65535
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 65535))
        holder.listen()
        for _ in range(20):
            port = free_port(ephemeral=candidates, reserved={65531}, avoid={65532, 65533})
            assert port == 65534


def test_no_port_outside_the_range_is_a_clear_error() -> None:
    with pytest.raises(NoFreePortError) as raised:
        free_port(ephemeral=PortRange(1024, 65535), reserved=())
    assert "outside the kernel's ephemeral range 1024-65535" in str(raised.value)
    assert "ip_local_port_range" in str(raised.value) and "--broker-port" in str(raised.value)


def test_chosen_ports_keep_saved_ones_outside_the_range_and_replace_those_inside() -> None:
    ephemeral = PortRange(30000, 60000)
    outside = free_port(ephemeral=ephemeral, reserved=())
    inside = 40001
    for _ in range(100):
        ports = choose_ports({}, Ports(broker=inside, controller=outside, connect=inside), ephemeral=ephemeral)
        assert ports.controller == outside
        assert ports.broker not in ephemeral and ports.connect not in ephemeral
        assert len({ports.broker, ports.controller, ports.connect}) == 3


def test_a_new_cluster_id_never_starts_with_a_dash() -> None:
    """kafka-storage reads "--cluster-id -abc" as a missing argument: 1 in 64 random ids did, and the stack failed."""
    from stack.state import new_cluster_id as _new_cluster_id

    ids = [_new_cluster_id() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids)


def test_three_brokers_get_seven_distinct_ports_outside_the_range_and_keep_saved_ones() -> None:
    ephemeral = PortRange(30000, 60000)
    ports = choose_ports({}, None, ephemeral=ephemeral, brokers=3)
    chosen = ports.as_dict()
    assert len(ports.nodes) == 3 and len(set(chosen.values())) == 7
    assert not [p for p in chosen.values() if p in ephemeral]
    assert choose_ports({}, ports, ephemeral=ephemeral, brokers=3) == ports, "endpoints stay stable"
    pinned = free_port(ephemeral=ephemeral, reserved=())
    assert choose_ports({"broker": pinned}, None, ephemeral=ephemeral, brokers=3).nodes[0].broker == pinned


def test_up_with_another_broker_count_than_the_homes_refuses_and_says_how_to_start_over(home: Path) -> None:
    home.mkdir()
    ports = {"broker": free_port(), "controller": free_port(), "connect": free_port()}
    (home / "stack.json").write_text(json.dumps({"ports": ports, "cluster_id": "x"}))  # an older ikkai's: no count
    stack = LocalStack(home, jars_dir(), StackOptions(brokers=3))
    assert stack.broker_count == 1 and stack.components == ("broker", "connect")
    with pytest.raises(StackError) as raised:
        stack.up()
    assert "holds a stack of 1 broker(s), not 3" in str(raised.value)
    assert f"ikkai stack --home {home.resolve()} down --purge" in str(raised.value)
    assert not (home / "logs").exists(), "nothing may be started"
    with pytest.raises(StackError, match="name one of broker, connect"):
        stack.kill("broker-2")


def test_the_cluster_ports_are_kept_moved_out_of_the_ephemeral_range_and_never_the_stacks(
    home: Path, kernel_range: range
) -> None:
    from stack.spark_cluster import cluster_port_roles
    from stack.state import StackHome

    home.mkdir()
    stack_ports = Ports(broker=free_port(), controller=free_port(), connect=free_port())
    kept, inside = free_port(avoid=stack_ports.as_dict().values()), a_port_inside(kernel_range)
    saved = {"spark-master": kept, "spark-master-ui": inside, "spark-worker-1": stack_ports.connect}
    (home / "stack.json").write_text(json.dumps({"cluster_ports": saved}))
    roles = cluster_port_roles(spark_workers=2, connect_workers=2)
    assert roles == ("spark-master", "spark-master-ui", "spark-worker-1", "spark-worker-1-ui", "spark-worker-2",
                     "spark-worker-2-ui", "connect-2")  # fmt: skip
    chosen = StackHome(home.resolve()).choose_cluster_ports(roles, stack_ports)
    assert chosen["spark-master"] == kept, "a saved port outside the range is kept (a restart keeps the master URL)"
    assert chosen["spark-master-ui"] not in kernel_range
    assert chosen["spark-worker-1"] != stack_ports.connect, "never a port of the brokers or the first worker"
    assert len(set(chosen.values()) | set(stack_ports.as_dict().values())) == len(roles) + 3
    assert json.loads((home / "stack.json").read_text())["cluster_ports"] == chosen
    assert cluster_port_roles(spark_workers=0, connect_workers=1) == (), "the default stack has no other port"
