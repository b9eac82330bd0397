"""The broker's transaction support, which every exactly-once promise of ikkai rests on."""

from __future__ import annotations

import pytest

from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import commit_then_abort, create_topic, read_all, transactional_producer, unique

pytestmark = pytest.mark.integration


def test_read_committed_sees_only_the_committed_batch(cluster: KafkaContext) -> None:
    topic = create_topic(cluster, unique("test.txn"), partitions=2)
    commit_then_abort(cluster, topic, committed=10, aborted=7)

    committed = read_all(cluster, topic, isolation="read_committed")
    uncommitted = read_all(cluster, topic, isolation="read_uncommitted")

    assert sorted(v for _, v in committed) == sorted(f"committed-{i}".encode() for i in range(10))
    assert len(uncommitted) == 17
    assert {v for _, v in uncommitted if v and v.startswith(b"aborted")} == {f"aborted-{i}".encode() for i in range(7)}


def test_a_new_producer_with_the_same_transactional_id_fences_the_old_one(cluster: KafkaContext) -> None:
    topic = create_topic(cluster, unique("test.fence"))
    transactional_id = unique("test.fence.writer")
    zombie = transactional_producer(cluster, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"from-the-zombie")
    zombie.flush(30)

    successor = transactional_producer(cluster, transactional_id)  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"from-the-successor")
    successor.commit_transaction(60)

    with pytest.raises(Exception) as caught:
        zombie.commit_transaction(30)
    assert caught.value.args[0].fatal() or "fenced" in str(caught.value).lower()
    assert [v for _, v in read_all(cluster, topic)] == [b"from-the-successor"]
