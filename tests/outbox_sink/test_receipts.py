"""Receipts as a reader should believe them: one per side effect, and DELIVERED wins over DEAD_LETTERED."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from demo.pipeline_io import create_topic, unique
from ikkai.contract.codec import default_codec
from ikkai.settings import Endpoints
from outbox_sink import Receipt, ReceiptReader


def receipt(outcome: str, *, attempts: int = 1, target: str = "payments-api", effect: str | None = None) -> Receipt:
    status = 201 if outcome == "DELIVERED" else 503
    reason = None if outcome == "DELIVERED" else "retries-exhausted: gave up"
    made = Receipt("d-1", "pay-1", target, outcome, status, attempts, 1_000, 2_000, None, reason)  # type: ignore[arg-type]
    if effect is not None:
        made = Receipt(**{**made.to_record(), "effect": effect})
    return made


@pytest.fixture
def receipts_topic(bootstrap: str) -> Iterator[tuple[str, Producer]]:
    topic = create_topic(bootstrap, unique("outbox.receipts"))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    yield topic, producer
    producer.flush(30)


def write(producer: Producer, topic: str, *receipts: Receipt) -> None:
    codec = default_codec()
    for r in receipts:
        producer.produce(topic, key=r.decision_id.encode(), value=codec.encode("outbox_receipt", r.to_record()))
    assert producer.flush(30) == 0


@pytest.mark.integration
@pytest.mark.parametrize(
    "order",
    [("DEAD_LETTERED", "DELIVERED"), ("DELIVERED", "DEAD_LETTERED")],
    ids=["dlq-then-delivered", "delivered-then-dlq"],
)
def test_delivered_wins_whatever_the_order(
    stack: Endpoints, receipts_topic: tuple[str, Producer], order: tuple[str, str]
) -> None:
    topic, producer = receipts_topic
    # Budget exhausted, then the DLQ record replayed (or the task redelivered it) and the effect applied.
    write(producer, topic, receipt(order[0]), receipt(order[1], attempts=2))

    with ReceiptReader(stack.bootstrap_servers, topic=topic) as reader:
        found = reader.wait_for(["d-1"], 30)
        reader.poll(1.0)  # nothing later changes the verdict

    assert found["d-1"].outcome == "DELIVERED"
    assert [r.outcome for r in reader.seen.values()] == ["DELIVERED"]
