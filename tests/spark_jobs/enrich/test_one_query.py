"""Enrich and infer as one query (``python -m spark_jobs.enrich_infer``) on the real stack: a crash, then a restart.

What counts is what read_committed consumers see: every valid raw line has exactly one event and one decision.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from demo.infer_process import InferProcess, job_environment
from demo.payments_simulation import generate_profiles
from demo.raw_payments import mixed_stream, produce_lines
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from spark_jobs.enrich.master_data import publish_profiles
from stack.kit.topic_io import by_partition, create_topic, flat, unique

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
SEED = 7


class OneQueryProcess(InferProcess):
    """The one query as its own process group (the process handling is ``InferProcess``'s)."""

    def __init__(
        self, cluster: KafkaContext, topics: dict[str, str], checkpoint: Path, query: str, *extra: str
    ) -> None:
        command = [
            sys.executable, "-m", "spark_jobs.enrich_infer", "--bootstrap", cluster.bootstrap_servers,
            "--checkpoint", str(checkpoint), "--query", query, "--input", topics["ingest"],
            "--output", topics["events"], "--dlq", topics["dlq-enrich"], "--merchants", topics["merchants"],
            "--customers", topics["customers"], "--decisions", topics["decisions"], "--outbox", topics["outbox"],
            "--dlq-infer", topics["dlq-infer"], "--max-offsets-per-trigger", "150", *extra,
        ]  # fmt: skip
        self._start(command, job_environment(cluster))


def decoded(cluster: KafkaContext, topic: str, schema: str) -> list[dict[str, Any]]:
    """Every record of ``topic`` a read_committed consumer sees, decoded."""
    codec = default_codec()
    return [codec.decode(schema, value or b"") for _, value in flat(by_partition(cluster, topic))]


def test_a_crash_after_a_batch_then_a_restart_leaves_one_event_and_one_decision_per_valid_line(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """SIGKILL right after batch 0 reached Kafka (before Spark's checkpoint), then a restart to the end: batch 0
    runs again, and its events, decisions and outbox requests, written in the same transactions, are not
    written twice; nothing is missing."""
    stream = mixed_stream(SEED, payments=150, partitions=PARTITIONS)
    name = unique("one")
    topics = {"merchants": f"masterdata.merchants.{name}", "customers": f"masterdata.customers.{name}"}
    merchants, customers = generate_profiles(stream.world, SEED)
    publish_profiles(cluster, merchants, customers, merchants_topic=topics["merchants"],
                     customers_topic=topics["customers"], transactional_id=unique("test.masterdata"))  # fmt: skip
    for kind in ("ingest", "events", "dlq-enrich", "decisions", "outbox", "dlq-infer"):
        topics[kind] = create_topic(cluster, f"{kind}.{name}", PARTITIONS)
    produce_lines(cluster, topics["ingest"], stream.lines)
    query = unique("one")

    crashed = OneQueryProcess(cluster, topics, tmp_path, query, "--crash-after-batch", "0")
    crashed.wait()
    assert "fault injection: SIGKILL after batch 0" in "".join(crashed.log), crashed.tail()
    restarted = OneQueryProcess(cluster, topics, tmp_path, query)
    assert restarted.wait() == 0, restarted.tail()

    valid = Counter(stream.expected_event_ids())
    events = decoded(cluster, topics["events"], "payment_event")
    decisions = by_partition(cluster, topics["decisions"])
    decided = decoded(cluster, topics["decisions"], "fraud_decision")
    assert Counter(e["event_id"] for e in events) == valid  # each valid line one event, read_committed
    assert Counter(d["event_id"] for d in decided) == valid  # and one decision
    events_by_partition = by_partition(cluster, topics["events"])
    for partition, records in decisions.items():  # each decision beside its event, keyed like it
        assert {key for key, _ in records} <= {key for key, _ in events_by_partition[partition]}
    requests = decoded(cluster, topics["outbox"], "outbox_request")
    asked = {d["decision_id"] for d in decided if d["action"] != "approve"}
    assert {r["decision_id"] for r in requests} == asked and asked
    assert Counter((r["decision_id"], r["effect"]) for r in requests).most_common(1)[0][1] == 1
