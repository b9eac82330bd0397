"""OutboxEmitter's mode rules, without a broker.

Own output only inside a transaction of a transactional emitter; input offsets only through a
TransactionalConsumer (never auto-committed) inside such a transaction.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from outbox_sink import OutboxDeliveryError, OutboxEmitter
from outbox_sink.emitter import TransactionalConsumer, transactional_consumer_config
from outbox_sink.errors import ConsumedOffsetsError, OutboxRequestError
from tests.outbox_sink.conftest import make_request

NOWHERE = "127.0.0.1:9"  # nothing listens: these checks fail before anything is sent


def test_an_idempotent_emitter_refuses_own_output_and_transactions() -> None:
    emitter = OutboxEmitter(KafkaContext(NOWHERE), producer_config={"log_level": 0})  # quiet: nothing listens there
    assert not emitter.transactional
    with pytest.raises(OutboxDeliveryError) as caught:
        emitter.produce("decisions.fraud", b"pay-1", b"x")
    assert caught.value.fatal
    with pytest.raises(OutboxDeliveryError), emitter.transaction():
        pass
    emitter.close()


def quiet_consumer(**config: object) -> dict[str, object]:
    return {"bootstrap.servers": NOWHERE, "group.id": "svc", "log_level": 0, **config}


def test_committing_input_offsets_needs_a_transactional_emitter() -> None:
    emitter = OutboxEmitter(KafkaContext(NOWHERE), producer_config={"log_level": 0})
    consumer = TransactionalConsumer(quiet_consumer())
    try:
        with pytest.raises(OutboxDeliveryError) as caught, emitter.transaction(consumer):
            pass
        assert caught.value.fatal
        assert "transactional_id" in str(caught.value)
        with pytest.raises(ConsumedOffsetsError):
            emitter.send_offsets()  # only inside `with emitter.transaction(consumer):`
    finally:
        consumer.close()
        emitter.close()


def test_a_consumer_the_emitter_cannot_check_is_refused() -> None:
    emitter = OutboxEmitter(KafkaContext(NOWHERE), producer_config={"log_level": 0})
    consumer = Consumer(quiet_consumer())  # auto-commits by default: offsets would commit without the requests
    try:
        with pytest.raises(ConsumedOffsetsError) as caught, emitter.transaction(consumer):  # type: ignore[arg-type]
            pass
        assert "TransactionalConsumer" in str(caught.value)
    finally:
        consumer.close()
        emitter.close()


@pytest.mark.parametrize(
    ("key", "value"),
    [("enable.auto.commit", True), ("enable.auto.commit", "true"), ("isolation.level", "read_uncommitted")],
)
def test_a_transactional_consumer_refuses_settings_that_break_exactly_once(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        transactional_consumer_config(quiet_consumer(**{key: value}))
    assert caught.value.key == key
    assert caught.value.fix


def test_a_transactional_consumer_needs_a_group_and_never_auto_commits() -> None:
    with pytest.raises(ConfigError) as caught:
        transactional_consumer_config({"bootstrap.servers": NOWHERE})
    assert caught.value.key == "group.id"
    config = transactional_consumer_config(quiet_consumer(**{"enable.auto.commit": "false"}))
    assert config["enable.auto.commit"] is False
    assert config["isolation.level"] == "read_committed"


def test_a_transactional_consumer_refuses_to_commit_on_its_own() -> None:
    consumer = TransactionalConsumer(quiet_consumer())
    try:
        with pytest.raises(ConsumedOffsetsError):
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"traceparent": "00-客户-01"}, "U+5BA2"),
        ({"tracestate": "a=1\r\nX-Evil: 1"}, "U+000D"),
        ({"TraceParent": "t" * (8 * 1024 + 1)}, "8193 bytes"),
        ({"traceparent": b"00-a-b-01"}, "not a pair of strings"),  # type: ignore[dict-item]
    ],
)
def test_trace_headers_the_sink_could_not_send_are_refused_before_anything_is_queued(
    headers: dict[str, str], said: str
) -> None:
    emitter = OutboxEmitter(KafkaContext(NOWHERE), producer_config={"log_level": 0})
    try:
        with pytest.raises(OutboxRequestError) as caught:
            emitter.emit(make_request(1, "pay-1"), headers=headers)
        assert said in str(caught.value) and caught.value.field.startswith("Kafka header")
        # Other Kafka headers stay in Kafka: the sink never sends them, so they are not refused.
        emitter.emit(make_request(2, "pay-2"), headers={"x-service-note": "kept in Kafka: \u00e9"})
    finally:
        emitter._producer.purge()  # nothing listens at NOWHERE: drop the queued record rather than wait for it
        emitter._producer.flush(0)
