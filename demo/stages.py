"""The four stages the demo follows, from committed record counts per topic. Pure.

ingested = records in ingest.payments of the lines written; enriched = events + dead letters
of them; decided = decisions of the expected events; delivered = receipts of the outbox
requests so far. The pipeline is drained when every line was ingested and enriched, every
event decided and every request receipted.

A replay may start before the pipeline is drained, once its input topic holds every record it
ever will: the enrich replay once every line was ingested, the infer replay once every line was
enriched (``replay_inputs_complete``). The demo asks only once every line was written and every
chaos action recovered; a record arriving later anyway is a duplicate, which the invariants name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from demo.facts import Expectation
from demo.progress import StageProgress
from ikkai.contract.topics import (
    DECISIONS_FRAUD,
    DLQ_ENRICH,
    DLQ_INFER,
    EVENTS_PAYMENTS,
    INGEST_PAYMENTS,
    OUTBOX_RECEIPTS,
    OUTBOX_REQUESTS,
)


@dataclass(frozen=True)
class PipelineCounts:
    expectation: Expectation
    counts: Mapping[str, int]

    def stages(self) -> dict[str, StageProgress]:
        c, lines = self.counts, self.expectation.lines
        return {
            "ingested": StageProgress("ingested", c.get(INGEST_PAYMENTS, 0), lines),
            "enriched": StageProgress("enriched", c.get(EVENTS_PAYMENTS, 0) + c.get(DLQ_ENRICH, 0), lines),
            "decided": StageProgress("decided", c.get(DECISIONS_FRAUD, 0), self.expectation.events),
            "delivered": StageProgress(
                "delivered", c.get(OUTBOX_RECEIPTS, 0), c.get(OUTBOX_REQUESTS, 0) if c.get(DECISIONS_FRAUD) else None
            ),
        }

    def drained(self) -> bool:
        c, lines = self.counts, self.expectation.lines
        return (
            c.get(INGEST_PAYMENTS, 0) >= lines
            and c.get(EVENTS_PAYMENTS, 0) + c.get(DLQ_ENRICH, 0) >= lines
            and c.get(DECISIONS_FRAUD, 0) + c.get(DLQ_INFER, 0) >= c.get(EVENTS_PAYMENTS, 0) > 0
            and c.get(OUTBOX_RECEIPTS, 0) >= c.get(OUTBOX_REQUESTS, 0)
        )

    def replay_inputs_complete(self) -> dict[str, bool]:
        """Per replay job (``enrich``, ``infer``): whether its input topic is complete."""
        c, lines = self.counts, self.expectation.lines
        ingested = c.get(INGEST_PAYMENTS, 0) >= lines
        return {"enrich": ingested, "infer": ingested and c.get(EVENTS_PAYMENTS, 0) + c.get(DLQ_ENRICH, 0) >= lines}
