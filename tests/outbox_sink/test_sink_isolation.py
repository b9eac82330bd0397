"""A target that stalls holds back only its own partition; the other partitions keep delivering, on the real worker.

The stalling target is the scripted server (``hostile_server.py``): every attempt is applied and
then answered with not one byte, not even a status line, until the test heals it: no status, so
each attempt is cut at its deadline and retried (a 2xx whose *body* stalls is DELIVERED at the
deadline instead: the status says the effect was applied, issue 44; test_hostile_matrix pins it).
Its requests — more keys than the task has in-flight slots (``MAX_IN_FLIGHT``) — are
written to partition 0 of the requests topic; the healthy target's (the reference receiver's)
to partitions 1 and 2 (explicit partitions). One task owns all three (``tasks.max=1``).

The bound: each healthy request is receipted DELIVERED within ``HEALTHY_BOUND_S`` of being
written (measured up to the moment the test reads its receipt), while no stalled request has an
outcome yet (their retry budget is far longer). A stall lasts for ever, so a sink that lets it
hold the slots the healthy target needs misses the bound by an unbounded amount, not by a
little. Then the target heals: every stalled request is delivered — it was applied on its first
attempt, so the retries got the stored answer and the server applied each exactly once — and the
request queued behind one of them on its key follows it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from demo.receiver import ReferenceReceiver
from ikkai.contract.codec import default_codec
from ikkai.contract.outbox import REQUEST_SCHEMA
from outbox_sink import OutboxRequest
from tests.outbox_sink.conftest import DeployedSink, SinkFactory, make_request
from tests.outbox_sink.hostile_behaviours import ALWAYS, Behaviour, script_path
from tests.outbox_sink.hostile_server import HostileServer

pytestmark = pytest.mark.integration

STALL = "stall-api"
MAX_IN_FLIGHT = 8
STALLED_KEYS = MAX_IN_FLIGHT + 4  # more than every slot
# A deadline per attempt, and a retry budget far longer than the test: while the healthy requests
# must be delivered, the stalled ones are still being retried (none may be final yet).
SETTINGS = {
    "max_in_flight_requests": MAX_IN_FLIGHT, "http_request_timeout_ms": 2_000,
    "backoff_initial_ms": 200, "backoff_max_ms": 1_000, "retry_max_duration_ms": 600_000,
}  # fmt: skip
HEALTHY_BOUND_S = 15.0
WAIT = 120.0


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


def stalled_request(i: int) -> OutboxRequest:
    request = make_request(i, f"acct-{i}", target=STALL)
    return replace(request, path=script_path(Behaviour.STALL_HEAD, f"n{i}", times=ALWAYS))


def test_a_target_that_stalls_its_answers_holds_back_only_its_own_partition(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver, hostile_server: HostileServer
) -> None:
    sink = outbox_sink(**SETTINGS, sets=[f"targets.{STALL}.url={hostile_server.url}"])
    stalled = [stalled_request(i) for i in range(STALLED_KEYS)]
    # Same key as the first stalled request, healthy target, same partition: per-key order keeps it waiting.
    behind = make_request(100, "acct-0", prefix="behind")
    emit_to(sink, 0, [*stalled, behind])
    wait_until(
        lambda: len(hostile_server.attempts()) >= MAX_IN_FLIGHT, WAIT, "the stalling target to be sent every slot"
    )

    healthy = [make_request(200 + i, f"pay-{i}") for i in range(10)]
    written_at = time.time()
    emit_to(sink, 1, healthy[:5])
    emit_to(sink, 2, healthy[5:])
    receipts = sink.receipts()
    arrived: dict[str, float] = {}
    deadline = time.monotonic() + WAIT
    while len(arrived) < len(healthy) and time.monotonic() < deadline:
        for receipt in receipts.poll(0.2):
            arrived.setdefault(receipt.decision_id, time.time())
    got = receipts.wait_for([r.decision_id for r in healthy], 0)

    assert {d: r.outcome for d, r in got.items()} == {r.decision_id: "DELIVERED" for r in healthy}, (
        f"requests on partitions 1 and 2 were held back by the stalled target on partition 0 "
        f"({hostile_server.open_stalls} answers stalled); task {sink.task_states()}"
    )
    latency = {r.decision_id[:8]: round(arrived[r.decision_id] - written_at, 1) for r in healthy}
    assert max(latency.values()) <= HEALTHY_BOUND_S, f"healthy deliveries past {HEALTHY_BOUND_S} s: {latency}"
    assert receipts.wait_for([r.decision_id for r in [*stalled, behind]], 0) == {}, "the stalled target never answered"
    assert behind.idempotency_key not in {a.idempotency_key for a in receiver.applied()}, "behind overtook its key"
    assert sink.task_states() == ["RUNNING"]

    # The target heals: every stalled request is delivered, applied once, and then the one behind.
    hostile_server.heal()
    late = receipts.wait_for([r.decision_id for r in [*stalled, behind]], WAIT)
    assert {d: r.outcome for d, r in late.items()} == {r.decision_id: "DELIVERED" for r in [*stalled, behind]}, (
        f"after the target healed; task {sink.task_states()}"
    )
    applied = Counter(a.idempotency_key for a in hostile_server.applications())
    assert applied == Counter({r.idempotency_key: 1 for r in stalled}), "each stalled effect applied exactly once"
    stalled_before = {a.nonce for a in hostile_server.attempts() if a.hostile}  # sent before the heal
    assert stalled_before, "no request met the stall; the test proves nothing"
    cut = {f"n{i}": late[r.decision_id].attempts for i, r in enumerate(stalled) if f"n{i}" in stalled_before}
    assert all(n >= 2 for n in cut.values()), f"a stalled attempt was never cut and retried: attempts {cut}"
    assert late[behind.decision_id].first_attempt_at >= late[stalled[0].decision_id].last_attempt_at, "order per key"
    assert sink.task_states() == ["RUNNING"]
