"""Rule 3's client settings: what a caller adds never weakens them; topic creation waits out a lagging cluster."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from ikkai.contract import kafka
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError


def test_a_producer_stays_idempotent_whatever_the_caller_adds() -> None:
    config = KafkaContext("b:9092").producer_config(**{"acks": "1", "enable.idempotence": False, "linger.ms": 5})
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert config["max.in.flight.requests.per.connection"] == 5 and config["linger.ms"] == 5


def test_a_consumer_reads_committed_whatever_the_caller_adds() -> None:
    config = KafkaContext("b:9092").consumer_config(
        "g", **{"isolation.level": "read_uncommitted", "fetch.wait.max.ms": 10}
    )
    assert config["isolation.level"] == "read_committed"
    assert config["group.id"] == "g" and config["fetch.wait.max.ms"] == 10 and config["bootstrap.servers"] == "b:9092"


class _Cluster:
    """Two brokers that lag as a loaded cluster does, scripted: what each answer is, in turn.

    ``create`` answers the topic creations in turn (an error code, or None for success); ``stale``
    says how many metadata answers a broker, asked at its own address, gives before it knows the
    topics with their leaders (it shows none of them, then them without a leader).
    """

    def __init__(self, create: list[int | None], stale: dict[str, int]) -> None:
        self.brokers = {b: SimpleNamespace(id=b, host=f"b{b}", port=9092) for b in (1, 2)}
        self.create, self.stale = create, stale
        self.topics: dict[str, SimpleNamespace] = {}
        self.created: list[str] = []
        self.asked: list[str] = []

    def admin(self, config: dict[str, object], **_: object) -> _Admin:
        return _Admin(self, str(config["bootstrap.servers"]))


class _Admin:
    def __init__(self, cluster: _Cluster, address: str) -> None:
        self.cluster, self.address = cluster, address

    def list_topics(self, *_: object, **__: object) -> SimpleNamespace:
        cluster = self.cluster
        cluster.asked.append(self.address)
        left = cluster.stale.get(self.address, 0)
        if left:
            cluster.stale[self.address] = left - 1
            leaderless = {n: SimpleNamespace(error=None, partitions={0: SimpleNamespace(leader=-1)}) for n in
                          cluster.topics}  # fmt: skip
            return SimpleNamespace(topics=leaderless if left == 1 else {}, brokers=cluster.brokers)
        return SimpleNamespace(topics=dict(cluster.topics), brokers=cluster.brokers)

    def create_topics(self, new: list[Any]) -> dict[str, Future[None]]:
        answers: dict[str, Future[None]] = {}
        for topic in new:
            answer, future = self.cluster.create.pop(0), Future[None]()
            if answer is None:
                self.cluster.topics[topic.topic] = SimpleNamespace(
                    error=None, partitions={p: SimpleNamespace(leader=1) for p in range(topic.num_partitions)}
                )
                self.cluster.created.append(topic.topic)
                future.set_result(None)
            else:
                future.set_exception(KafkaException(KafkaError(answer)))
            answers[topic.topic] = future
        return answers


def test_a_topic_is_created_and_usable_on_every_broker_despite_stale_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 27, item 7: right after "ready", creation failed with INVALID_REPLICATION_FACTOR (a broker was still
    re-registering), and a topic just created was unknown to the broker the next client asked."""
    cluster = _Cluster(create=[KafkaError.INVALID_REPLICATION_FACTOR, None], stale={"b2:9092": 2})
    monkeypatch.setattr(kafka, "AdminClient", cluster.admin)
    monkeypatch.setattr(kafka.time, "sleep", lambda _s: None)
    assert kafka.ensure_topics(KafkaContext("b1:9092"), ["events.x"], 3) == ["events.x"]
    assert cluster.created == ["events.x"]  # asked again after the stale refusal
    assert cluster.stale == {"b2:9092": 0} and cluster.asked[-1] == "b2:9092"  # broker 2 asked until it knew


def test_an_error_that_is_not_a_lag_is_final_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster(create=[KafkaError.TOPIC_AUTHORIZATION_FAILED], stale={})
    monkeypatch.setattr(kafka, "AdminClient", cluster.admin)
    with pytest.raises(ConfigError, match="TOPIC_AUTHORIZATION_FAILED"):
        kafka.ensure_topics(KafkaContext("b1:9092"), ["events.x"], 3)


def test_a_lag_that_outlasts_the_deadline_names_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster(create=[None], stale={"b2:9092": 10**9})
    monkeypatch.setattr(kafka, "AdminClient", cluster.admin)
    monkeypatch.setattr(kafka.time, "sleep", lambda _s: None)
    with pytest.raises(ConfigError, match=r"broker 2 \(b2:9092\) still shows no leader"):
        kafka.ensure_topics(KafkaContext("b1:9092"), ["events.x"], 3, deadline_s=0.2)
