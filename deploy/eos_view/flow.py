"""How fast records reach each stage of the pipeline, as the operator page shows it: read_committed end
offsets of the stage topics, sampled at most every ``SAMPLE_SECONDS`` per cluster, however many look.

Each sample is one batched ListOffsets request (the admin client's ``list_offsets``, isolation level
READ_COMMITTED: the last stable offset, so an open or aborted transaction's records never count) for
every partition of the stage and dead-letter topics, plus one metadata request; ``KEPT`` samples are
kept, so the cost is bounded by the number of partitions, not by viewers or by traffic. Rates are
differences of offsets over time: a transactional producer's commit markers take an offset each, so
a rate counts them too (about one per transaction). Not read here: consumer lag (the Spark jobs keep
their offsets in checkpoints, not in consumer groups), dead letters by reason (that needs the records'
headers), and the exactly-once reconciliation (events without a decision, requests without a receipt).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import PIPELINE
from ikkai.errors import IkkaiError

STAGES = tuple(output for stage in PIPELINE for output in stage.outputs)  # (short name, topic), one row each
DEAD_LETTERS = tuple(topic for stage in PIPELINE for topic in stage.dead_letters)
TOPICS = tuple(topic for _, topic in STAGES) + DEAD_LETTERS
SAMPLE_SECONDS = 5.0
KEPT = 60  # samples: five minutes at one per SAMPLE_SECONDS
TIMEOUT_SECONDS = 10.0
log = logging.getLogger("ikkai.serve.flow")  # librdkafka's own complaints (a broker down) go here, not to stderr


class FlowUnreadable(IkkaiError):
    """The cluster did not answer the offsets request."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"Kafka at {where}: end offsets unreadable: {reason}", fix="is it up? `ikkai stack status`")
        self.where = where
        self.reason = reason


@dataclass(frozen=True)
class Sample:
    at: float  # the reader's clock (monotonic)
    ends: Mapping[str, int | None]  # topic → its partitions' read_committed end offsets summed; None: no such topic


def rates(samples: Sequence[Sample], topic: str) -> list[float | None]:
    """Records per second into ``topic`` between consecutive samples (None where it did not exist). Pure."""
    out: list[float | None] = []
    for before, after in pairwise(samples):
        first, last = before.ends.get(topic), after.ends.get(topic)
        seconds = after.at - before.at
        out.append(None if first is None or last is None or seconds <= 0 else max(0, last - first) / seconds)
    return out


class FlowReader:
    """The stage topics' end offsets of one cluster over the last ``KEPT`` samples; thread-safe."""

    def __init__(
        self,
        kafka: KafkaContext,
        topics: Sequence[str] = TOPICS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kafka = kafka
        self.topics = tuple(topics)
        self.clock = clock
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._admin: AdminClient | None = None

    def sampled(self) -> list[Sample]:
        """The kept samples, after taking a new one if the last is older than ``SAMPLE_SECONDS``."""
        with self._lock:
            now = self.clock()
            if not self.samples or now - self.samples[-1].at >= SAMPLE_SECONDS:
                self.samples = [*self.samples, Sample(now, self._read())][-KEPT:]
            return list(self.samples)

    def taken(self) -> list[Sample]:
        """The kept samples, after taking a new one now (the caller paces the reads: the page's
        ``deploy.serve.page.refreshed`` asks at most once per ``SAMPLE_SECONDS``)."""
        with self._lock:
            self.samples = [*self.samples, Sample(self.clock(), self._read())][-KEPT:]
            return list(self.samples)

    def _read(self) -> dict[str, int | None]:
        if self._admin is None:
            self._admin = AdminClient(self.kafka.client_config(logger=log))
        try:
            metadata = self._admin.list_topics(timeout=TIMEOUT_SECONDS)
            latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
            partitions = {
                TopicPartition(topic, p): latest
                for topic in self.topics
                if topic in metadata.topics and metadata.topics[topic].error is None
                for p in metadata.topics[topic].partitions
            }
            ends: dict[str, int | None] = {topic: None for topic in self.topics}
            if partitions:
                futures = self._admin.list_offsets(
                    partitions, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=TIMEOUT_SECONDS
                )
                for partition, future in futures.items():
                    ends[partition.topic] = (ends[partition.topic] or 0) + future.result().offset
            return ends
        except KafkaException as exc:
            raise FlowUnreadable(self.kafka.describe(), str(exc.args[0])) from exc
