"""A shadow model's decisions against the live ones: per model version pair, what both decided and what differs.

``compare`` is pure: two sequences of decoded ``fraud_decision`` records, matched by event
(``event_id``). ``read_decisions`` is the thin edge: every committed decision of a topic, read
with ``isolation.level=read_committed`` to the end each partition has now, so an aborted or
still-open transaction of a running job is never compared. ``ikkai jobs compare`` prints the result.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer

from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partition_ends import records_to_end
from ikkai.errors import IkkaiError

Decision = Mapping[str, Any]  # a decoded fraud_decision


class CompareError(IkkaiError):
    """A decisions topic cannot be read for the comparison."""

    def __init__(self, topic: str, problem: str, fix: str) -> None:
        super().__init__(f"{topic}: {problem}", fix=fix)
        self.topic = topic


@dataclass(frozen=True)
class Difference:
    event_id: str
    payment_id: str
    live_action: str
    live_score: float
    shadow_action: str
    shadow_score: float


@dataclass(frozen=True)
class VersionPair:
    """The events both a live version and a shadow version decided, and those they decided differently."""

    live_version: str
    shadow_version: str
    both: int  # events both decided
    differ: int  # of those, events with another action
    sample: tuple[Difference, ...]  # the first differences, in the live topic's order


@dataclass(frozen=True)
class Comparison:
    pairs: tuple[VersionPair, ...]
    live_only: int  # events the live topic decided and the shadow (not yet) did not
    shadow_only: int


def compare(live: Iterable[Decision], shadow: Iterable[Decision], sample: int = 5) -> Comparison:
    """Match decisions by ``event_id``; a pair of versions per live and shadow ``model_version``."""
    shadows: dict[str, Decision] = {}
    for decision in shadow:
        shadows.setdefault(str(decision["event_id"]), decision)
    counts: dict[tuple[str, str], list[int]] = {}
    samples: dict[tuple[str, str], list[Difference]] = {}
    seen: set[str] = set()
    live_only = 0
    for decision in live:
        event = str(decision["event_id"])
        if event in seen:
            continue
        seen.add(event)
        other = shadows.get(event)
        if other is None:
            live_only += 1
            continue
        pair = (str(decision["model_version"]), str(other["model_version"]))
        count = counts.setdefault(pair, [0, 0])
        count[0] += 1
        if decision["action"] != other["action"]:
            count[1] += 1
            if len(found := samples.setdefault(pair, [])) < sample:
                found.append(
                    Difference(
                        event, str(decision["payment_id"]), str(decision["action"]), float(decision["score"]),
                        str(other["action"]), float(other["score"]),
                    )
                )  # fmt: skip
    pairs = tuple(
        VersionPair(live_version, shadow_version, both, differ, tuple(samples.get((live_version, shadow_version), ())))
        for (live_version, shadow_version), (both, differ) in sorted(counts.items())
    )
    return Comparison(pairs, live_only, len(set(shadows) - seen))


def read_decisions(
    cluster: KafkaContext, topic: str, codec: RecordCodec, deadline_s: float = 120.0
) -> list[dict[str, Any]]:
    """Every committed decision of ``topic`` (read_committed), partition by partition, up to its end now."""
    settings = {"enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": True}
    consumer = Consumer(cluster.consumer_config(f"_ikkai.compare.{uuid.uuid4().hex}", **settings))
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise CompareError(topic, "the topic does not exist", fix="name the live and the shadow decisions topics")
        decisions: dict[int, list[dict[str, Any]]] = {p: [] for p in metadata.partitions}
        for message in records_to_end(
            consumer, [(topic, p) for p in metadata.partitions], deadline_s,
            failed=lambda _, error: CompareError(
                topic, f"reading failed: {error.str()}", fix="check the broker and the ACLs"
            ),
            late=lambda pending: CompareError(
                topic, f"partitions {sorted(p for _, p in pending)} not read to their end in {deadline_s:.0f}s",
                fix="check the broker; a transaction open for long holds read_committed readers back",
            ),
        ):  # fmt: skip
            decisions[message.partition()].append(codec.decode("fraud_decision", message.value()))
        return [d for p in sorted(decisions) for d in decisions[p]]
    finally:
        consumer.close()
