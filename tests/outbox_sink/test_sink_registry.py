"""The outbox sink on the Confluent wire format, against a real registry, worker and broker.

A service that writes requests with ``RegistryCodec`` (``00`` + schema id) gets them delivered,
and its receipts back in the same format, readable by any Confluent deserializer; a request naming
an id the registry does not hold is parked on the DLQ with the reason. The registry is the local
Apicurio (stack/schema_registry.py), which the worker reaches over its Confluent-compatible API.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from demo.receiver import ReferenceReceiver
from ikkai.contract.codec import default_codec
from ikkai.contract.registry import RegistryCodec
from outbox_sink import OutboxRequest
from stack.kit.topic_io import read_all
from stack.schema_registry import LocalSchemaRegistry
from tests.outbox_sink.conftest import SinkFactory, make_request, read_dead_letters
from tests.registry_helpers import running_registry

pytestmark = pytest.mark.integration

FAST_RETRIES = {"backoff_initial_ms": 200, "backoff_max_ms": 2_000, "retry_max_duration_ms": 120_000}
WAIT = 120.0


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    registry: LocalSchemaRegistry
    with running_registry(tmp_path_factory.mktemp("registry")) as registry:
        url = registry.url()
        assert url is not None
        yield url


def produce(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    """Raw values, as a service's idempotent producer writes them (rule 3)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0


def test_a_registry_encoded_request_is_delivered_and_receipted_in_the_confluent_wire_format(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver, registry_url: str
) -> None:
    sink = outbox_sink(**FAST_RETRIES, sets=[f"schema_registry.url={registry_url}", "receipts.format=confluent"])
    codec = RegistryCodec(default_codec().catalog, {"url": registry_url})
    wire = [make_request(i, f"pay-{i}") for i in range(3)]
    single_object = make_request(10, "pay-10")  # a topic may hold both formats while it moves to the registry
    try:
        encoded = [(r.key, codec.encode("outbox_request", r.to_record())) for r in wire]
    finally:
        codec.close()
    assert all(value[:1] == b"\x00" for _, value in encoded), "the Confluent wire format: 00 + schema id"
    produce(sink.endpoints.bootstrap_servers, sink.requests_topic, encoded)
    sink.emit([single_object])
    requests: list[OutboxRequest] = [*wire, single_object]

    records = read_all(sink.cluster, sink.receipts_topic, expect=len(requests), timeout=WAIT)

    applied = {a.idempotency_key: a for a in receiver.applied()}
    assert sorted(applied) == sorted(r.idempotency_key for r in requests)
    assert all(value is not None and value[:1] == b"\x00" for _, value in records), "receipts carry a schema id"
    client = SchemaRegistryClient({"url": registry_url})  # never saw the sink's registration
    deserializer = AvroDeserializer(client)
    receipts = {}
    for key, value in records:
        receipt = deserializer(value, SerializationContext(sink.receipts_topic, MessageField.VALUE))
        assert isinstance(receipt, dict) and key == receipt["decision_id"].encode()
        receipts[receipt["decision_id"]] = receipt
    assert sorted(receipts) == sorted(r.decision_id for r in requests)
    for request in requests:
        receipt = receipts[request.decision_id]
        assert (receipt["outcome"], receipt["status_code"], receipt["key"]) == ("DELIVERED", 201, request.key)
        assert (receipt["effect"], receipt["idempotency_key"]) == (request.effect_name, request.idempotency_key)
    first_value = records[0][1]
    assert first_value is not None
    subject = f"{sink.receipts_topic}-value"  # TopicNameStrategy: outbox.receipts-value on the default topic
    assert client.get_latest_version(subject).schema_id == int.from_bytes(first_value[1:5], "big")


def test_an_id_the_registry_does_not_hold_is_dead_lettered_with_the_reason(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver, registry_url: str
) -> None:
    sink = outbox_sink(**FAST_RETRIES, sets=[f"schema_registry.url={registry_url}"])
    unknown_id = 987_654
    produce(sink.endpoints.bootstrap_servers, sink.requests_topic,
            [("pay-x", b"\x00" + unknown_id.to_bytes(4, "big") + b"\x02\x04")])  # fmt: skip

    [parked] = read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1, timeout=WAIT)

    assert parked.headers["ikkai.dlq.error_class"] == "unknown-schema"
    assert str(unknown_id) in parked.headers["ikkai.dlq.reason"]
    assert receiver.applied() == []
