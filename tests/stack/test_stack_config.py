from pathlib import Path

import pytest

from stack.stack_config import (
    CONFIG_PROVIDERS,
    NodePorts,
    Ports,
    bootstrap_servers,
    broker_components,
    broker_properties,
    connect_properties,
    log4j2_properties,
    port_roles,
    render_properties,
    replication,
)

PORTS = Ports(broker=19092, controller=19093, connect=18083)


def test_broker_is_one_kraft_node_on_loopback_with_single_replica_internal_topics() -> None:
    props = broker_properties(PORTS, Path("/data"))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    # Transactions on one node need the transaction state log at replication factor 1 and ISR 1.
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert props["log.dirs"] == "/data"
    assert all("0.0.0.0" not in value for value in props.values())  # noqa: S104 - asserting it is absent


def test_connect_worker_is_distributed_with_exactly_once_sources_and_secret_providers() -> None:
    props = connect_properties(PORTS, [Path("/jars/plugins"), Path("/extra")])
    assert props["bootstrap.servers"] == "127.0.0.1:19092"
    assert {"config.storage.topic", "offset.storage.topic", "status.storage.topic", "group.id"} <= props.keys()
    assert props["exactly.once.source.support"] == "enabled"
    assert props["plugin.path"] == "/jars/plugins,/extra"
    assert props["listeners"] == "http://127.0.0.1:18083"
    assert props["config.providers"].split(",") == ["file", "dir", "env"]
    for name, cls in CONFIG_PROVIDERS.items():
        assert props[f"config.providers.{name}.class"] == cls
    for topic in ("config", "offset", "status"):
        assert props[f"{topic}.storage.replication.factor"] == "1"


def test_log4j2_writes_to_the_given_file() -> None:
    props = log4j2_properties(Path("/logs/broker.log"))
    assert props["appender.file.fileName"] == "/logs/broker.log"
    assert props["rootLogger.appenderRef.file.ref"] == props["appender.file.name"]


def test_render_properties_is_sorted_escapes_and_comments_the_header() -> None:
    text = render_properties({"b": "two\nlines", "a": "C:\\path"}, header="made by a test")
    assert text.splitlines() == ["# made by a test", "a=C:\\\\path", "b=two\\nlines"]


# -- three nodes -----------------------------------------------------------------------------------

THREE = Ports(
    broker=21001, controller=21002, connect=21007, more_nodes=(NodePorts(21003, 21004), NodePorts(21005, 21006))
)


def test_one_node_keeps_its_port_names_and_three_name_theirs_per_node() -> None:
    assert PORTS.as_dict() == {"broker": 19092, "controller": 19093, "connect": 18083}
    assert Ports.from_dict(PORTS.as_dict()) == PORTS
    assert THREE.as_dict() == {
        "broker-1": 21001, "controller-1": 21002, "broker-2": 21003, "controller-2": 21004,
        "broker-3": 21005, "controller-3": 21006, "connect": 21007,
    }  # fmt: skip
    assert Ports.from_dict(THREE.as_dict()) == THREE
    assert broker_components(1) == ("broker",)
    assert broker_components(3) == ("broker-1", "broker-2", "broker-3")
    assert port_roles(1) == ("broker", "controller", "connect")


def test_three_nodes_are_three_voters_each_on_its_own_ports_and_data_dir() -> None:
    nodes = [broker_properties(THREE, Path(f"/data-{i}"), node_id=i) for i in (1, 2, 3)]
    voters = "1@127.0.0.1:21002,2@127.0.0.1:21004,3@127.0.0.1:21006"
    assert {node["controller.quorum.voters"] for node in nodes} == {voters}
    assert [node["node.id"] for node in nodes] == ["1", "2", "3"]
    assert nodes[1]["listeners"] == "PLAINTEXT://127.0.0.1:21003,CONTROLLER://127.0.0.1:21004"
    assert nodes[1]["advertised.listeners"] == "PLAINTEXT://127.0.0.1:21003"
    assert [node["log.dirs"] for node in nodes] == ["/data-1", "/data-2", "/data-3"]
    assert bootstrap_servers(THREE) == "127.0.0.1:21001,127.0.0.1:21003,127.0.0.1:21005"


def test_three_nodes_replicate_everything_three_times_and_need_two_in_sync() -> None:
    props = broker_properties(THREE, Path("/data-2"), node_id=2)
    factors = ("default", "offsets.topic", "transaction.state.log", "share.coordinator.state.topic")
    for key in (f"{name}.replication.factor" for name in factors):
        assert props[key] == "3", key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr", "share.coordinator.state.topic.min.isr"):
        assert props[key] == "2", key
    connect = connect_properties(THREE, [Path("/jars/plugins")])
    assert connect["bootstrap.servers"] == bootstrap_servers(THREE)
    for topic in ("config", "offset", "status"):
        assert connect[f"{topic}.storage.replication.factor"] == "3"


def test_replication_follows_the_broker_count_up_to_three() -> None:
    assert [replication(count) for count in (1, 2, 3, 5)] == [(1, 1), (2, 1), (3, 2), (3, 2)]
    with pytest.raises(ValueError, match="at least one broker"):
        broker_components(0)


def test_a_group_of_several_workers_moves_a_departed_workers_tasks_after_seconds_not_minutes() -> None:
    # One worker: no other could take its tasks, so they wait for nobody. Several: a short delay, not Kafka's 5 min.
    assert connect_properties(PORTS, [Path("/jars/plugins")])["scheduled.rebalance.max.delay.ms"] == "0"
    group = connect_properties(PORTS, [Path("/jars/plugins")], group_size=2)
    assert group["scheduled.rebalance.max.delay.ms"] == "5000"
