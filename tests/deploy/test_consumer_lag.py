"""Consumer lag (deploy/eos_view/consumer_lag.py): the arithmetic over plain data — a query's progress from its markers,
its lag per input partition, a sink's lag from its group's committed offsets — and, on the real broker, a query's
markers and a consumer group read back as lag. The view showing it is test_page_health.py."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.eos_view.consumer_lag import (
    SINK_GROUP_PREFIX,
    ConsumerLag,
    PartitionLag,
    gaps_to_count,
    query_lags,
    query_progress,
    read_lags,
    sink_lags,
)
from deploy.eos_view.group_offsets import in_child
from deploy.kafka_windows import Deadline
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker
from ikkai.contract.topics import EVENTS_PAYMENTS, OUTBOX_REQUESTS


def marker(partition: int, offsets: dict[int, int], source: str = EVENTS_PAYMENTS) -> CommitMarker:
    return CommitMarker(app="ikkai", query="infer", partition=partition, batch_id=7, partitions=2, records=1,
                        source_topic=source, source_offsets=offsets)  # fmt: skip


def test_a_querys_committed_offset_of_an_input_partition_is_the_highest_any_output_partition_records() -> None:
    # Output partition 1 got no record of the last batches: its marker is older; the query is as far as 0's says.
    markers = {("ikkai", "infer"): [marker(0, {0: 120, 1: 40}), marker(1, {0: 100, 1: 55})]}
    assert query_progress(markers) == {("ikkai", "infer"): (EVENTS_PAYMENTS, {0: 120, 1: 55})}
    assert query_progress({("ikkai", "old"): [marker(0, {0: 5}, source="")]}) == {}  # no input named: no lag


def test_a_querys_lag_is_the_read_committed_end_minus_its_committed_offset_on_every_input_partition() -> None:
    progress = {("ikkai", "infer"): (EVENTS_PAYMENTS, {0: 120, 1: 55})}
    ends = {(EVENTS_PAYMENTS, 0): 130, (EVENTS_PAYMENTS, 1): 55, (EVENTS_PAYMENTS, 2): 9}
    (lag,) = query_lags(progress, ends, {EVENTS_PAYMENTS: [0, 1, 2]})
    assert (lag.kind, lag.name) == ("query", "ikkai.infer")
    assert [(p.partition, p.end, p.committed, p.lag) for p in lag.partitions] == [
        (0, 130, 120, 10), (1, 55, 55, 0), (2, 9, None, None),  # nothing committed from partition 2 yet: no number
    ]  # fmt: skip
    assert lag.total == 10


def test_a_sinks_lag_comes_from_its_connect_group_and_never_goes_below_zero() -> None:
    committed = {(OUTBOX_REQUESTS, 1): 40, (OUTBOX_REQUESTS, 0): 10}
    ends = {(OUTBOX_REQUESTS, 0): 12, (OUTBOX_REQUESTS, 1): 38}  # a read below a commit (a retention race)
    (lag,) = sink_lags({f"{SINK_GROUP_PREFIX}outbox-sink": ("STABLE", committed)}, ends)
    assert lag == ConsumerLag("sink", "outbox-sink", (PartitionLag(OUTBOX_REQUESTS, 0, 12, 10),
                                                      PartitionLag(OUTBOX_REQUESTS, 1, 38, 40)), "STABLE")  # fmt: skip
    assert [p.lag for p in lag.partitions] == [2, 0] and lag.total == 2
    assert PartitionLag(OUTBOX_REQUESTS, 0, None, 3).lag is None  # an end not read shows no lag


def test_a_narrow_gap_is_counted_in_records_so_a_commit_control_record_is_no_lag() -> None:
    where = (OUTBOX_REQUESTS, 0)
    # committed 8 (the control record after the last record read), end 9: read from 8, nothing there
    assert PartitionLag.of(where, 9, 8, {where: (8, [])}).lag == 0
    assert PartitionLag.of(where, 11, 8, {where: (8, [9])}).lag == 1  # one record, then its control record
    assert PartitionLag.of(where, 11, 8, {where: (9, [9])}).lag == 3  # the read began after it: not counted
    assert PartitionLag.of(where, 11, 8, {}).lag == 3  # a gap not read: end minus committed
    ends = {where: 200, (OUTBOX_REQUESTS, 1): 500}
    readers = [(where, 150), (where, 120), (where, 40), ((OUTBOX_REQUESTS, 1), 10), ((OUTBOX_REQUESTS, 1), 500)]
    assert gaps_to_count(readers, ends) == {where: (120, 200)}  # from the lowest narrow reader; wide gaps: not read


# On the real broker.


@pytest.mark.integration
def test_a_querys_markers_and_a_connect_group_read_back_as_their_lag(cluster: KafkaContext) -> None:
    kafka = cluster
    topic = f"lag-in-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka.client_config())
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer(kafka.producer_config())
    for i in range(10):
        producer.produce(topic, value=b"x", partition=i % 2)  # five records on each partition, offsets 0-4
    producer.flush(30)
    group = f"{SINK_GROUP_PREFIX}lag-sink-{uuid.uuid4().hex[:10]}"
    consumer = Consumer(kafka.consumer_config(group))
    consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False)
    consumer.close()
    partitions_of = {topic: [0, 1]}
    queries = {("ikkai", "q"): [marker(0, {0: 2, 1: 4}, source=topic)]}
    groups = in_child(kafka.client_config())  # the real child process
    # max_groups: other tests' groups too
    lags = read_lags(kafka, admin, partitions_of, queries, Deadline(30), groups, max_groups=10_000)
    assert lags.problem is None
    (query,) = lags.queries
    assert [(p.end, p.committed, p.lag) for p in query.partitions] == [(5, 2, 3), (5, 4, 1)]
    (sink,) = [s for s in lags.sinks if s.name == group.removeprefix(SINK_GROUP_PREFIX)]
    assert [(p.topic, p.partition, p.end, p.committed, p.lag) for p in sink.partitions] == [
        (topic, 0, 5, 3, 2), (topic, 1, 5, 5, 0)
    ]  # fmt: skip
    assert sink.state == "EMPTY"  # committed by a consumer that left: no task consumes


@pytest.mark.integration
def test_a_reader_caught_up_on_a_transactional_input_has_no_lag(cluster: KafkaContext) -> None:
    """Every transaction ends in a commit control record after its last record: a reader that read everything
    commits that control record's offset, one below the read_committed end. That is no lag, and one more record
    is a lag of one."""
    kafka = cluster
    topic = f"lag-txn-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka.client_config())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(kafka.producer_config(**{"transactional.id": f"lag-txn-{uuid.uuid4().hex[:10]}"}))
    producer.init_transactions(30)

    def transaction(records: int) -> None:
        producer.begin_transaction()
        for _ in range(records):
            producer.produce(topic, value=b"x", partition=0)
        producer.commit_transaction(30)

    for _ in range(3):
        transaction(2)  # records at 0, 1, 3, 4, 6, 7; commit control records at 2, 5, 8; the end is 9
    group = f"{SINK_GROUP_PREFIX}lag-caught-up-{uuid.uuid4().hex[:10]}"
    consumer = Consumer(kafka.consumer_config(group, **{"enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = []
    while len(read) < 6:  # read_committed, as the sink reads; polls until the six records are in
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            read.append(message)
    consumer.commit(message=read[-1], asynchronous=False)  # the next offset after the last record: 8
    consumer.close()
    partitions_of = {topic: [0]}
    queries = {("ikkai", "q"): [marker(0, {0: read[-1].offset() + 1}, source=topic)]}  # a query as far as the sink
    groups = in_child(kafka.client_config())

    def lags() -> list[tuple[str, int | None, int | None, int | None]]:
        found = read_lags(kafka, admin, partitions_of, queries, Deadline(30), groups, max_groups=10_000)
        assert found.problem is None, found.problem
        mine = [*found.queries, *(s for s in found.sinks if s.name == group.removeprefix(SINK_GROUP_PREFIX))]
        return [(lag.kind, p.end, p.committed, p.lag) for lag in mine for p in lag.partitions]

    assert lags() == [("query", 9, 8, 0), ("sink", 9, 8, 0)]
    transaction(1)  # one record to read at 9, its control record at 10
    assert lags() == [("query", 11, 8, 1), ("sink", 11, 8, 1)]
