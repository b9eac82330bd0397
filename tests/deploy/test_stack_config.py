from pathlib import Path

from deploy.stack_config import (
    CONFIG_PROVIDERS,
    Ports,
    broker_properties,
    connect_properties,
    log4j2_properties,
    render_properties,
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
