"""A target that is down holds back its own partition, never the task's other partitions — on the real worker.

The failing target is a second reference receiver told to answer 503 for the whole test; its
requests are written to partition 0 of the requests topic, the healthy target's to partitions
1 and 2 (explicit partitions, so nothing depends on how a producer hashes keys). One task owns
all three partitions, as ``tasks.max=1`` makes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from demo.receiver import ReferenceReceiver
from ikkai.contract.codec import default_codec
from outbox_sink import OutboxRequest
from outbox_sink.contract import REQUEST_SCHEMA
from tests.outbox_sink.conftest import DeployedSink, SinkFactory, make_request

pytestmark = pytest.mark.integration

DOWN = "down-api"
# A retry budget far longer than the test waits: the down target's requests are still being
# retried when the healthy ones must be delivered (a sink that stalls every partition behind a
# failing request would deliver them only after this budget, when the failing ones are dead-lettered).
RETRIES = {"backoff_initial_ms": 200, "backoff_max_ms": 1_000, "retry_max_duration_ms": 300_000}
HEALTHY_WAIT = 30.0
WAIT = 120.0


@pytest.fixture
def down_receiver(tmp_path: Path) -> Iterator[ReferenceReceiver]:
    with ReferenceReceiver(tmp_path / "down.sqlite") as r:
        r.faults(unavailable_s=3_600)
        yield r


def emit_to(sink: DeployedSink, partition: int, requests: list[OutboxRequest]) -> None:
    """Write requests to one partition of the sink's requests topic, in order."""
    producer = Producer({"bootstrap.servers": sink.endpoints.bootstrap_servers, "enable.idempotence": True})
    codec = default_codec()
    for request in requests:
        value = codec.encode(REQUEST_SCHEMA, request.to_record())
        producer.produce(sink.requests_topic, value=value, key=request.key.encode(), partition=partition)
    assert producer.flush(30) == 0


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_target_that_is_down_holds_back_only_its_own_partition(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver, down_receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(
        **RETRIES,
        sets=[f"targets.{DOWN}.url={down_receiver.url}/down", f"targets.{DOWN}.method=POST"],
    )
    stuck = [make_request(i, f"acct-{i}", target=DOWN, prefix="down") for i in range(3)]
    # Same key as the first stuck request, healthy target, same partition: per-key order keeps it waiting.
    behind = make_request(10, "acct-0", prefix="behind")
    emit_to(sink, 0, [*stuck, behind])
    wait_until(
        lambda: sum(d.status == 503 for d in down_receiver.deliveries()) >= 2 * len(stuck),
        WAIT,
        "the down target to be tried twice per request",
    )

    healthy = [make_request(100 + i, f"pay-{i}") for i in range(10)]
    emit_to(sink, 1, healthy[:5])
    emit_to(sink, 2, healthy[5:])
    receipts = sink.receipts()
    got = receipts.wait_for([r.decision_id for r in healthy], HEALTHY_WAIT)

    assert {d: r.outcome for d, r in got.items()} == {r.decision_id: "DELIVERED" for r in healthy}, (
        f"requests on partitions 1 and 2 were held back by the down target on partition 0; task {sink.task_states()}"
    )
    assert receipts.wait_for([r.decision_id for r in [*stuck, behind]], 0) == {}, "the down target never answered 2xx"
    assert behind.idempotency_key not in {a.idempotency_key for a in receiver.applied()}, "behind overtook its key"
    tries = len(down_receiver.deliveries())
    wait_until(lambda: len(down_receiver.deliveries()) > tries, WAIT, "the down target to be retried still")
    assert sink.task_states() == ["RUNNING"]

    # The target comes back: its requests, and then the one behind them, are delivered.
    down_receiver.reset_faults()
    late = receipts.wait_for([r.decision_id for r in [*stuck, behind]], WAIT)
    assert {d: r.outcome for d, r in late.items()} == {r.decision_id: "DELIVERED" for r in [*stuck, behind]}
    assert late[behind.decision_id].first_attempt_at >= late[stuck[0].decision_id].last_attempt_at, "order per key"
    assert sink.task_states() == ["RUNNING"]
