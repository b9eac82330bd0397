"""kill -9 of the Connect worker mid-delivery: nothing is lost and every side effect is applied once.

Uses a stack of its own (a temporary home), never the session's shared one: killing that
worker would break every other test running on it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.receiver import ReferenceReceiver
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from outbox_sink import ReceiptReader
from stack.local_stack import CONNECT, LocalStack
from stack.prerequisites import check_java
from tests.conftest import connectors_removed
from tests.connect_helpers import wait_running
from tests.outbox_sink.conftest import deploy_sink, make_request

pytestmark = pytest.mark.integration

REQUESTS = 400
JMX_PROBE = Path(__file__).with_name("JmxProbe.java")


def sink_metrics(local: LocalStack, connector: str) -> dict[str, float]:
    """The sink task's plugin metrics (KIP-877), read from the worker's MBeans via the JDK attach API."""
    [pid] = next(c.pids for c in local.status().components if c.name == CONNECT)
    result = subprocess.run(
        [str(check_java().executable), str(JMX_PROBE), str(pid), f"kafka.connect:type=plugins,connector={connector},*"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    metrics: dict[str, float] = {}
    for line in result.stdout.splitlines():
        _, attribute, value = line.split("\t")
        metrics[attribute] = metrics.get(attribute, 0.0) + float(value)  # summed over the connector's tasks
    return metrics


@pytest.fixture
def own_stack(killable_stack: tuple[LocalStack, Endpoints]) -> Iterator[tuple[LocalStack, Endpoints]]:
    """The session's stack for tests that kill its components; its connectors are removed afterwards."""
    try:
        yield killable_stack
    finally:
        connectors_removed(killable_stack[1].connect_url)


def test_a_worker_killed_mid_flight_loses_nothing_and_applies_each_once(
    own_stack: tuple[LocalStack, Endpoints], receiver: ReferenceReceiver
) -> None:
    local, endpoints = own_stack
    sink = deploy_sink(
        endpoints,
        receiver,
        backoff_initial_ms=200,
        backoff_max_ms=2_000,
        # A killed consumer's group membership must lapse before the restarted task gets its partitions.
        sets=["consumer.session_timeout_ms=10000", "consumer.heartbeat_interval_ms=2000"],
    )
    receiver.faults(delay_s=0.1)  # slow enough (8 in flight: ~80 a second) that the kill lands mid-flight
    requests = [make_request(i, f"pay-{i % 20}") for i in range(REQUESTS)]
    sink.emit(requests)

    deadline = time.monotonic() + 120
    while len(receiver.applied()) < REQUESTS // 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    local.kill(CONNECT)
    applied_at_kill = len(receiver.applied())
    assert REQUESTS // 5 <= applied_at_kill < REQUESTS, "the kill did not land mid-flight; the test proves nothing"
    receiver.reset_faults()
    local.start(CONNECT)
    wait_running(sink.client, sink.name, timeout=120)

    with ReceiptReader(KafkaContext.recorded(endpoints), topic=sink.receipts_topic) as reader:
        receipts = reader.wait_for([r.decision_id for r in requests], 240)
        duplicates = reader.duplicates

    assert len(receipts) == REQUESTS, f"{REQUESTS - len(receipts)} requests have no receipt"
    assert {r.outcome for r in receipts.values()} == {"DELIVERED"}
    applied = receiver.applied()
    assert sorted(a.idempotency_key for a in applied) == sorted(r.idempotency_key for r in requests)
    # Every request, however often it was sent, carried one and the same Idempotency-Key.
    keys_by_path: dict[str, set[str | None]] = defaultdict(set)
    for delivery in receiver.deliveries():
        keys_by_path[delivery.path].add(delivery.idempotency_key)
    assert all(len(keys) == 1 for keys in keys_by_path.values())
    # The restarted task's metrics, read over JMX from the real worker process.
    metrics = sink_metrics(local, sink.name)
    assert metrics["delivered-total"] >= REQUESTS - applied_at_kill
    assert metrics["dead-lettered-total"] == 0
    assert metrics["request-latency-avg-ms"] > 0
    replayed = sum(d.replayed for d in receiver.deliveries())
    sys.stderr.write(
        f"\nworker crash: {applied_at_kill} of {REQUESTS} applied at the kill; {replayed} redelivered request(s) "
        f"answered from the receiver's stored response; {duplicates} repeated receipt(s)\n"
    )
