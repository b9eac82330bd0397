"""Fixtures for the outbox sink on the real stack: a reference receiver and a deployed sink per test."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError

from demo.pipeline_io import unique
from demo.receiver import ReferenceReceiver
from deploy.connect_rest import ConnectClient
from ikkai.settings import Endpoints
from outbox_sink import (
    OutboxEmitter,
    OutboxRequest,
    ReceiptReader,
    TargetAlias,
    create_outbox_topics,
    derive_decision_id,
    outbox_sink_config,
)
from outbox_sink.connector_config import CONNECTOR_CLASS
from tests.connect_helpers import wait_running

MODEL = "fraud@test"


def make_request(i: int, key: str, *, target: str = "payments-api", prefix: str = "holds") -> OutboxRequest:
    decision_id = derive_decision_id(key, f"evt-{i}", MODEL)
    return OutboxRequest(
        decision_id=decision_id,
        key=key,
        target=target,
        path=f"/{prefix}/{decision_id[:16]}",
        body=json.dumps({"payment_id": key, "seq": i}).encode(),
        created_at=1_700_000_000_000 + i,
        model_version=MODEL,
    )


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]


def read_dead_letters(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> list[DeadLetter]:
    """Up to ``expect`` records of ``topic`` from the start, with headers, as a read_committed consumer sees them."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique("ikkai-test-dlq"), "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe([topic])
    found: list[DeadLetter] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < expect and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error.str()
                continue
            headers = {k: (v or b"").decode(errors="replace") for k, v in message.headers() or []}
            found.append(DeadLetter(message.key(), message.value(), headers))
    finally:
        consumer.close()
    return found


@dataclass
class DeployedSink:
    """One outbox sink deployed on the worker, with its own topics, and the means to drive and observe it."""

    name: str
    endpoints: Endpoints
    client: ConnectClient
    receiver: ReferenceReceiver
    requests_topic: str
    receipts_topic: str
    dlq_topic: str
    readers: list[ReceiptReader] = field(default_factory=list)

    def emitter(self, transactional_id: str | None = None) -> OutboxEmitter:
        return OutboxEmitter(
            self.endpoints.bootstrap_servers, transactional_id=transactional_id, topic=self.requests_topic
        )

    def emit(self, requests: list[OutboxRequest]) -> None:
        with self.emitter() as emitter:
            for request in requests:
                emitter.emit(request)

    def receipts(self) -> ReceiptReader:
        reader = ReceiptReader(self.endpoints.bootstrap_servers, topic=self.receipts_topic)
        self.readers.append(reader)
        return reader

    def task_states(self) -> list[str]:
        tasks: list[dict[str, str]] = self.client.connector_status(self.name)["tasks"]
        return [t["state"] for t in tasks]


SinkFactory = Callable[..., DeployedSink]


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[ReferenceReceiver]:
    with ReferenceReceiver(tmp_path / "receiver.sqlite") as r:
        yield r


def deploy_sink(
    endpoints: Endpoints, receiver: ReferenceReceiver, *, partitions: int = 3, **settings: object
) -> DeployedSink:
    client = ConnectClient(endpoints.connect_url)
    classes = {p["class"] for p in client.connector_plugins()}
    assert CONNECTOR_CLASS in classes, (
        f"the worker at {endpoints.connect_url} has no {CONNECTOR_CLASS}; `ikkai setup` builds it "
        "(deploy/local_plugins.py) and the embedded stack puts it on plugin.path"
    )
    name = unique("outbox-sink")
    requests_topic, receipts_topic, dlq_topic = (
        unique("outbox.requests"),
        unique("outbox.receipts"),
        unique("dlq.outbox"),
    )
    create_outbox_topics(
        endpoints.bootstrap_servers,
        requests=requests_topic,
        receipts=receipts_topic,
        dlq=dlq_topic,
        partitions=partitions,
    )
    config = outbox_sink_config(
        receipts_bootstrap_servers=endpoints.bootstrap_servers,
        targets=[
            TargetAlias("payments-api", receiver.url + "/payments"),
            TargetAlias("notifications-api", receiver.url + "/notifications", method="PUT"),
        ],
        topic=requests_topic,
        receipts_topic=receipts_topic,
        dlq_topic=dlq_topic,
        **settings,  # type: ignore[arg-type]
    )
    client.put_connector_config(name, config)
    wait_running(client, name)
    return DeployedSink(name, endpoints, client, receiver, requests_topic, receipts_topic, dlq_topic)


@pytest.fixture
def outbox_sink(stack: Endpoints, receiver: ReferenceReceiver) -> Iterator[SinkFactory]:
    """Deploys a sink (settings as for ``outbox_sink_config``) against ``receiver``; removed afterwards."""
    deployed: list[DeployedSink] = []

    def factory(**settings: object) -> DeployedSink:
        sink = deploy_sink(stack, receiver, **settings)
        deployed.append(sink)
        return sink

    yield factory
    for sink in deployed:
        for reader in sink.readers:
            reader.close()
        sink.client.delete_connector(sink.name)
