"""Events without a decision, and events decided twice, as the health view's reconciliation shows them.

Every event on ``events.payments`` gets exactly one outcome from the infer query: one decision on
``decisions.fraud`` (``spark_jobs.infer.fraud_decisions``), or, when it does not decode, a dead letter on its
dlq; an outbox request the contract refuses is a dead letter *beside* the decision. A decision and a dead
letter name the input record they came from (``input_topic``/``input_partition``/``input_offset``, and
``source_*`` in a dead letter), so the check needs no clock to know which event an outcome belongs to.

When an event is judged, without guessing from timestamps: the query's commit markers say, per output
partition and input partition, the next input offset whose output is committed there. An event's output is
on one output partition, so its input partition's **frontier** is:

- for a query that writes **in place** (every marker names no input partition but its own: infer, whose output
  partition p holds the outcomes of input partition p only, and enrich), the offset its own partition's marker
  records (0 while that partition has no marker: nothing of it is committed);
- for any other layout, the **lowest** offset over every output partition's marker (each must have one): below it
  an event's outcome is committed whichever partition it went to. An input partition some marker does not name
  is not judged.

So:

- an event at or beyond that frontier is **in flight** (read, not committed yet, or not read yet: the
  query's lag) and never judged;
- an event below it with no decision and no dead letter naming it is **without a decision**;
- an event that two decisions name is **decided twice** (the exactly-once promise broken).

Each decision read also gives its latency (``delays``, ``deploy.eos_view.latency``): its timestamp minus its event's.

Windows that line up: the last ``EVENTS_WINDOW`` offsets of each events partition are read first (only their
positions and timestamps: values are not decoded); then the decisions and the query's dead letters from the
oldest of those events' timestamps on (less ``SKEW_SECONDS``: a decision is written after its event, by
another machine's clock), at most ``OUTCOMES_WINDOW`` offsets a partition. Where a window had to be cut,
events older than its first record read are not judged (their outcome may lie before it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import IsolationLevel
from confluent_kafka.admin import AdminClient, OffsetSpec

from deploy.eos_view.latency import Point, produced_to_decision
from deploy.kafka_windows import Deadline, Record, Where, last_records, offsets, window_coverage
from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker
from ikkai.contract.topics import DECISIONS_FRAUD, DLQ_PREFIX
from ikkai.errors import IkkaiError

EVENTS_WINDOW = 500  # offsets before each events partition's read_committed end
OUTCOMES_WINDOW = 2000  # at most this many offsets before each decisions or dlq partition's end
SKEW_SECONDS = 60.0
MAX_PARTITIONS = 64  # of each topic

Position = tuple[int, int]  # (input partition, offset)


@dataclass(frozen=True)
class Frontier:
    """What a query has committed of its input: below ``offsets[partition]``, every event's outcome."""

    source_topic: str
    offsets: Mapping[int, int]
    dead_letters: str | None  # the query's dlq topic, from its markers' output topics


@dataclass(frozen=True)
class EventDecisions:
    events: int = 0  # events in the window
    decisions: int = 0  # decisions read
    judged: int = 0
    in_flight: int = 0  # at or beyond the committed frontier
    not_judged: int = 0  # older than where an outcomes window starts
    without: tuple[Position, ...] = ()  # judged events without a decision or a dead letter
    twice: tuple[Position, ...] = ()  # events two decisions name
    source_topic: str = ""
    problem: str | None = None
    delays: tuple[Point, ...] = ()  # (decision time, produced → decision ms) of decisions whose event was read


def decided_frontier(markers: Iterable[CommitMarker], decisions_topic: str = DECISIONS_FRAUD) -> Frontier | None:
    """The committed frontier of the queries that write ``decisions_topic`` (see the module's rules: in place,
    each input partition's own marker; otherwise the lowest offset over every output partition's marker), or None
    when none can be judged yet. Across queries (a handover: the newer one starts where the older one stopped)
    the highest. Pure."""
    by_query: dict[tuple[str, str], list[CommitMarker]] = {}
    for marker in markers:
        if decisions_topic in marker.output_topics and marker.source_topic:
            by_query.setdefault((marker.app, marker.query), []).append(marker)
    frontier: dict[int, int] = {}
    source, dlq = None, None
    for found in by_query.values():
        if len({m.source_topic for m in found}) > 1 or (source is not None and found[0].source_topic != source):
            continue
        committed = committed_per_input(found)
        if committed is None:
            continue
        source = found[0].source_topic
        dlq = dlq or next((t for t in found[0].output_topics if t.startswith(DLQ_PREFIX)), None)
        for partition, offset in committed.items():
            frontier[partition] = max(frontier.get(partition, offset), offset)
    return None if source is None else Frontier(source, frontier, dlq)


def committed_per_input(markers: Sequence[CommitMarker]) -> dict[int, int] | None:
    """One query's frontier per input partition from its markers, or None when nothing can be judged. Pure.

    In place (no marker names an input partition but its own), input partition p's outcomes are on output
    partition p only: p's marker alone says what is committed. Otherwise an event may be on any output partition,
    so every one must have a marker, and an input partition counts only as far as the lowest of them.
    """
    if all(set(m.source_offsets) <= {m.partition} for m in markers):
        return {m.partition: m.source_offsets.get(m.partition, 0) for m in markers}
    if len({m.partition for m in markers}) < markers[0].partitions:
        return None  # an output partition without a marker: an event routed there may be uncommitted
    inputs = set.intersection(*(set(m.source_offsets) for m in markers))
    return {p: min(m.source_offsets[p] for m in markers) for p in inputs}


