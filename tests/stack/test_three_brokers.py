"""Three brokers, and one that dies: replication settings, and exactly-once through a leader's kill -9.

Its own embedded stack of three KRaft nodes in a temporary home, one for the module. The infer job runs as its own
process while the broker leading one of its output partitions is SIGKILLed mid-stream and started
again; a read_committed reader then finds one decision per payment, none twice, none missing.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import jars_dir
from spark_jobs.sink import commit_markers
from spark_jobs.sink.commit_markers import CommitMarker, ensure_commits_topic, read_marker
from spark_jobs.sink.config import SinkConfig
from stack.kit.chaos import ChaosStack
from stack.kit.leaders import TRANSACTION_STATE_TOPIC
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, transactional_producer, unique
from stack.local_stack import CONNECT
from stack.processes import stack_processes
from stack.shape import StackOptions

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
EVENTS = 300
BATCH = 20  # maxOffsetsPerTrigger: about fifteen micro-batches, so the kill lands mid-stream
BROKERS = ("broker-1", "broker-2", "broker-3")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosStack]:
    """One three-broker stack for the module (a start is most of a minute): each test kills a broker and has it
    running and in sync again before it ends, and works on topics of its own; ``up`` in a test is then a no-op."""
    home = tmp_path_factory.mktemp("three-brokers") / "home"
    local = ChaosStack(home, jars_dir(), StackOptions(brokers=3), heap="512m", progress=sys.stderr)
    try:
        yield local
    finally:
        commit_markers.forget_clusters()  # its cached admin client would log refused connections for the session
        local.down()
        for pids in stack_processes(local.home).values():  # never leak a JVM, even when a test failed
            for pid in pids:
                os.kill(pid, signal.SIGKILL)


def replication(admin: AdminClient, topic: str, timeout: float = 30) -> tuple[set[int], str]:
    """(replica counts of the topic's partitions, its effective min.insync.replicas).

    A new topic reaches each broker's metadata a moment apart: until the one asked has it, it is unknown.
    """
    deadline = time.monotonic() + timeout
    resource = ConfigResource("topic", topic)
    while True:
        try:
            config = admin.describe_configs([resource])[resource].result(timeout=30)
            break
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    return {len(p.replicas) for p in partitions}, config["min.insync.replicas"].value


def test_three_brokers_replicate_and_exactly_once_survives_an_output_leaders_kill_9(
    stack: ChaosStack, tmp_path: Path
) -> None:
    endpoints = stack.up()
    bootstrap, cluster = endpoints.bootstrap_servers, KafkaContext.recorded(endpoints)
    assert len(bootstrap.split(",")) == 3
    status = stack.status()
    assert [c.name for c in status.components] == [*BROKERS, CONNECT] and status.running
    admin = AdminClient({"bootstrap.servers": bootstrap})

    payments = payment_records(simulate(7, payments=EVENTS).payments)
    name = unique("three")
    topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.input, topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)  # replication factor -1: the brokers' default
    assert replication(admin, topics.decisions) == ({3}, "2")
    produce_payments(cluster, topics.input, payments, PARTITIONS)  # acks=all

    query, checkpoint, runs = unique("three"), tmp_path / "checkpoint", 1
    job = InferProcess(cluster, topics, checkpoint, query, "--max-offsets-per-trigger", str(BATCH))
    assert job.wait_for_batches(1), job.tail()
    victim = stack.leader_of(topics.decisions, 0)
    stack.kill(victim)
    stack.start(victim)  # the job goes on meanwhile, or dies and is run again below
    while job.wait() != 0:  # a job the broker's death stopped: exactly-once must hold across its restart
        runs += 1
        assert runs <= 3, job.tail()
        print(f"job run {runs - 1} failed after the kill of {victim}:\n{job.tail(60)}", file=sys.stderr)
        job = InferProcess(cluster, topics, checkpoint, query, "--max-offsets-per-trigger", str(BATCH))
    print(f"killed and restarted {victim}; the job ran {runs} time(s)", file=sys.stderr)

    decisions = by_partition(cluster, topics.decisions)
    events = Counter(default_codec().decode("fraud_decision", value)["event_id"] for _, value in flat(decisions))
    expected = {str(payment["event_id"]) for payment in payments}
    assert not [event for event, count in events.items() if count > 1], "duplicate decisions"
    assert not expected - set(events), "missing decisions"
    assert set(events) == expected
    # The transaction state log, created by the job's first transactional producer, is replicated the same way.
    assert replication(admin, TRANSACTION_STATE_TOPIC) == ({3}, "2")
    stack.wait_in_sync(timeout=60)
    assert stack.status().running, "the restarted broker is back"


def test_a_marker_read_after_the_commits_leader_restarted_asks_the_new_leader(stack: ChaosStack) -> None:
    """Found by the soak: the marker reader's cached admin client kept asking the old leader (NOT_LEADER, or
    no answer while it was down) for 15 minutes of stale metadata; the read gave up and stopped the enrich job."""
    endpoints = stack.up()
    cluster = KafkaContext.recorded(endpoints)
    query = unique("moved")
    config = SinkConfig(
        app="test", query=query, cluster=cluster, output_topics=(), partitions=1, order_by=("seq",),
        source_topic="test.in",
    )  # fmt: skip
    ensure_commits_topic(cluster, config.commits_topic, 1)
    marker = CommitMarker("test", query, 0, 3, 1, 5, "test.in", {0: 5})
    writer = transactional_producer(cluster, config.transactional_id(0))
    writer.begin_transaction()
    writer.produce(config.commits_topic, key=marker.key, value=marker.encode(default_codec()), partition=0)
    writer.commit_transaction(30)
    commit_markers._seen.clear()
    assert read_marker(cluster, "test", query, 0, topic=config.commits_topic) == marker  # the client is cached

    victim = stack.leader_of(config.commits_topic, 0)
    stack.kill(victim)
    stack.start(victim)
    stack.wait_in_sync(timeout=60)
    assert stack.leader_of(config.commits_topic, 0) != victim  # the restarted broker follows for now
    commit_markers._seen.clear()  # a fresh task of the same worker process, as after a failed batch
    assert read_marker(cluster, "test", query, 0, topic=config.commits_topic, deadline_s=60) == marker
