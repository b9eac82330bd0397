"""An environment that names a schema registry: ikkai's writers and readers speak the Confluent wire format.

Against a real registry (Apicurio, Confluent-compatible API) and the real stack. Each check reads
with confluent-kafka's own ``AvroDeserializer`` through a client that never saw ikkai's
registrations (or writes with its ``AvroSerializer``), as any tool of that environment would.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.ids import decision_id
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.registry import MAGIC, RegistryCodec
from ikkai.contract.wire_format import CONFIG_VAR, URL_VAR, environment_codec
from outbox_sink import OutboxEmitter, OutboxRequest, ReceiptReader, derive_decision_id
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique
from tests.registry_helpers import running_registry

pytestmark = pytest.mark.integration

EVENTS = 60  # seed 42: holds and reviews among them, so outbox requests too
PARTITIONS = 2


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_registry(tmp_path_factory.mktemp("registry")) as registry:
        url = registry.url()
        assert url is not None
        yield url


@pytest.fixture
def environment(registry_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """This process (and the jobs it starts) in an environment whose values go through the registry."""
    monkeypatch.setenv(URL_VAR, registry_url)
    monkeypatch.delenv(CONFIG_VAR, raising=False)
    return registry_url


def confluent_reader(url: str, topic: str) -> Callable[[bytes], dict[str, Any]]:
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": url}))  # its own client: ids come from the registry
    context = SerializationContext(topic, MessageField.VALUE)

    def read(value: bytes) -> dict[str, Any]:
        assert value[:1] == MAGIC, f"not the Confluent wire format: {value[:5].hex()}"
        record = deserializer(value, context)
        assert isinstance(record, dict)
        return {k: _millis(v) for k, v in record.items()}

    return read


def _millis(value: object) -> object:
    """Confluent's deserializer gives timestamp-millis as aware datetimes; ikkai's codec as epoch millis."""
    return round(value.timestamp() * 1000) if isinstance(value, datetime) else value


def request(i: int) -> OutboxRequest:
    key = f"pay-{i}"
    decision = derive_decision_id(key, f"evt-{i}", "fraud@test")
    return OutboxRequest(
        decision_id=decision, key=key, target="payments-api", path=f"/holds/{decision[:16]}",
        body=json.dumps({"payment_id": key}).encode(), created_at=1_700_000_000_000 + i, model_version="fraud@test",
    )  # fmt: skip


def test_the_emitter_writes_what_confluents_deserializer_reads(cluster: KafkaContext, environment: str) -> None:
    topic = create_topic(cluster, unique("outbox.requests"))
    sent = [request(i) for i in range(3)]
    emitter = OutboxEmitter(cluster, transactional_id=unique("emitter"), topic=topic)  # no codec: the environment's
    try:
        with emitter.transaction():
            for r in sent:
                emitter.emit(r)
    finally:
        emitter.close()
    read = confluent_reader(environment, topic)
    received = [read(value) for _, value in flat(by_partition(cluster, topic)) if value is not None]
    assert received == [r.to_record() for r in sent]


def test_the_receipts_reader_reads_what_confluents_serializer_wrote(cluster: KafkaContext, environment: str) -> None:
    topic = create_topic(cluster, unique("outbox.receipts"))
    schema = default_codec().catalog.get("outbox_receipt")
    serializer = AvroSerializer(SchemaRegistryClient({"url": environment}), json.dumps(schema.schema))
    receipt = {
        "decision_id": "d" * 64, "key": "pay-1", "target": "payments-api", "outcome": "DELIVERED",
        "status_code": 200, "attempts": 1, "first_attempt_at": 1_700_000_000_000,
        "last_attempt_at": 1_700_000_000_500, "response_digest": None, "reason": None,
        "effect": "hold", "idempotency_key": "k" * 64,
    }  # fmt: skip
    value = serializer(receipt, SerializationContext(topic, MessageField.VALUE))
    assert value is not None and value[:1] == MAGIC
    producer = Producer(cluster.producer_config())
    producer.produce(topic, key=b"pay-1", value=value)
    assert producer.flush(30) == 0
    with ReceiptReader(cluster, topic=topic) as reader:  # no codec: the environment's
        got = reader.wait_for("d" * 64, timeout_s=60)
    assert got["d" * 64].outcome == "DELIVERED" and got["d" * 64].effect == "hold"


def test_the_infer_job_writes_decisions_and_requests_confluents_deserializer_reads(
    cluster: KafkaContext, environment: str, tmp_path: Path
) -> None:
    payments = payment_records(simulate(42, payments=EVENTS).payments)
    source = create_topic(cluster, unique("events.payments"), PARTITIONS)
    codec = environment_codec()  # the input as enrich writes it in this environment: the wire format too
    assert isinstance(codec, RegistryCodec)
    produce_payments(cluster, source, payments, PARTITIONS, codec)
    name = unique("reg")
    topics = InferTopics(source, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)

    job = InferProcess(cluster, topics, tmp_path / "checkpoint", name)  # inherits the environment
    assert job.wait() == 0, job.tail()

    read_decision, read_request = (
        confluent_reader(environment, topics.decisions),
        confluent_reader(environment, topics.outbox),
    )
    decisions = [read_decision(v) for _, v in flat(by_partition(cluster, topics.decisions)) if v is not None]
    requests = [read_request(v) for _, v in flat(by_partition(cluster, topics.outbox)) if v is not None]
    assert Counter(d["event_id"] for d in decisions) == Counter(str(p["event_id"]) for p in payments)
    for d in decisions:
        assert d["decision_id"] == decision_id(d["payment_id"], d["event_id"], d["model_version"])
    by_id = {d["decision_id"]: d for d in decisions}
    expected = {"hold": 2, "review": 1, "approve": 0}
    per_decision = Counter(r["decision_id"] for r in requests)
    assert set(per_decision) <= set(by_id)
    assert all(per_decision.get(i, 0) == expected[d["action"]] for i, d in by_id.items())
    assert requests, "the test data must make the job write outbox requests"
    assert flat(by_partition(cluster, topics.dlq)) == []