def undecided(
    events: Iterable[Record],
    decided: Sequence[Position],
    dead: Iterable[Position],
    frontier: Mapping[int, int],
    covered_from_ms: int,
) -> tuple[list[Position], list[Position], int, int, int]:
    """(events without a decision or dead letter, events decided twice, judged, in flight, not judged). Pure.

    ``decided``: the position each decision read names (one entry per decision); ``dead``: the positions the
    query's dead letters name.
    """
    outcomes = set(decided) | set(dead)
    counts: dict[Position, int] = {}
    for position in decided:
        counts[position] = counts.get(position, 0) + 1
    without: list[Position] = []
    judged = in_flight = not_judged = 0
    for event in events:
        position = (event.partition, event.offset)
        if event.offset >= frontier.get(event.partition, 0):
            in_flight += 1
        elif event.timestamp_ms < covered_from_ms:
            not_judged += 1
        else:
            judged += 1
            if position not in outcomes:
                without.append(position)
    twice = sorted(p for p, n in counts.items() if n > 1)
    return sorted(without), twice, judged, in_flight, not_judged


def _outcomes(
    kafka: KafkaContext, admin: AdminClient, topic: str, partitions: Sequence[int], since_ms: int, deadline: Deadline
) -> tuple[list[Record], set[Where], set[Where]]:
    """The records of ``topic`` written since ``since_ms`` (at most ``OUTCOMES_WINDOW`` a partition), the
    partitions whose window was cut, and those not read to their end."""
    chosen = [(topic, p) for p in sorted(partitions)][:MAX_PARTITIONS]
    at_time = offsets(admin, chosen, OffsetSpec.for_timestamp(since_ms), deadline)
    ends = offsets(admin, chosen, OffsetSpec.latest(), deadline)  # type: ignore[no-untyped-call]
    starts = {w: ends[w] if at_time[w] < 0 else at_time[w] for w in chosen}  # -1: nothing that new
    cut = {w for w in chosen if starts[w] < ends[w] - OUTCOMES_WINDOW}
    records, unread = last_records(kafka, {w: (max(starts[w], ends[w] - OUTCOMES_WINDOW), ends[w]) for w in chosen},
                                   deadline)  # fmt: skip
    return records, cut, unread


def read_event_decisions(
    kafka: KafkaContext,
    admin: AdminClient,
    partitions_of: Mapping[str, Sequence[int]],
    markers: Iterable[CommitMarker],
    codec: RecordCodec,
    deadline: Deadline,
    decisions_topic: str = DECISIONS_FRAUD,
) -> EventDecisions:
    frontier = decided_frontier(markers, decisions_topic)
    if frontier is None:
        return EventDecisions(problem=f"no query writing {decisions_topic} has markers to judge by yet")
    source = frontier.source_topic
    if source not in partitions_of or decisions_topic not in partitions_of:
        return EventDecisions(source_topic=source, problem=f"no topic {source} or {decisions_topic}")
    chosen = [(source, p) for p in sorted(partitions_of[source])][:MAX_PARTITIONS]
    earliest = offsets(admin, chosen, OffsetSpec.earliest(), deadline, IsolationLevel.READ_UNCOMMITTED)  # type: ignore[no-untyped-call]
    ends = offsets(admin, chosen, OffsetSpec.latest(), deadline)  # type: ignore[no-untyped-call]
    events, unread = last_records(kafka, {w: (max(earliest[w], ends[w] - EVENTS_WINDOW), ends[w]) for w in chosen},
                                  deadline)  # fmt: skip
    if unread:
        return EventDecisions(source_topic=source, problem=f"{len(unread)} {source} partition(s) not read in time")
    since = max(0, min((e.timestamp_ms for e in events), default=0) - int(SKEW_SECONDS * 1000))
    decisions, cut, unread = _outcomes(kafka, admin, decisions_topic, partitions_of[decisions_topic], since, deadline)
    letters: list[Record] = []
    if frontier.dead_letters in partitions_of:
        assert frontier.dead_letters is not None
        letters, dlq_cut, dlq_unread = _outcomes(kafka, admin, frontier.dead_letters,
                                                 partitions_of[frontier.dead_letters], since, deadline)  # fmt: skip
        cut, unread = cut | dlq_cut, unread | dlq_unread
    if unread:
        return EventDecisions(source_topic=source, problem=f"{len(unread)} outcome partition(s) not read in time")
    decided: list[Position] = []
    decided_at: list[tuple[Position, int]] = []
    for record in decisions:
        try:
            value = codec.decode("fraud_decision", record.value or b"")
        except (IkkaiError, KeyError, TypeError, ValueError):
            continue  # not a decision: names no event
        if value["input_topic"] == source:
            decided.append((int(value["input_partition"]), int(value["input_offset"])))
            decided_at.append((decided[-1], record.timestamp_ms))
    dead: list[Position] = []
    for record in letters:
        try:
            value = codec.decode("dead_letter", record.value or b"")
        except (IkkaiError, KeyError, TypeError, ValueError):
            continue
        if value["source_topic"] == source:
            dead.append((int(value["source_partition"]), int(value["source_offset"])))
    without, twice, judged, in_flight, not_judged = undecided(
        events, decided, dead, frontier.offsets, window_coverage([*decisions, *letters], cut)
    )
    delays = produced_to_decision({(e.partition, e.offset): e.timestamp_ms for e in events}, decided_at)
    return EventDecisions(len(events), len(decided), judged, in_flight, not_judged, tuple(without), tuple(twice),
                          source, delays=tuple(delays))  # fmt: skip
