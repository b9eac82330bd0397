"""Event-time rules of the enrich job: watermark, dedupe by event_id, forward-only state per payment (pure).

One ``EventTimeGate`` per input partition sees that partition's valid records in offset order
and decides for each one, before updating its state:

- ``late``: event_time < watermark, where watermark = (max event_time of the valid records seen
  so far in this partition) − lateness. Before the first valid record there is no watermark.
- ``duplicate``: an event with the same event_id was accepted and is not older than the watermark.
- ``stale``: the payment already has an accepted event with the same or a newer event_time
  (forward-only state: the latest status of a payment moves only to a newer event time, never
  back, whatever the arrival order; an update with the same event_time as the accepted one is
  stale too, so the first arrival wins a tie).
- otherwise accepted: it becomes the payment's latest event.

Why per partition and in offset order, not Spark's watermark: Spark advances its watermark
between micro-batches, so what counts as late would depend on where the batch boundaries
fell; a restart or a replay with other boundaries would decide differently. Here a decision is
a function of the partition's records up to and including this one, nothing else, so any
batching gives the same decisions (the job keeps the gate's state in Spark's state store,
keyed by input partition, so a restart resumes it exactly at the checkpointed batch).

The state stays bounded: ``evict`` drops event ids and payments whose event_time is below the
watermark. That never changes a decision: an event below the watermark is late before it is
looked up, and a lookup ignores entries below the watermark anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from spark_jobs.enrich import reasons as r

DEFAULT_LATENESS_MS = 10_000  # how far behind the newest event_time seen an event may arrive and still count


@dataclass
class EventTimeGate:
    lateness_ms: int = DEFAULT_LATENESS_MS
    max_event_time: int | None = None
    accepted: dict[str, int] = field(default_factory=dict)  # event_id -> event_time
    latest: dict[str, int] = field(default_factory=dict)  # payment_id -> event_time of its latest accepted event

    @property
    def watermark(self) -> int | None:
        return None if self.max_event_time is None else self.max_event_time - self.lateness_ms

    def decide(self, event_id: str, payment_id: str, event_time: int) -> tuple[str, str] | None:
        """None if accepted, else (error_class, reason); the state moves on either way."""
        watermark = self.watermark
        verdict: tuple[str, str] | None = None
        if watermark is not None and event_time < watermark:
            newest = r.instant(watermark + self.lateness_ms)  # the max event_time
            verdict = (r.LATE, f"event_time {r.instant(event_time)} is {watermark - event_time} ms behind the "
                               f"partition's watermark {r.instant(watermark)} (max event_time {newest} - "
                               f"lateness {self.lateness_ms} ms)")  # fmt: skip
        elif event_id in self.accepted and (watermark is None or self.accepted[event_id] >= watermark):
            verdict = (r.DUPLICATE, f"event_id {r.quote(event_id)} was already accepted (event_time "
                                    f"{r.instant(self.accepted[event_id])})")  # fmt: skip
        elif payment_id in self.latest and self.latest[payment_id] >= event_time:
            verdict = (r.STALE, f"payment {r.quote(payment_id)} already has an event at "
                                f"{r.instant(self.latest[payment_id])}, not older than this one's "
                                f"{r.instant(event_time)}")  # fmt: skip
        else:
            self.accepted[event_id] = event_time
            self.latest[payment_id] = event_time
        if self.max_event_time is None or event_time > self.max_event_time:
            self.max_event_time = event_time
        return verdict

    def evict(self) -> None:
        watermark = self.watermark
        if watermark is None:
            return
        self.accepted = {k: t for k, t in self.accepted.items() if t >= watermark}
        self.latest = {k: t for k, t in self.latest.items() if t >= watermark}

    def to_json(self) -> str:
        return json.dumps(
            {"max": self.max_event_time, "accepted": self.accepted, "latest": self.latest}, sort_keys=True
        )

    @classmethod
    def from_json(cls, text: str | None, lateness_ms: int) -> EventTimeGate:
        if not text:
            return cls(lateness_ms)
        state = json.loads(text)
        return cls(lateness_ms, state["max"], dict(state["accepted"]), dict(state["latest"]))
