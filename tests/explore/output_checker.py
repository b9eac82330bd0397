"""The explorer's judge: what an independent read_committed reader sees, held against what the model expects.

Pure (``violations``) over records decoded with the contract's codec, and one thin edge
(``read_outputs``) that reads the topics with a fresh read_committed consumer
(``stack.kit.topic_io.by_partition``). Nothing here imports the sink: the judge never asks the
commit markers what was written, it counts what a downstream reader gets.

The rules, after every step of an exploration:

- every decision on the live decisions topic is of an event on the input (or on an input topic deleted
  since, decided before it was deleted), and no event has two;
- every event the model says must be decided (its owner drained after it arrived) has one;
- no event the operator excluded (``--start-offsets`` above it) has one, nor does an event of a deleted
  input topic that had none when it was deleted;
- every outbox request belongs to a live decision, each (event, effect) is asked for once, no event
  has side effects asked for under two decision ids, and each decision asks for what its action
  asks for (hold: two, review: one, approve: none);
- the shadow decisions topic holds at most one decision per event and only events on the input (now or
  before a recreation).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import Partitioned, by_partition

Record = Mapping[str, Any]
EFFECTS_PER_ACTION = {"hold": 2, "review": 1, "approve": 0}
SHOWN = 5  # ids named per violation: enough to find them, bounded


@dataclass(frozen=True)
class Outputs:
    """What a read_committed reader sees: input events by (partition, offset), decoded live and shadow output."""

    events: Mapping[str, tuple[int, int]]  # event_id -> (input partition, input offset)
    decisions: tuple[Record, ...]
    requests: tuple[Record, ...]
    shadow: tuple[Record, ...] = ()
    raw_live: tuple[Partitioned, Partitioned] = field(default=({}, {}), compare=False)  # for "nothing changed"


@dataclass(frozen=True)
class Expected:
    """What the model says must hold now: events that must have one live decision, and events that must have none."""

    decided: frozenset[str] = frozenset()
    excluded: frozenset[str] = frozenset()
    earlier: frozenset[str] = frozenset()  # events of an input topic deleted since: no longer on the input


def _some(ids: Iterable[object]) -> str:
    listed = sorted(str(i) for i in ids)
    more = f" (+{len(listed) - SHOWN} more)" if len(listed) > SHOWN else ""
    return ", ".join(listed[:SHOWN]) + more


def violations(outputs: Outputs, expected: Expected) -> list[str]:
    """Every rule of the module docstring that ``outputs`` break, one line each; empty when all hold."""
    found: list[str] = []
    per_event = Counter(str(d["event_id"]) for d in outputs.decisions)
    unknown = set(per_event) - set(outputs.events) - expected.earlier
    if unknown:
        found.append(f"{len(unknown)} live decisions of events never produced: {_some(unknown)}")
    twice = {e: n for e, n in per_event.items() if n > 1}
    if twice:
        found.append(
            f"{len(twice)} events decided more than once ({len(outputs.decisions)} live decisions for "
            f"{len(per_event)} events): {_some(twice)}"
        )
    lost = expected.decided - set(per_event)
    if lost:
        found.append(f"{len(lost)} of {len(expected.decided)} events that must be decided have no live decision: "
                     f"{_some(lost)}")  # fmt: skip
    excluded = expected.excluded & set(per_event)
    if excluded:
        found.append(f"{len(excluded)} events below the operator's --start-offsets were decided: {_some(excluded)}")
    late = (expected.earlier & set(per_event)) - expected.decided
    if late:
        found.append(f"{len(late)} events decided after their input topic was deleted: {_some(late)}")
    found += _request_violations(outputs)
    shadow = Counter(str(d["event_id"]) for d in outputs.shadow)
    if any(n > 1 for n in shadow.values()) or set(shadow) - set(outputs.events) - expected.earlier:
        found.append(f"the shadow topic holds {len(outputs.shadow)} decisions for {len(shadow)} events")
    return found


def _request_violations(outputs: Outputs) -> list[str]:
    found: list[str] = []
    by_id = {str(d["decision_id"]): d for d in outputs.decisions}
    orphans = [r for r in outputs.requests if str(r["decision_id"]) not in by_id]
    if orphans:
        found.append(f"{len(orphans)} outbox requests of no live decision: {_some(r['decision_id'] for r in orphans)}")
    asked = [
        (str(by_id[str(r["decision_id"])]["event_id"]), r) for r in outputs.requests if str(r["decision_id"]) in by_id
    ]
    per_effect = Counter((event, str(r["effect"])) for event, r in asked)
    again = [key for key, n in per_effect.items() if n > 1]
    if again:
        found.append(f"{len(again)} side effects asked for more than once: {_some(f'{e}/{x}' for e, x in again)}")
    ids_per_event: dict[str, set[str]] = {}
    for event, r in asked:
        ids_per_event.setdefault(event, set()).add(str(r["decision_id"]))
    split = [event for event, ids in ids_per_event.items() if len(ids) > 1]
    if split:
        found.append(f"{len(split)} events with side effects under two decision ids: {_some(split)}")
    per_decision = Counter(str(r["decision_id"]) for r in outputs.requests)
    wrong = [i for i, d in by_id.items() if per_decision.get(i, 0) != EFFECTS_PER_ACTION[str(d["action"])]]
    if wrong:
        found.append(f"{len(wrong)} decisions without the outbox requests their action asks for: {_some(wrong)}")
    return found


def read_outputs(cluster: KafkaContext, input_topic: str, decisions: str, outbox: str, shadow: str) -> Outputs:
    """The topics as a fresh read_committed consumer sees them now (each read to its last stable offset)."""
    codec = default_codec()
    events = {
        str(codec.decode("payment_event", value)["event_id"]): (partition, offset)
        for partition, records in by_partition(cluster, input_topic).items()
        for offset, (_, value) in enumerate(records)  # the input is written without transactions: offsets from 0
    }
    live = by_partition(cluster, decisions), by_partition(cluster, outbox)

    def decoded(records: Partitioned, schema: str) -> tuple[Record, ...]:
        return tuple(codec.decode(schema, value) for p in sorted(records) for _, value in records[p] if value)

    return Outputs(
        events=events, decisions=decoded(live[0], "fraud_decision"), requests=decoded(live[1], "outbox_request"),
        shadow=decoded(by_partition(cluster, shadow), "fraud_decision"), raw_live=live,
    )  # fmt: skip
