"""Events without a decision (deploy/eos_view/event_decisions.py): the committed frontier from the infer query's
markers, which events are judged, in flight or outside the outcomes read, which lack a decision and which have two; and,
on the real broker, events, decisions, a dead letter and markers written to their topics and read back, and a real
infer run judged whole, with a decision lost and one repeated on purpose."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from demo.infer_process import InferProcess
from demo.payments_simulation import payment_records, simulate
from deploy.eos_view.event_decisions import Frontier, decided_frontier, read_event_decisions, undecided
from deploy.kafka_windows import Deadline, Record, last_records, offsets
from deploy.kafka_windows import window_coverage as covered_from
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker
from ikkai.contract.topics import DECISIONS_FRAUD, DLQ_INFER, EVENTS_PAYMENTS, OUTBOX_REQUESTS
from spark_jobs.sink.commit_markers import commits_topic_for, read_markers
from stack.kit.topic_io import create_topic, produce_payments, unique
from tests.spark_jobs.infer.infer_topics import outputs

OUTPUTS = (DECISIONS_FRAUD, OUTBOX_REQUESTS, DLQ_INFER)


def marker(partition: int, offsets: dict[int, int], query: str = "infer", outputs: tuple[str, ...] = OUTPUTS,
           source: str = EVENTS_PAYMENTS) -> CommitMarker:  # fmt: skip
    return CommitMarker(app="ikkai", query=query, partition=partition, batch_id=3, partitions=2, records=1,
                        source_topic=source, source_offsets=offsets, output_topics=outputs)  # fmt: skip


def event(partition: int, offset: int, ms: int = 5_000) -> Record:
    return Record(EVENTS_PAYMENTS, partition, offset, ms, b"k", b"v")


def test_the_frontier_is_the_lowest_offset_over_the_output_partitions_and_needs_a_marker_on_each() -> None:
    both = [marker(0, {0: 120, 1: 40}), marker(1, {0: 100, 1: 55})]
    assert decided_frontier(both) == Frontier(EVENTS_PAYMENTS, {0: 100, 1: 40}, DLQ_INFER)
    assert decided_frontier(both[:1]) is None  # output partition 1 has no marker: nothing can be judged
    enrich = [marker(p, {0: 9}, query="enrich", outputs=("events.payments", "dlq.enrich"), source="ingest.payments")
              for p in (0, 1)]  # fmt: skip
    assert decided_frontier(enrich) is None  # it writes no decisions
    # A handover: the newer query starts where the older stopped; what either committed is committed.
    newer = [marker(0, {0: 150, 1: 60}, query="infer-2"), marker(1, {0: 140, 1: 70}, query="infer-2")]
    assert decided_frontier(both + newer) == Frontier(EVENTS_PAYMENTS, {0: 140, 1: 60}, DLQ_INFER)


def test_a_query_writing_in_place_is_judged_per_input_partition_by_that_partitions_marker() -> None:
    # infer: output partition p holds input partition p's outcomes only, so each marker names its own partition
    in_place = [marker(0, {0: 120}), marker(1, {1: 55})]
    assert decided_frontier(in_place) == Frontier(EVENTS_PAYMENTS, {0: 120, 1: 55}, DLQ_INFER)
    # partition 1 has committed nothing yet: its events are in flight, partition 0's are judged all the same
    assert decided_frontier(in_place[:1]) == Frontier(EVENTS_PAYMENTS, {0: 120}, DLQ_INFER)
    # a handover in place: per partition, what either query committed
    newer = [marker(0, {0: 150}, query="infer-2"), marker(1, {1: 50}, query="infer-2")]
    assert decided_frontier(in_place + newer) == Frontier(EVENTS_PAYMENTS, {0: 150, 1: 55}, DLQ_INFER)


def test_an_event_below_the_frontier_needs_a_decision_or_a_dead_letter_and_one_decision_only() -> None:
    events = [event(0, o) for o in range(6)] + [event(1, 0, ms=1_000)]
    decided = [(0, 0), (0, 1), (0, 1), (0, 4)]  # 1 decided twice; 4 beyond the frontier
    dead = [(0, 3)]  # did not decode: its dead letter is its outcome
    without, twice, judged, in_flight, not_judged = undecided(
        events, decided, dead, {0: 4, 1: 5}, covered_from_ms=2_000
    )
    assert without == [(0, 2)]
    assert twice == [(0, 1)]
    # 0@4 and 0@5 are at or past the frontier: in flight; 1@0 is older than the decisions read: not judged
    assert (judged, in_flight, not_judged) == (4, 2, 1)


def test_the_outcomes_read_covers_from_the_latest_first_timestamp_of_a_cut_partition() -> None:
    read = [Record(DECISIONS_FRAUD, 0, 1, 700, None, None), Record(DECISIONS_FRAUD, 0, 0, 500, None, None),
            Record(DECISIONS_FRAUD, 1, 0, 900, None, None)]  # fmt: skip
    assert covered_from(read, []) == 0
    assert covered_from(read, [(DECISIONS_FRAUD, 0)]) == 500
    assert covered_from(read, [(DECISIONS_FRAUD, 0), (DECISIONS_FRAUD, 1)]) == 900


# On the real broker.


@pytest.mark.integration
def test_events_decisions_and_dead_letters_read_back_against_the_markers(cluster: KafkaContext) -> None:
    kafka = cluster
    suffix = uuid.uuid4().hex[:10]
    events_topic, decisions_topic, dlq = f"events.{suffix}", f"decisions.{suffix}", f"dlq.{suffix}"
    admin = AdminClient(kafka.client_config())
    for topic in (events_topic, decisions_topic, dlq):
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    codec = default_codec()
    producer = Producer(kafka.producer_config())
    for offset in range(6):
        producer.produce(events_topic, key=f"p-{offset}", value=b"event")
    producer.flush(30)

    def decision(offset: int) -> None:
        value = {"decision_id": f"d-{offset}", "payment_id": f"p-{offset}", "event_id": f"e-{offset}",
                 "model_version": "m@1", "score": 0.1, "action": "approve", "features": {},
                 "features_as_of": None, "event_time": 0, "input_topic": events_topic, "input_partition": 0,
                 "input_offset": offset}  # fmt: skip
        producer.produce(decisions_topic, key=f"p-{offset}", value=codec.encode("fraud_decision", value))

    for offset in (0, 1, 1, 4):  # 2 has none, 3 is a dead letter, 4 and 5 are beyond the frontier
        decision(offset)
    letter = {"stage": "infer", "source_topic": events_topic, "source_partition": 0, "source_offset": 3,
              "key": None, "value": b"x", "reason": "r", "error_class": "SchemaError", "source_timestamp": 0,
              "headers": {}}  # fmt: skip
    producer.produce(dlq, value=codec.encode("dead_letter", letter))
    producer.flush(30)
    markers = [CommitMarker("ikkai", "infer", 0, 1, 1, 4, events_topic, {0: 4}, output_topics=(decisions_topic, dlq))]
    partitions_of = {events_topic: [0], decisions_topic: [0], dlq: [0]}
    found = read_event_decisions(kafka, admin, partitions_of, markers, codec, Deadline(30), decisions_topic)
    assert found.problem is None, found.problem
    assert (found.events, found.decisions, found.source_topic) == (6, 4, events_topic)
    assert (found.without, found.twice) == (((0, 2),), ((0, 1),))
    assert (found.judged, found.in_flight, found.not_judged) == (4, 2, 0)


@pytest.mark.integration
def test_after_a_real_infer_run_every_event_is_judged_and_a_missing_and_a_repeated_decision_show(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """The infer job's own markers (in place: one input partition each) judge every event once the run committed;
    a decision then removed from its topic and one written a second time (transactionally) are each reported."""
    kafka = cluster
    payments = payment_records(simulate(7, payments=24).payments)
    source = create_topic(cluster, unique("events.payments"), 2)
    produce_payments(cluster, source, payments, 2)
    topics = outputs(cluster, source)
    query = unique("judged")
    job = InferProcess(cluster, topics, tmp_path / "checkpoint", query)
    assert job.wait(1200) == 0, job.tail()

    admin = AdminClient(kafka.client_config())
    codec = default_codec()
    decisions = [(topics.decisions, p) for p in (0, 1)]
    ends = offsets(admin, decisions, OffsetSpec.latest(), Deadline(30))  # type: ignore[no-untyped-call]
    read, unread = last_records(kafka, {w: (0, end) for w, end in ends.items()}, Deadline(60))
    assert not unread and {r.partition for r in read} == {0, 1}
    first, second = sorted((r for r in read if r.partition == 0), key=lambda r: r.offset)[:2]
    repeated = next(r for r in read if r.partition == 1)

    def named(record: Record) -> tuple[int, int]:
        value = codec.decode("fraud_decision", record.value or b"")
        return int(value["input_partition"]), int(value["input_offset"])

    # A decision lost: every record of decisions partition 0 before the second decision is deleted.
    deleted = admin.delete_records([TopicPartition(topics.decisions, 0, second.offset)])
    assert all(future.result(30) for future in deleted.values())
    # A decision written twice: the same record again, in a committed transaction.
    producer = Producer(kafka.producer_config(**{"transactional.id": unique("planted")}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topics.decisions, key=repeated.key, value=repeated.value, partition=1)
    producer.commit_transaction(30)

    markers = read_markers(kafka, "ikkai", query, topic=commits_topic_for("ikkai", query))
    assert all(set(m.source_offsets) == {p} for p, m in markers.items())  # infer writes in place
    partitions_of = {topic: [0, 1] for topic in (source, topics.decisions, topics.outbox, topics.dlq)}
    found = read_event_decisions(kafka, admin, partitions_of, markers.values(), codec, Deadline(60), topics.decisions)
    assert found.problem is None, found.problem
    assert (found.events, found.judged, found.in_flight, found.not_judged) == (len(payments), len(payments), 0, 0)
    assert found.without == (named(first),)
    assert found.twice == (named(repeated),)
