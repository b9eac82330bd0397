"""The latency picture of the health view: produced → decision and decision → receipt, p50 and p99 per minute.

Read from records the health sample reads anyway, in its bounded read_committed windows (no read of its own):

- **produced → decision**: a decision names its input record (``input_topic``/``input_partition``/
  ``input_offset``, ``fraud_decision``); its latency is the decision record's Kafka timestamp minus that event
  record's Kafka timestamp. Only decisions whose event is in the events window (``EVENTS_WINDOW`` offsets a
  partition, ``deploy.eos_view.event_decisions``) count.
- **decision → receipt**: a receipt's Kafka timestamp minus the Kafka timestamp of its decision's outbox
  request (the request is written with the decision, in its transaction), matched by decision id; the first
  receipt of each (decision, effect) counts, not the at-least-once repeats. Only requests in the requests
  window (``REQUESTS_WINDOW``, ``deploy.eos_view.reconciliation``) count.

Each point is filed under the minute of its later record (the decision, the receipt). Timestamps are the
producers' clocks (``CreateTime``): a negative difference (clock skew between machines) is kept as it is,
so a skew shows rather than hides. Percentiles are by nearest rank. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

BUCKET_SECONDS = 60
BUCKETS = 15  # the last quarter of an hour, one bucket a minute

Point = tuple[int, int]  # (when the later record was written, ms since the epoch; the latency in ms)
Position = tuple[int, int]  # (partition, offset) of an input record


@dataclass(frozen=True)
class Bucket:
    start_ms: int  # the bucket is [start_ms, start_ms + BUCKET_SECONDS * 1000)
    count: int
    p50_ms: int | None  # None: no point in the bucket
    p99_ms: int | None


def percentile(values: Sequence[int], q: float) -> int | None:
    """The ``q``-th percentile (0..100) of ``values`` by nearest rank; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-int(q * len(ordered)) // 100)))
    return ordered[rank - 1]


def buckets(
    points: Iterable[Point], now_ms: int, bucket_seconds: int = BUCKET_SECONDS, count: int = BUCKETS
) -> list[Bucket]:
    """``count`` buckets of ``bucket_seconds`` each, the last one holding ``now_ms``, oldest first, with the p50
    and p99 of the points filed in each; points outside them are left out."""
    width = bucket_seconds * 1000
    first = (now_ms // width - count + 1) * width
    filed: list[list[int]] = [[] for _ in range(count)]
    for at, latency in points:
        index = (at - first) // width
        if 0 <= index < count:
            filed[index].append(latency)
    return [
        Bucket(first + i * width, len(values), percentile(values, 50), percentile(values, 99))
        for i, values in enumerate(filed)
    ]


def produced_to_decision(events: Mapping[Position, int], decisions: Iterable[tuple[Position, int]]) -> list[Point]:
    """(decision time, decision time - its event's time) of each decision whose event is known. ``events``:
    position → the event record's timestamp; ``decisions``: (the event position it names, its own timestamp)."""
    return [(at, at - events[position]) for position, at in decisions if position in events]


def decision_to_receipt(requests: Iterable[tuple[str, int]], receipts: Iterable[tuple[str, str, int]]) -> list[Point]:
    """(receipt time, receipt time - its decision's request time) of the first receipt of each (decision, effect)
    whose request is known. ``requests``: (decision id, timestamp), the earliest of a decision counts;
    ``receipts``: (decision id, effect, timestamp)."""
    asked: dict[str, int] = {}
    for decision, at in requests:
        asked[decision] = min(asked.get(decision, at), at)
    first: dict[tuple[str, str], int] = {}
    for decision, effect, at in receipts:
        if decision in asked:
            first[decision, effect] = min(first.get((decision, effect), at), at)
    return sorted((at, at - asked[decision]) for (decision, _), at in first.items())
