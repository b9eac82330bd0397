"""Writing to and reading from the pipeline's topics, for the benchmarks and the tests.

Unique topic names, topic creation (through ``ikkai.contract.kafka.ensure_topics``), Avro payments
produced on their key's partition, and what a fresh read_committed consumer sees per partition.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer

from demo.client_logs import KAFKA_LOG
from ikkai.contract import kafka
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition

Record = tuple[bytes | None, bytes | None]  # (key, value); a tombstone or an unkeyed record holds None
Partitioned = dict[int, list[Record]]


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    """``name`` with ``partitions`` partitions and the brokers' default replication (``kafka.ensure_topics``)."""
    kafka.ensure_topics(KafkaContext.of(bootstrap), [name], partitions, config=config)
    return name


def by_partition(bootstrap: str, topic: str, isolation: str = "read_committed") -> Partitioned:
    """Every record of ``topic`` per partition, in offset order, up to the current end."""
    consumer = Consumer(KafkaContext.of(bootstrap).client_config(**{
        "group.id": unique("test.reader"), "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True, "logger": KAFKA_LOG,
    }))  # fmt: skip
    consumer.subscribe([topic])
    parts = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    seen: Partitioned = {p: [] for p in range(parts)}
    done: set[int] = set()
    try:
        while len(done) < parts:
            message = consumer.poll(1.0)
            if message is None or message.partition() is None:
                continue
            partition = int(message.partition())  # type: ignore[arg-type]  # checked just above
            if message.error():
                done.add(partition)  # end of partition (enable.partition.eof)
                continue
            done.discard(partition)
            seen[partition].append((message.key(), message.value()))
    finally:
        consumer.close()
    return seen


def flat(records: Partitioned) -> list[Record]:
    return [record for partition in sorted(records) for record in records[partition]]


def produce_payments(bootstrap: str, topic: str, payments: list[dict[str, object]], partitions: int) -> None:
    """Payments as single-object Avro, keyed by payment_id, on Kafka's default partition of the key."""
    codec = default_codec()
    producer = Producer(KafkaContext.of(bootstrap).producer_config(logger=KAFKA_LOG))
    for payment in payments:
        key = str(payment["payment_id"]).encode()
        value = codec.encode("payment_event", payment, version=1)
        producer.produce(topic, value=value, key=key, partition=kafka_partition(key, partitions))
    assert producer.flush(60) == 0
