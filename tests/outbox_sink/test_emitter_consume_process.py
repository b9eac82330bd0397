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
from confluent_kafka import Message, Producer

from demo.pipeline_io import create_topic, unique
from outbox_sink import OutboxDeliveryError, OutboxEmitter
from outbox_sink.emitter import TransactionalConsumer
from tests.kafka_helpers import read_all
from tests.outbox_sink.consume_process_service import decide

pytestmark = pytest.mark.integration

INPUTS = 60
BATCH = 10
REPO = Path(__file__).resolve().parents[2]


class ServiceRun:
    """One input topic, one outbox topic, one consumer group and transactional id: a service's world."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.input = create_topic(bootstrap, unique("events.test"), partitions=2)
        self.outbox = create_topic(bootstrap, unique("outbox.requests"), partitions=3)
        self.group = unique("test.consume-process")
        self.transactional_id = unique("test.consume-process.txn")
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(INPUTS):
            producer.produce(self.input, key=f"in-{i:03d}", value=f'{{"seq": {i}}}')
        assert producer.flush(30) == 0

    def run(self, *options: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable, "-m", "tests.outbox_sink.consume_process_service",
            "--bootstrap", self.bootstrap, "--input", self.input, "--outbox", self.outbox,
            "--group", self.group, "--transactional-id", self.transactional_id, "--batch", str(BATCH), *options,
        ]  # fmt: skip
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180, check=False)

    def requests_per_input(self, isolation: str = "read_committed") -> Counter[str]:
        return Counter((key or b"").decode() for key, _ in read_all(self.bootstrap, self.outbox, isolation=isolation))


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
def test_a_service_killed_mid_stream_emits_one_request_per_input(bootstrap: str, kill_at: str) -> None:
    service = ServiceRun(bootstrap)

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


def test_offsets_committed_after_the_transaction_repeat_requests_after_a_kill(bootstrap: str) -> None:
    """The hazard the transactional offsets remove: kill between the requests' commit and the offsets' commit."""
    service = ServiceRun(bootstrap)

    killed = service.run("--offsets", "after-commit", "--kill-at", "before-offset-commit", "--kill-after", "3")
    assert killed.returncode == -9, killed.stderr
    last_batch = counts(killed.stdout, "committed")[-1]
    finished = service.run("--offsets", "after-commit")
    assert finished.returncode == 0, finished.stderr

    seen = service.requests_per_input()
    assert everyone() - set(seen) == set()
    repeated = {key for key, n in seen.items() if n > 1}
    assert len(repeated) == last_batch > 0  # the last committed batch, emitted again after the restart


def test_an_aborted_transaction_rewinds_the_consumer_to_read_its_input_again(bootstrap: str) -> None:
    service = ServiceRun(bootstrap)
    emitter = OutboxEmitter(bootstrap, transactional_id=service.transactional_id, topic=service.outbox)
    consumer = TransactionalConsumer({
        "bootstrap.servers": bootstrap, "group.id": service.group, "auto.offset.reset": "earliest",
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


def test_a_fenced_emitter_stops_with_a_fatal_error(bootstrap: str) -> None:
    service = ServiceRun(bootstrap)
    zombie = OutboxEmitter(bootstrap, transactional_id=service.transactional_id, topic=service.outbox)
    consumer = TransactionalConsumer({
        "bootstrap.servers": bootstrap, "group.id": service.group, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([service.input])
    try:
        batch = consume(consumer, BATCH)
        with pytest.raises(OutboxDeliveryError) as caught, zombie.transaction(consumer):
            for message in batch:
                zombie.emit(decide(message))
            OutboxEmitter(bootstrap, transactional_id=service.transactional_id, topic=service.outbox).close()
        assert caught.value.fatal
    finally:
        consumer.close()
    assert service.requests_per_input() == Counter()
