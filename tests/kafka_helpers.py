"""Small Kafka helpers for tests: read what a real consumer sees, write transactions to read."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer

from demo.pipeline_io import unique


def read_all(
    bootstrap: str, topic: str, *, isolation: str = "read_committed", expect: int | None = None, timeout: float = 30.0
) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) pairs from the start of ``topic`` to its current end, as a fresh consumer sees them.

    Reads until every partition reached the end offset it had when reading began (for
    read_committed: the last stable offset), or, with ``expect``, until that many arrived.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": unique("ikkai-test"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
    })  # fmt: skip
    consumer.subscribe([topic])
    records: list[tuple[bytes | None, bytes | None]] = []
    eof: set[int] = set()
    partitions: int | None = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if partitions is None:
                metadata = consumer.list_topics(topic, timeout=5)
                partitions = len(metadata.topics[topic].partitions)
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(message.partition())
                    if expect is None and len(eof) >= partitions:
                        break
                continue
            eof.discard(message.partition())
            records.append((message.key(), message.value()))
            if expect is not None and len(records) >= expect:
                break
    finally:
        consumer.close()
    return records


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    """A producer with the settings docs/architecture.md, rule 3, asks for, its transactions initialised."""
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
    })  # fmt: skip
    producer.init_transactions(60)
    return producer


def commit_then_abort(bootstrap: str, topic: str, committed: int, aborted: int) -> None:
    """One committed transaction of ``committed-<i>`` values, then one aborted of ``aborted-<i>``."""
    producer = transactional_producer(bootstrap, unique("test.txn.writer"))
    producer.begin_transaction()
    for i in range(committed):
        producer.produce(topic, key=f"payment-{i}", value=f"committed-{i}")
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(aborted):
        producer.produce(topic, key=f"payment-{i}", value=f"aborted-{i}")
    producer.flush(60)
    producer.abort_transaction(60)
