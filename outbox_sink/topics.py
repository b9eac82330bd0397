"""The outbox's topics: requests, receipts and the dead-letter topic, created before the sink runs.

The sink's connector config is not here: the ``outbox-sink`` bundle (connectors/bundles/outbox-sink)
is its one definition, rendered by ``ikkai bundle apply``, the demo, the tests and the benchmark.
"""

from __future__ import annotations

from ikkai.contract import kafka
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import DLQ_OUTBOX, OUTBOX_RECEIPTS, OUTBOX_REQUESTS


def create_outbox_topics(
    cluster: KafkaContext,
    *,
    requests: str = OUTBOX_REQUESTS,
    receipts: str = OUTBOX_RECEIPTS,
    dlq: str = DLQ_OUTBOX,
    partitions: int = 3,
) -> None:
    """Create the outbox's topics on ``cluster`` if missing (``ikkai.contract.kafka.ensure_topics``: the brokers'
    replication); ``cluster`` is a ``KafkaContext``, resolved where the service or command starts.

    Receipts are not compacted although keyed by decision_id: one decision may have a receipt per target.
    """
    cluster = KafkaContext.of(cluster, "create_outbox_topics")
    kafka.ensure_topics(cluster, (requests, receipts), partitions)
    kafka.ensure_topics(cluster, (dlq,), 1)
