"""Rule 3's client settings: what a caller adds never weakens them."""

from ikkai.contract import kafka


def test_a_producer_stays_idempotent_whatever_the_caller_adds() -> None:
    config = kafka.producer_config("b:9092", **{"acks": "1", "enable.idempotence": False, "linger.ms": 5})
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert config["max.in.flight.requests.per.connection"] == 5 and config["linger.ms"] == 5


def test_a_consumer_reads_committed_whatever_the_caller_adds() -> None:
    config = kafka.consumer_config("b:9092", "g", **{"isolation.level": "read_uncommitted", "fetch.wait.max.ms": 10})
    assert config["isolation.level"] == "read_committed"
    assert config["group.id"] == "g" and config["fetch.wait.max.ms"] == 10 and config["bootstrap.servers"] == "b:9092"
