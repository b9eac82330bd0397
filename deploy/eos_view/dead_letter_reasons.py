"""Dead letters by reason, as the health view shows them: the recent dead letters of each ``dlq.*`` topic,
counted by (topic, stage, error class), each with its newest reason masked as the logs mask it.

Every stage writes a dead letter with three headers (the jobs' ``spark_jobs.sink.dead_letters``, the outbox
sink's ``DeadLetters.write``): ``ikkai.dlq.stage`` (enrich, infer, outbox), ``ikkai.dlq.error_class``
(a stable machine-readable name: ``missing_field``, ``too_large``, ``retries-exhausted``...) and
``ikkai.dlq.reason`` (a sentence for people). Only the headers are looked at; the dead letter's copy of the
input record is never shown. A reason quotes input, so it is shown as the logs show text from outside:
card-number-like digit runs masked to their last four (``ikkai.contract.masking``), credentials of any URL in
it redacted (``ikkai.redaction``), cut to ``SHOWN_REASON_CHARS``.

The window is the last ``LAST_RECORDS`` offsets before each dlq partition's read_committed end (at most
``MAX_PARTITIONS`` partitions, in name order), read by one read_committed consumer within the sample's
deadline and byte budget (``deploy.kafka_windows``): recent dead letters, not the topic's history (its end
offset, on the flow view, counts those).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import IsolationLevel
from confluent_kafka.admin import AdminClient, OffsetSpec

from deploy.kafka_windows import Deadline, Record, Where, last_records, offsets
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.masking import masked_prefix
from ikkai.contract.topics import DLQ_PREFIX
from ikkai.redaction import redact_urls

# The header names every stage writes (spark_jobs.sink.dead_letters; the outbox sink's Java writes the same).
STAGE_HEADER = "ikkai.dlq.stage"
ERROR_CLASS_HEADER = "ikkai.dlq.error_class"
REASON_HEADER = "ikkai.dlq.reason"
LAST_RECORDS = 200  # offsets before each dlq partition's read_committed end
MAX_PARTITIONS = 64
SHOWN_REASON_CHARS = 200
UNKNOWN = "?"  # a record without the header (not written by an ikkai stage)


def shown_reason(text: str | None) -> str:
    """A reason as a person may read it: card numbers masked, URL credentials redacted, cut. Pure."""
    if not text:
        return ""
    # Only a prefix is read: a reason from another writer may be a megabyte of digits (masking costs per group).
    return masked_prefix(redact_urls(text[: 16 * SHOWN_REASON_CHARS]), SHOWN_REASON_CHARS)


@dataclass(frozen=True)
class ReasonCount:
    topic: str
    stage: str
    error_class: str
    count: int
    newest_reason: str  # masked (``shown_reason``)
    newest_ms: int  # the newest such dead letter's timestamp


@dataclass(frozen=True)
class DeadLetters:
    reasons: tuple[ReasonCount, ...] = ()
    window: int = LAST_RECORDS
    unread: tuple[Where, ...] = ()  # partitions not read to their end within the deadline or byte budget
    left_out: int = 0  # dlq partitions beyond MAX_PARTITIONS
    problem: str | None = None


def by_reason(records: Iterable[Record]) -> list[ReasonCount]:
    """Dead letters counted by (topic, stage, error class), most first, each with its newest reason. Pure."""
    counts: dict[tuple[str, str, str], int] = {}
    newest: dict[tuple[str, str, str], Record] = {}
    for record in records:
        stage, error_class = (shown_reason(record.header(h)) or UNKNOWN for h in (STAGE_HEADER, ERROR_CLASS_HEADER))
        group = (record.topic, stage, error_class)
        counts[group] = counts.get(group, 0) + 1
        seen = newest.get(group)
        if seen is None or (record.timestamp_ms, record.offset) >= (seen.timestamp_ms, seen.offset):
            newest[group] = record
    return [
        ReasonCount(*group, count, shown_reason(newest[group].header(REASON_HEADER)), newest[group].timestamp_ms)
        for group, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]


def dlq_partitions(partitions_of: Mapping[str, Sequence[int]]) -> list[Where]:
    """Every partition of every ``dlq.*`` topic, in name order. Pure."""
    return sorted((t, p) for t, numbers in partitions_of.items() if t.startswith(DLQ_PREFIX) for p in numbers)


def read_dead_letters(
    kafka: KafkaContext, admin: AdminClient, partitions_of: Mapping[str, Sequence[int]], deadline: Deadline
) -> DeadLetters:
    every = dlq_partitions(partitions_of)
    chosen = every[:MAX_PARTITIONS]
    earliest = offsets(admin, chosen, OffsetSpec.earliest(), deadline, IsolationLevel.READ_UNCOMMITTED)  # type: ignore[no-untyped-call]
    ends = offsets(admin, chosen, OffsetSpec.latest(), deadline)  # type: ignore[no-untyped-call]
    windows = {w: (max(earliest[w], ends[w] - LAST_RECORDS), ends[w]) for w in chosen}
    records, unread = last_records(kafka, windows, deadline)
    return DeadLetters(tuple(by_reason(records)), LAST_RECORDS, tuple(sorted(unread)), len(every) - len(chosen))
