"""The topics the product's data flows through: one name each, for every room to use.

``ingest.<endpoint>`` holds raw bytes as received; ``events.<type>`` the enriched Avro events;
``decisions.<model>`` the decisions; ``outbox.requests`` / ``outbox.receipts`` the side effects
asked for and what became of them; ``dlq.<stage>`` each stage's dead letters; ``masterdata.*``
the versioned profiles enrich joins as of the event. The jobs take other names as options; these
are the defaults every room, the demo and the benchmarks agree on.
"""

from __future__ import annotations

from dataclasses import dataclass

INGEST_PAYMENTS = "ingest.payments"
# The payments table's rows as the postgres-cdc bundle lands them (ingest.<table>-db): its own raw topic,
# read by a second enrich query (``--input ingest.payments-db --query enrich-cdc``, docs/cdc.md).
INGEST_PAYMENTS_DB = "ingest.payments-db"
EVENTS_PAYMENTS = "events.payments"
DECISIONS_FRAUD = "decisions.fraud"
OUTBOX_REQUESTS = "outbox.requests"
OUTBOX_RECEIPTS = "outbox.receipts"
DLQ_ENRICH = "dlq.enrich"
DLQ_INFER = "dlq.infer"
DLQ_OUTBOX = "dlq.outbox"
MASTERDATA_MERCHANTS = "masterdata.merchants"
MASTERDATA_CUSTOMERS = "masterdata.customers"

# The control plane's record of applies: compacted, keyed <env>/<bundle>, the last apply of each (deploy.applies).
APPLIES = "_ikkai.applies"
# Who writes which output topic: every start of a query claims its outputs here (ikkai.contract.owner_claims). One
# partition, cleanup.policy=delete with retention.ms=-1 and retention.bytes=-1: never compacted, never deleted.
OWNERS = "_ikkai.owners"

INGEST_PREFIX = "ingest."
DLQ_PREFIX = "dlq."


@dataclass(frozen=True)
class Stage:
    """One step of the pipeline and the topics it writes: its outputs, each with the short name the operator page
    labels its row with, and its dead letters."""

    name: str
    outputs: tuple[tuple[str, str], ...]  # (short name, topic)
    dead_letters: tuple[str, ...] = ()

    @property
    def topics(self) -> tuple[str, ...]:
        """The outputs, then the dead letters."""
        return tuple(topic for _, topic in self.outputs) + self.dead_letters


# The pipeline's stage → topic map, written once: the operator page (deploy.eos_view.flow), the demo's facts and
# its report read it. In the order the data flows.
PIPELINE = (
    Stage("ingested", (("ingest", INGEST_PAYMENTS),)),
    Stage("enriched", (("events", EVENTS_PAYMENTS),), (DLQ_ENRICH,)),
    Stage("decided", (("decisions", DECISIONS_FRAUD), ("outbox", OUTBOX_REQUESTS)), (DLQ_INFER,)),
    Stage("delivered", (("receipts", OUTBOX_RECEIPTS),), (DLQ_OUTBOX,)),
)
# Every topic the pipeline writes, stage by stage (each stage's outputs, then its dead letters).
PIPELINE_TOPICS = tuple(topic for stage in PIPELINE for topic in stage.topics)
