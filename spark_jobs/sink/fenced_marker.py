"""One marker written at the start, the exactly-once way: fence the writers of its id, read it, write its successor.

Three steps of a query's start write a marker without any output record: a recreated input's rebase
(``input_identity``), a handover recorded on the origin's markers (``query_handover``) and an output
partition's start recorded as a marker of its own (``partition_transactions.record_start``). Each is
``rewrite_marker``: a fresh producer of the partition's ``transactional.id`` ``<app>.<query>.<p>``,
whose ``init_transactions`` fences every older writer of it and ends the transaction one left open;
only then the marker is read (``commit_markers.read_marker``: after the fence nothing can be open on
its partition, so the read sees every committed marker; read before, it could be stale); then the
caller's pure rule says what to write instead, and that marker alone is committed in one transaction
of the same producer. A writer fenced meanwhile fails its commit; nothing half-done is ever visible.
"""

from __future__ import annotations

from collections.abc import Callable

from ikkai.contract.codec import default_codec
from spark_jobs.sink.commit_markers import CommitMarker, marker_key, read_marker
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.kafka_errors import call_with_retries
from spark_jobs.sink.producer_pool import transactional_producer

Rewrite = Callable[[CommitMarker | None], CommitMarker | None]  # the marker read after the fence -> what to write


def rewrite_marker(
    config: SinkConfig, query: str, partition: int, topic: str, rewrite: Rewrite
) -> tuple[CommitMarker | None, bool]:
    """Fence (``config.app``, ``query``, ``partition``)'s writers, read its marker on ``topic``, commit its rewrite.

    ``rewrite`` is pure (it may refuse by raising); None writes nothing. The partition's marker after it, and whether
    this call wrote it. The producer has the sink's settings (``config``) with the id of ``query``'s partition.
    """
    txn_id, deadline = marker_key(config.app, query, partition).decode(), config.retry_deadline_s
    producer = transactional_producer(config, txn_id)
    try:
        call_with_retries(
            txn_id, "init_transactions", lambda: producer.init_transactions(deadline), deadline_s=deadline
        )
        marker = read_marker(config.cluster, config.app, query, partition, topic=topic)  # after the fence: final
        successor = rewrite(marker)
        if successor is None:
            return marker, False
        call_with_retries(txn_id, "begin_transaction", producer.begin_transaction, deadline_s=deadline)
        producer.produce(topic, key=successor.key, value=successor.encode(default_codec()), partition=partition)
        call_with_retries(
            txn_id, "commit_transaction", lambda: producer.commit_transaction(deadline), deadline_s=deadline
        )
        return successor, True
    finally:
        producer.purge()  # nothing of a transaction that did not commit goes out
        producer.flush(0)
