"""The demo's Kafka edge: count records as they arrive, read topics in full.

Every consumer here reads with ``isolation.level=read_committed``: the demo reports what a
downstream reader can see, never what an aborted transaction left behind.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, TopicPartition

from demo.client_logs import KAFKA_LOG
from demo.measures import TopicRecord
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import IkkaiError


class DemoKafkaError(IkkaiError):
    """The demo could not create or read a topic."""

    def __init__(self, topic: str, problem: str) -> None:
        super().__init__(f"topic {topic}: {problem}", fix="see the broker log under the demo's home (logs/broker.log)")
        self.topic = topic


def _consumer(cluster: KafkaContext) -> Consumer:
    settings = {"enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": True}
    settings["logger"] = KAFKA_LOG  # librdkafka's lines: the run's log file, not the demo's output (client_logs)
    return Consumer(cluster.consumer_config(f"ikkai.demo.{uuid.uuid4().hex[:12]}", **settings))


def _partitions(consumer: Consumer, topic: str) -> list[TopicPartition]:
    metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None:
        raise DemoKafkaError(topic, f"does not exist ({metadata.error if metadata else 'no metadata'})")
    return [TopicPartition(topic, p, 0) for p in sorted(metadata.partitions)]


def read_topic(cluster: KafkaContext, topic: str, timeout_s: float = 120.0) -> list[TopicRecord]:
    """Every committed record of ``topic``, from the start to the end each partition had when reading began."""
    consumer = _consumer(cluster)
    try:
        partitions = _partitions(consumer, topic)
        consumer.assign(partitions)
        pending = {tp.partition for tp in partitions}
        records: list[TopicRecord] = []
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise DemoKafkaError(topic, f"partitions {sorted(pending)} not read to their end in {timeout_s:.0f}s")
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(message.partition())
                        continue
                    raise DemoKafkaError(topic, error.str())
                _, timestamp = message.timestamp()
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                records.append(TopicRecord(partition, offset, timestamp, message.key(), message.value()))
        return records
    finally:
        consumer.close()


class RecordCounter:
    """Counts committed records per topic as they arrive (one consumer, every partition from the start).

    For a topic in ``distinct`` it counts distinct identities instead (the function maps a record's
    value to its identity), e.g. receipts per (decision, target), where a repeat is not progress.
    """

    def __init__(
        self,
        cluster: KafkaContext,
        topics: Iterable[str],
        distinct: Mapping[str, Callable[[bytes], Hashable]] | None = None,
    ) -> None:
        self._consumer = _consumer(cluster)
        self._distinct = dict(distinct or {})
        self._seen: dict[str, set[Hashable]] = {topic: set() for topic in self._distinct}
        self.counts: dict[str, int] = {}
        assignment: list[TopicPartition] = []
        for topic in topics:
            assignment += _partitions(self._consumer, topic)
            self.counts[topic] = 0
        self._consumer.assign(assignment)

    def poll(self, timeout_s: float = 0.5) -> dict[str, int]:
        """Read what arrived within ``timeout_s`` (and whatever is already buffered); the counts so far."""
        deadline = time.monotonic() + timeout_s
        while True:
            messages = self._consumer.consume(5000, max(0.0, deadline - time.monotonic()))
            for message in messages:
                topic, value = message.topic(), message.value()
                if message.error() is not None or topic is None:
                    continue
                if topic in self._distinct:
                    if value is not None:
                        self._seen[topic].add(self._distinct[topic](value))
                    self.counts[topic] = len(self._seen[topic])
                else:
                    self.counts[topic] += 1
            if len(messages) < 5000 or time.monotonic() >= deadline:
                return dict(self.counts)

    def close(self) -> None:
        self._consumer.close()
