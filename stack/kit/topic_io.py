"""Writing to and reading from topics as a fresh client sees them, for the benchmarks and the tests.

Each function takes the cluster as a ``KafkaContext`` its caller resolved once, at its entry (a test's session
``cluster`` fixture, a benchmark's ``main``); nothing here reads the environment. Unique topic
names, topic creation (through ``ikkai.contract.kafka.ensure_topics``) and growth, Avro payments produced on
their key's partition, transactions to read, and what a fresh consumer (read_committed unless asked otherwise)
sees: per partition (``by_partition``) or in the order it arrived (``read_all``), both from one read loop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from ikkai.contract import kafka
from ikkai.contract.codec import RecordCodec, default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition

Record = tuple[bytes | None, bytes | None]  # (key, value); a tombstone or an unkeyed record holds None
Partitioned = dict[int, list[Record]]


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def create_topic(cluster: KafkaContext, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    """``name`` with ``partitions`` partitions and the brokers' default replication (``kafka.ensure_topics``)."""
    kafka.ensure_topics(cluster, [name], partitions, config=config)
    return name


def grow_topics(cluster: KafkaContext, names: Sequence[str], partitions: int) -> None:
    """Every topic of ``names`` grown to ``partitions`` (Kafka adds partitions, it never removes them), usable."""
    admin = AdminClient(cluster.client_config())
    for future in admin.create_partitions([NewPartitions(name, partitions) for name in names]).values():
        future.result(timeout=60)
    kafka.wait_until_usable(cluster, list(names), give_up_at=time.monotonic() + 120)


ABSENT_TOPIC_WAIT_S = 30.0  # a read without a timeout waits this long for a topic that does not exist yet


def _partition_count(consumer: Consumer, topic: str, deadline: float | None) -> int:
    """``topic``'s partition count; a topic that does not exist yet (a connector or a job creates it as it writes)
    is asked for again until it does, or until ``deadline`` (without one, ``ABSENT_TOPIC_WAIT_S``; then 0: nothing
    arrived, never a hang)."""
    give_up_at = deadline if deadline is not None else time.monotonic() + ABSENT_TOPIC_WAIT_S
    while True:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        if partitions or time.monotonic() >= give_up_at:
            return len(partitions)
        time.sleep(0.2)


def _arrivals(
    cluster: KafkaContext, topic: str, isolation: str, expect: int | None, timeout: float | None, poll_seconds: float
) -> tuple[int, list[tuple[int, Record]]]:
    """(the topic's partition count, (partition, record) in the order a fresh consumer received them).

    Reads until every partition reached the end offset it had when reading began (for read_committed: the last
    stable offset), or, with ``expect``, until that many arrived; with ``timeout``, at most that long.

    A suite reads hundreds of times, so a read costs no waiting of its own (``kafka.QUICK_TO_END``, as the sink's
    marker reader): every partition is assigned from its beginning, no group joined
    (the group id is one librdkafka asks for, never used); the end is seen 10 ms after the last record, not after
    the default 500 ms long poll; the leader is connected at once, not on demand."""
    consumer = Consumer(cluster.client_config(**{
        "group.id": unique("test.reader"), "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
        **kafka.QUICK_TO_END,
    }))  # fmt: skip
    deadline = None if timeout is None else time.monotonic() + timeout
    arrived: list[tuple[int, Record]] = []
    eof: set[int] = set()
    try:
        parts = _partition_count(consumer, topic, deadline)
        if not parts:  # the topic never appeared: nothing arrived
            return 0, arrived
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
        while deadline is None or time.monotonic() < deadline:
            message = consumer.poll(poll_seconds)
            if message is None or message.partition() is None:
                continue
            partition = int(message.partition())  # type: ignore[arg-type]  # checked just above
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    eof.add(partition)  # enable.partition.eof
                    if expect is None and len(eof) >= parts:
                        break
                continue
            eof.discard(partition)
            arrived.append((partition, (message.key(), message.value())))
            if expect is not None and len(arrived) >= expect:
                break
    finally:
        consumer.close()
    return parts, arrived


def by_partition(cluster: KafkaContext, topic: str, isolation: str = "read_committed") -> Partitioned:
    """Every record of ``topic`` per partition, in offset order, up to the current end."""
    parts, arrived = _arrivals(cluster, topic, isolation, expect=None, timeout=None, poll_seconds=1.0)
    seen: Partitioned = {p: [] for p in range(parts)}
    for partition, record in arrived:
        seen[partition].append(record)
    return seen


def read_all(
    cluster: KafkaContext,
    topic: str,
    *,
    isolation: str = "read_committed",
    expect: int | None = None,
    timeout: float = 30.0,
) -> list[Record]:
    """(key, value) pairs from the start of ``topic`` to its current end, in the order a fresh consumer received
    them; with ``expect``, until that many arrived; what arrived within ``timeout`` seconds at the most."""
    return [record for _, record in _arrivals(cluster, topic, isolation, expect, timeout, poll_seconds=0.5)[1]]


def flat(records: Partitioned) -> list[Record]:
    return [record for partition in sorted(records) for record in records[partition]]


def produce_payments(
    cluster: KafkaContext,
    topic: str,
    payments: list[dict[str, object]],
    partitions: int,
    codec: RecordCodec | None = None,
) -> None:
    """Payments as Avro (single-object, or as ``codec`` writes them), keyed by payment_id, on Kafka's default
    partition of the key."""
    codec = codec or default_codec()
    producer = Producer(cluster.producer_config())
    for payment in payments:
        key = str(payment["payment_id"]).encode()
        value = codec.encode("payment_event", payment, version=1)
        producer.produce(topic, value=value, key=key, partition=kafka_partition(key, partitions))
    assert producer.flush(60) == 0


def transactional_producer(cluster: KafkaContext, transactional_id: str) -> Producer:
    """An idempotent producer (rule 3 of docs/architecture.md) with ``transactional_id``, its transactions
    initialised."""
    producer = Producer(cluster.producer_config(**{"transactional.id": transactional_id}))
    producer.init_transactions(60)
    return producer


def commit_then_abort(cluster: KafkaContext, topic: str, committed: int, aborted: int) -> None:
    """One committed transaction of ``committed-<i>`` values, then one aborted of ``aborted-<i>``."""
    producer = transactional_producer(cluster, unique("test.txn.writer"))
    producer.begin_transaction()
    for i in range(committed):
        producer.produce(topic, key=f"payment-{i}", value=f"committed-{i}")
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(aborted):
        producer.produce(topic, key=f"payment-{i}", value=f"aborted-{i}")
    producer.flush(60)
    producer.abort_transaction(60)
