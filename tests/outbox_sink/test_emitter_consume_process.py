"""A service that consumes, decides and emits: input offsets commit with its requests (KIP-447).

The service (consume_process_service.py) runs in its own process and SIGKILLs itself at the
worst points on purpose; restarted, it finishes the input. What a read_committed consumer then
sees on the outbox topic is the verdict: exactly one request per input record.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from ikkai.contract.kafka import KafkaContext
from outbox_sink import OutboxDeliveryError, OutboxEmitter
from outbox_sink.emitter import TransactionalConsumer
from stack.kit.topic_io import create_topic, read_all, unique
from tests.outbox_sink.consume_process_service import decide

pytestmark = pytest.mark.integration

INPUTS = 60
BATCH = 10
REPO = Path(__file__).resolve().parents[2]


class ServiceRun:
    """One input topic, one outbox topic, one consumer group and transactional id: a service's world."""

    def __init__(self, cluster: KafkaContext) -> None:
        self.cluster = cluster
        self.input = create_topic(cluster, unique("events.test"), partitions=2)
        self.outbox = create_topic(cluster, unique("outbox.requests"), partitions=3)
        self.group = unique("test.consume-process")
        self.transactional_id = unique("test.consume-process.txn")
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
        for i in range(INPUTS):
            producer.produce(self.input, key=f"in-{i:03d}", value=f'{{"seq": {i}}}')
        assert producer.flush(30) == 0

    def run(self, *options: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable, "-m", "tests.outbox_sink.consume_process_service",
            "--bootstrap", self.cluster.bootstrap_servers, "--input", self.input, "--outbox", self.outbox,
            "--group", self.group, "--transactional-id", self.transactional_id, "--batch", str(BATCH), *options,
        ]  # fmt: skip
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180, check=False)

    def requests_per_input(self, isolation: str = "read_committed") -> Counter[str]:
        return Counter((key or b"").decode() for key, _ in read_all(self.cluster, self.outbox, isolation=isolation))


def counts(stdout: str, step: str) -> list[int]:
    return [int(line.split()[1]) for line in stdout.splitlines() if line.startswith(f"{step} ")]


def consume(consumer: TransactionalConsumer, count: int, timeout: float = 30.0) -> list[Message]:
    records: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        records += [m for m in consumer.consume(count - len(records), timeout=1.0) if m.error() is None]
    return records


def everyone() -> set[str]:
    return {f"in-{i:03d}" for i in range(INPUTS)}


@pytest.mark.parametrize("kill_at", ["transaction-open", "between-commits"])
def test_a_service_killed_mid_stream_emits_one_request_per_input(cluster: KafkaContext, kill_at: str) -> None:
    service = ServiceRun(cluster)

    killed = service.run("--kill-at", kill_at, "--kill-after", "3")
    assert killed.returncode == -9, killed.stderr
    committed = sum(counts(killed.stdout, "committed"))
    assert 0 < committed < INPUTS, "the kill did not land mid-stream; the test proves nothing"
    assert sum(service.requests_per_input().values()) == committed
    if kill_at == "transaction-open":  # the worst case was built: the open transaction's requests are in the log
        [open_requests] = counts(killed.stdout, "open")
        assert sum(service.requests_per_input("read_uncommitted").values()) == committed + open_requests

    finished = service.run()
    assert finished.returncode == 0, finished.stderr

    seen = service.requests_per_input()
    assert {key: n for key, n in seen.items() if n > 1} == {}, "repeated requests"
    assert everyone() - set(seen) == set(), "missing requests"


def test_offsets_committed_after_the_transaction_repeat_requests_after_a_kill(cluster: KafkaContext) -> None:
    """The hazard the transactional offsets remove: kill between the requests' commit and the offsets' commit."""
    service = ServiceRun(cluster)

    killed = service.run("--offsets", "after-commit", "--kill-at", "before-offset-commit", "--kill-after", "3")
    assert killed.returncode == -9, killed.stderr
    last_batch = counts(killed.stdout, "committed")[-1]
    finished = service.run("--offsets", "after-commit")
    assert finished.returncode == 0, finished.stderr

    seen = service.requests_per_input()
    assert everyone() - set(seen) == set()
    repeated = {key for key, n in seen.items() if n > 1}
    assert len(repeated) == last_batch > 0  # the last committed batch, emitted again after the restart


def test_an_aborted_transaction_rewinds_the_consumer_to_read_its_input_again(cluster: KafkaContext) -> None:
    service = ServiceRun(cluster)
    emitter = OutboxEmitter(cluster, transactional_id=service.transactional_id, topic=service.outbox)
    consumer = TransactionalConsumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": service.group, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([service.input])
    try:
        first = consume(consumer, BATCH)
        with pytest.raises(RuntimeError), emitter.transaction(consumer):
            for message in first:
                emitter.emit(decide(message))
            emitter.flush()
            raise RuntimeError("the service failed mid-batch")

        again = consume(consumer, INPUTS)  # rewound to the start: nothing was committed
        placed = [(m.partition(), m.offset()) for m in again]
        assert len(set(placed)) == len(placed) == INPUTS
        with emitter.transaction(consumer):
            for message in again:
                emitter.emit(decide(message))
    finally:
        consumer.close()
        emitter.close()

    assert service.requests_per_input() == Counter(everyone())


def read_to_end(consumer: TransactionalConsumer, timeout: float = 60.0) -> list[Message]:
    """Records until every assigned partition reported its end (``enable.partition.eof``), after a first assignment."""
    records: list[Message] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in consumer.consume(100, timeout=0.5):
            error = message.error()
            if error is None:
                records.append(message)
                at_end.discard(message.partition() or 0)
            else:
                assert error.code() == KafkaError._PARTITION_EOF, error.str()
                at_end.add(message.partition() or 0)
        assigned = {tp.partition for tp in consumer.assignment()}
        if assigned and assigned <= at_end:
            return records
    raise AssertionError(f"the consumer did not reach the end of {sorted(at_end)} in {timeout}s")


