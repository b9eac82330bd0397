"""Fixtures for the outbox sink on the real stack: a reference receiver and a deployed sink per test."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from connectors.render import ConnectorBundle, RenderedBundle, load_bundle
from demo.receiver import ReferenceReceiver
from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest, bundle_folder
from deploy.connect_rest import ConnectClient
from deploy.reconcile import Reconciler
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from outbox_sink import OutboxEmitter, OutboxRequest, ReceiptReader, create_outbox_topics, derive_decision_id
from stack.kit.topic_io import create_topic, read_all, unique
from tests.outbox_sink.hostile_server import HostileServer

MODEL = "fraud@test"
# The fixture's keywords and the outbox-sink bundle values they set: every knob a test turns is a
# value of the bundle, so the tests deploy the config the platform deploys.
SETTING_VALUES = {
    "tasks_max": "tasks_max",
    "backoff_initial_ms": "retry.backoff_initial_ms",
    "backoff_max_ms": "retry.backoff_max_ms",
    "retry_max_duration_ms": "retry.max_duration_ms",
    "http_request_timeout_ms": "http.request_timeout_ms",
    "max_in_flight_requests": "http.max_in_flight_requests",
}


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


def requests_on(cluster: KafkaContext, topic: str, *, isolation: str = "read_committed") -> list[OutboxRequest]:
    """The outbox requests on ``topic``, as a consumer at ``isolation`` reads them."""
    codec = default_codec()
    return [
        OutboxRequest.from_record(codec.decode("outbox_request", v))
        for _, v in read_all(cluster, topic, isolation=isolation)
        if v
    ]


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

    @property
    def cluster(self) -> KafkaContext:
        """The Kafka cluster of the worker it runs on, as its clients reach it (the stack's record)."""
        return KafkaContext.recorded(self.endpoints)

    def emitter(self, transactional_id: str | None = None) -> OutboxEmitter:
        return OutboxEmitter(self.cluster, transactional_id=transactional_id, topic=self.requests_topic)

    def emit(self, requests: list[OutboxRequest]) -> None:
        with self.emitter() as emitter:
            for request in requests:
                emitter.emit(request)

    def receipts(self) -> ReceiptReader:
        reader = ReceiptReader(self.cluster, topic=self.receipts_topic)
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


@pytest.fixture
def hostile_server() -> Iterator[HostileServer]:
    """The scripted external server (tests/outbox_sink/hostile_server.py): behaviour per path, stopped afterwards."""
    with HostileServer() as server:
        yield server


@pytest.fixture
def topics(cluster: KafkaContext) -> Iterator[tuple[str, str]]:
    """A requests topic (three partitions) and a service's own topic, fresh for the test (the emitter tests)."""
    yield create_topic(cluster, unique("outbox.requests"), 3), create_topic(cluster, unique("decisions.fraud"))


def outbox_bundle(owner_prefix: str) -> ConnectorBundle:
    """The shipped outbox-sink bundle under its own owner prefix, so tests never touch each other's connectors."""
    bundle = load_bundle(bundle_folder("outbox-sink"))
    return replace(bundle, manifest=replace(bundle.manifest, owner_prefix=owner_prefix))


def bundle_values(settings: Mapping[str, object]) -> list[str]:
    """``--set`` values of the outbox-sink bundle for a test's settings; a knob the bundle has no value for fails."""
    sets = []
    for name, value in settings.items():
        if name not in SETTING_VALUES:
            raise TypeError(f"{name} is not a setting of the outbox sink fixture: one of {', '.join(SETTING_VALUES)}")
        sets.append(f"{SETTING_VALUES[name]}={value}")
    return sets


def under_owner(rendered: RenderedBundle, owner_prefix: str) -> RenderedBundle:
    """``rendered`` with its connectors renamed under ``owner_prefix``: the same configs, a name no other test uses."""
    manifest = rendered.bundle.manifest
    bundle = replace(rendered.bundle, manifest=replace(manifest, owner_prefix=owner_prefix))
    connectors = []
    for c in rendered.connectors:
        name = owner_prefix + c.name.removeprefix(manifest.owner_prefix)
        connectors.append(replace(c, name=name, config={**c.config, "name": name}))
    return replace(rendered, bundle=bundle, connectors=tuple(connectors))


def render_sink(bootstrap: str, receiver_url: str, topics: Mapping[str, str], sets: Sequence[str]) -> RenderedBundle:
    """The shipped outbox-sink bundle for ``dev``, rendered by the function ``ikkai bundle render`` calls, with the
    test's broker, topics and targets set through the bundle's own values (``--set``), under a connector name of its
    own (the config is the rendered one, only ``name`` differs)."""
    overrides = (
        f"kafka.bootstrap_servers={bootstrap}",
        *(f"topics.{k}={v}" for k, v in topics.items()),
        f"targets.payments-api.url={receiver_url}/payments",
        f"targets.notifications-api.url={receiver_url}/notifications",
        "targets.notifications-api.method=PUT",
        *sets,
    )
    shipped = bundle_ops.rendered(BundleRequest("outbox-sink", "dev", overrides))
    return under_owner(shipped, unique("test-outbox-sink") + ".")


def with_targets(rendered: RenderedBundle, urls: Mapping[str, str]) -> RenderedBundle:
    """``rendered`` with more target aliases, each laid out as the bundle's template lays out ``targets.<alias>.url``
    (listed last in ``outbox.targets``; ``outbox.target.<alias>.method`` POST and ``.url``).

    For a deployment with more targets than ``--set`` can carry: the render checks that each ``--set`` is used by
    rendering the bundle without it, so a thousand of them cost a million renders; a mapping cannot be one ``--set``.
    ``test_hostile_limits`` checks the layout against the template's.
    """
    connectors = []
    for c in rendered.connectors:
        config = {**c.config, "outbox.targets": ",".join([c.config["outbox.targets"], *urls])}
        for alias, url in urls.items():
            config[f"outbox.target.{alias}.method"] = "POST"
            config[f"outbox.target.{alias}.url"] = url
        connectors.append(replace(c, config=config))
    return replace(rendered, connectors=tuple(connectors))


def deploy_sink(
    endpoints: Endpoints,
    receiver: ReferenceReceiver,
    *,
    partitions: int = 3,
    sets: Sequence[str] = (),
    more_targets: Mapping[str, str] | None = None,
    **settings: object,
) -> DeployedSink:
    """Render the outbox-sink bundle and apply it as ``ikkai bundle apply`` does (lint, validate, PUT, wait).

    ``settings`` are the keywords of ``SETTING_VALUES``, ``sets`` any further bundle values; ``more_targets``
    (alias: URL) are added to the rendered config as the template adds targets (``with_targets``).
    """
    topics = {"requests": unique("outbox.requests"), "receipts": unique("outbox.receipts"), "dlq": unique("outbox")}
    dlq_topic = "dlq." + topics["dlq"]
    create_outbox_topics(
        KafkaContext.recorded(endpoints),
        requests=topics["requests"],
        receipts=topics["receipts"],
        dlq=dlq_topic,
        partitions=partitions,
    )
    rendered = render_sink(endpoints.bootstrap_servers, receiver.url, topics, [*bundle_values(settings), *sets])
    if more_targets:
        rendered = with_targets(rendered, more_targets)
    [connector] = rendered.connectors
    client = ConnectClient(endpoints.connect_url)
    classes = {p["class"] for p in client.connector_plugins()}
    assert connector.connector_class in classes, (
        f"the worker at {endpoints.connect_url} has no {connector.connector_class}; `ikkai setup` builds it "
        "(stack/local_plugins.py) and the embedded stack puts it on plugin.path"
    )
    Reconciler(client).apply(rendered)
    return DeployedSink(connector.name, endpoints, client, receiver, topics["requests"], topics["receipts"], dlq_topic)


@pytest.fixture
def outbox_sink(stack: Endpoints, receiver: ReferenceReceiver) -> Iterator[SinkFactory]:
    """Deploys a sink (settings as for ``deploy_sink``) against ``receiver``; removed afterwards."""
    deployed: list[DeployedSink] = []

    def factory(**settings: Any) -> DeployedSink:
        sink = deploy_sink(stack, receiver, **settings)
        deployed.append(sink)
        return sink

    yield factory
    for sink in deployed:
        for reader in sink.readers:
            reader.close()
        sink.client.delete_connector(sink.name)
