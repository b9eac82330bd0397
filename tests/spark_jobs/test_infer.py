"""The infer job as its own process on the real stack: one decision per event, whatever happens.

One input topic is shared by every scenario; each scenario writes its own output topics. The
crash-free run is the reference: crashed, replayed and concurrent runs must reproduce its
decisions and outbox records byte for byte, as read_committed consumers see them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from spark_jobs.fraud_decisions import decision_id
from spark_jobs.payments_simulation import payment_records, simulate
from spark_jobs.serialization import default_codec
from tests.kafka_helpers import create_topic, unique
from tests.spark_jobs.infer_process import InferProcess, InferTopics
from tests.spark_jobs.records import Partitioned, by_partition, flat, produce_payments

pytestmark = pytest.mark.integration

PARTITIONS = 2
EVENTS = 400
BATCH = 40  # maxOffsetsPerTrigger: about ten micro-batches per run


def outputs(bootstrap: str, input_topic: str) -> InferTopics:
    name = unique("t")
    topics = InferTopics(input_topic, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(bootstrap, topic, PARTITIONS)
    return topics


@pytest.fixture(scope="module")
def payments(bootstrap: str) -> tuple[str, list[dict[str, object]]]:
    records = payment_records(simulate(42, payments=EVENTS).payments)
    topic = create_topic(bootstrap, unique("events.payments"), PARTITIONS)
    produce_payments(bootstrap, topic, records, PARTITIONS)
    return topic, records


def run_to_end(bootstrap: str, topics: InferTopics, checkpoint: Path, query: str, *extra: str) -> InferProcess:
    job = InferProcess(bootstrap, topics, checkpoint, query, *extra)
    code = job.wait()
    assert code == 0, job.tail()
    return job


@pytest.fixture(scope="module")
def reference(
    bootstrap: str, payments: tuple[str, list[dict[str, object]]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Partitioned, Partitioned]:
    topics = outputs(bootstrap, payments[0])
    run_to_end(
        bootstrap, topics, tmp_path_factory.mktemp("ref"), unique("ref"), "--max-offsets-per-trigger", str(BATCH)
    )
    return by_partition(bootstrap, topics.decisions), by_partition(bootstrap, topics.outbox)


def test_one_decision_per_event_consistent_with_the_outbox(
    payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned]
) -> None:
    codec = default_codec()
    decisions = [codec.decode("fraud_decision", value) for _, value in flat(reference[0])]
    requests = [codec.decode("outbox_request", value) for _, value in flat(reference[1])]
    assert Counter(d["event_id"] for d in decisions) == Counter(str(p["event_id"]) for p in payments[1])
    by_id = {d["decision_id"]: d for d in decisions}
    assert len(by_id) == EVENTS
    for d in decisions:
        assert d["decision_id"] == decision_id(d["payment_id"], d["event_id"], d["model_version"])
        assert d["input_topic"] == payments[0]
    per_decision = Counter(r["decision_id"] for r in requests)
    assert set(per_decision) <= set(by_id)  # every outbox request belongs to a committed decision
    expected = {"hold": 2, "review": 1, "approve": 0}
    assert all(per_decision.get(i, 0) == expected[d["action"]] for i, d in by_id.items())
    assert {d["action"] for d in decisions} == {"hold", "review", "approve"}  # the test data exercises all three