def test_a_new_service_whose_first_transaction_aborts_reads_only_its_own_input_again(cluster: KafkaContext) -> None:
    """The documented consumer: no auto.offset.reset, so librdkafka's default, latest. The input holds
    INPUTS records of history the new service never read; its first transaction aborts. The rewind
    must put it back where it started, not at the start of the retained input."""
    service = ServiceRun(cluster)  # the history: INPUTS records, before the service exists
    emitter = OutboxEmitter(cluster, transactional_id=service.transactional_id, topic=service.outbox)
    consumer = TransactionalConsumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": service.group, "enable.partition.eof": True,
    })  # fmt: skip
    consumer.subscribe([service.input])
    try:
        assert read_to_end(consumer) == []  # started at the end: the history is not this service's input
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
        fresh = {f"new-{i:03d}" for i in range(BATCH)}
        for key in sorted(fresh):
            producer.produce(service.input, key=key, value=b"{}")
        assert producer.flush(30) == 0
        first = consume(consumer, BATCH)
        assert {(m.key() or b"").decode() for m in first} == fresh
        with pytest.raises(RuntimeError), emitter.transaction(consumer):
            for message in first:
                emitter.emit(decide(message))
            raise RuntimeError("the service failed in its first transaction")

        again = read_to_end(consumer)  # rewound: the aborted batch, and nothing of the history
        assert sorted((m.key() or b"").decode() for m in again) == sorted(fresh)
        with emitter.transaction(consumer):
            for message in again:
                emitter.emit(decide(message))
    finally:
        consumer.close()
        emitter.close()
    assert service.requests_per_input() == Counter(fresh)


def next_offsets(batch: list[Message]) -> list[TopicPartition]:
    """The offsets to commit after ``batch``: each partition's last offset + 1."""
    last: dict[tuple[str, int], int] = {}
    for m in batch:
        place = (m.topic() or "", m.partition() or 0)
        last[place] = max(last.get(place, -1), m.offset() or 0)
    return [TopicPartition(topic, partition, offset + 1) for (topic, partition), offset in sorted(last.items())]


def test_an_instance_that_lost_its_partitions_in_a_rebalance_cannot_commit_them(cluster: KafkaContext) -> None:
    """The generation fencing docs/outbox.md claims, built: instance A holds an open transaction over its
    batch and stalls (no poll) past max.poll.interval.ms while instance B joins the group; the group
    rebalances without A, B takes every partition, reads the same input, emits and commits. Then A
    ends its block. A's commit must fail: each input record has exactly one request, B's."""
    service = ServiceRun(cluster)
    member = {
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": service.group, "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000, "max.poll.interval.ms": 6000, "heartbeat.interval.ms": 500,
    }  # fmt: skip
    emitter_a = OutboxEmitter(cluster, transactional_id=service.transactional_id + ".a", topic=service.outbox)
    emitter_b = OutboxEmitter(cluster, transactional_id=service.transactional_id + ".b", topic=service.outbox)
    consumer_a, consumer_b = TransactionalConsumer(member), TransactionalConsumer(member)
    consumer_a.subscribe([service.input])
    taken_by_b: list[Message] = []
    try:
        batch = consume(consumer_a, INPUTS)
        assert len(batch) == INPUTS  # A alone in the group: every partition
        with pytest.raises(OutboxDeliveryError) as caught, emitter_a.transaction(consumer_a):
            for message in batch:
                emitter_a.emit(decide(message))
            emitter_a.flush()
            # A stalls here (a long GC, a slow call): B joins; the group gives B everything once A is out.
            consumer_b.subscribe([service.input])
            taken_by_b = consume(consumer_b, INPUTS, timeout=90)
            with emitter_b.transaction(consumer_b):
                for message in taken_by_b:
                    emitter_b.emit(decide(message))
            # A comes back and names its offsets itself (no assignment check of the emitter's in the way):
            # only the group generation in its transaction can stop it now.
            emitter_a.send_offsets(next_offsets(batch))
        # The broker refuses A's offsets (Unknown member / Illegal generation): abortable, so A aborts and rewinds.
        assert not caught.value.fatal
        assert "member" in str(caught.value).lower() or "generation" in str(caught.value).lower(), caught.value
    finally:
        consumer_a.close()
        consumer_b.close()
        emitter_a.close()
        emitter_b.close()
    assert len(taken_by_b) == INPUTS, "B did not take A's partitions over: no rebalance was built"
    seen = service.requests_per_input()
    assert {key: n for key, n in seen.items() if n > 1} == {}, "the zombie's requests were committed too"
    assert set(seen) == everyone()


def test_a_fenced_emitter_stops_with_a_fatal_error(cluster: KafkaContext) -> None:
    service = ServiceRun(cluster)
    zombie = OutboxEmitter(cluster, transactional_id=service.transactional_id, topic=service.outbox)
    consumer = TransactionalConsumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": service.group, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([service.input])
    try:
        batch = consume(consumer, BATCH)
        with pytest.raises(OutboxDeliveryError) as caught, zombie.transaction(consumer):
            for message in batch:
                zombie.emit(decide(message))
            OutboxEmitter(cluster, transactional_id=service.transactional_id, topic=service.outbox).close()
        assert caught.value.fatal
    finally:
        consumer.close()
    assert service.requests_per_input() == Counter()
