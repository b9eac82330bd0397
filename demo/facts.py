"""What the demo observed, as plain data: the input to the report and its invariants.

The run collects these from read_committed consumers and the receiver (demo/collect.py);
everything downstream of them is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from demo.measures import TopicRecord
from demo.phases import Phase
from ikkai.contract import topics

# The topics the demo reads: every topic of the pipeline (ikkai.contract.topics.PIPELINE).
LIVE_TOPICS = topics.PIPELINE_TOPICS
# What the replay writes again, into fresh topics.
REPLAYED = (topics.EVENTS_PAYMENTS, topics.DLQ_ENRICH, topics.DECISIONS_FRAUD, topics.OUTBOX_REQUESTS, topics.DLQ_INFER)


REPLAY_SUFFIX = ".replay"


def replay_topic(topic: str) -> str:
    return f"{topic}{REPLAY_SUFFIX}"


@dataclass(frozen=True)
class Expectation:
    """What the generator says the raw lines must become (None: it does not say)."""

    lines: int
    events: int | None = None
    dead_letters: Mapping[str, int] | None = None  # reason → count


@dataclass(frozen=True)
class Decision:
    decision_id: str
    payment_id: str
    event_id: str
    action: str
    timestamp: int  # when it was written (Kafka CreateTime)


@dataclass(frozen=True)
class SideEffectRequest:
    decision_id: str
    target: str  # the sink's alias, e.g. payments-api
    api: str  # the first path segment, e.g. payments
    effect: str  # which side effect of the decision (hold-payment, notify-customer, ...)
    idempotency_key: str  # one per side effect: what the receiver applies once


@dataclass(frozen=True)
class ReceiptSeen:
    decision_id: str
    target: str
    outcome: str  # DELIVERED or DEAD_LETTERED
    timestamp: int
    effect: str  # the side effect it answers (its target, for receipts older than outbox_receipt v2)


@dataclass(frozen=True)
class ChaosEvent:
    action: str  # "kill -9 infer", "restart connect worker"
    at_seconds: float  # since the first raw line was written
    progress: str  # what the pipeline had done when it happened
    recovered_seconds: float | None  # until the component answered again (None: it did not)
    failure: str | None = None  # why it did not recover, when it did not


@dataclass(frozen=True)
class Facts:
    seed: int
    size: int
    raw_lines: list[bytes]
    expectation: Expectation
    topics: Mapping[str, list[TopicRecord]]  # LIVE_TOPICS
    event_ids: list[str]  # of events.payments, in read order
    dead_letter_reasons: list[str]  # of dlq.enrich
    decisions: list[Decision]
    requests: list[SideEffectRequest]
    receipts: list[ReceiptSeen]  # every receipt record, repeats included
    applied: list[tuple[str, str]]  # (api, idempotency key) rows of the receiver's database
    deliveries: list[tuple[str, str, bool]]  # (api, idempotency key, answered from the stored response)
    replay: Mapping[str, list[TopicRecord]] | None  # replay_topic(t) for t in REPLAYED; None: no replay
    chaos: list[ChaosEvent] = field(default_factory=list)
    chaos_planned: tuple[str, ...] = ()
    seconds: Mapping[str, float] = field(default_factory=dict)
    phases: Sequence[Phase] = ()  # where the time went (demo.phases), overlapping phases included
    held_back: Mapping[str, int] = field(default_factory=dict)  # generated lines not written, by class
    # The demo's operator page asked once after the run (demo.live_page): view → HTTP status, or why it did not
    # answer; None: there was no page to ask.
    page_answers: Mapping[str, int | str] | None = None
    # The decoded records of the topics with a content digest (demo.measures.IDENTITY), in read order; empty: none
    # were decoded.
    contents: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)
