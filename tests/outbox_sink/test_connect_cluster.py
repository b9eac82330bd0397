"""Faults only a Connect cluster has, on a group of two workers: the outbox sink's partitions move mid-flight.

- kill -9 of the worker that runs the sink's task while its requests are in flight: the task moves to the other
  worker, which sends the same Idempotency-Keys again and is answered 409 while the first attempts still run;
- a third worker joining mid-delivery (a rebalance with no failure): a task moves to it, nothing is lost.

Requests are really in flight at the fault because the receiver holds every new key's first attempt at a gate
(``GatedReceiver``) until the test opens it; a repeat of a held key meanwhile gets the reference receiver's 409.
Each request is checked where it counts: the effects applied at the receiver, once per key, and the receipts a
read_committed reader finds on the receipts topic, one final receipt per request: after the kill each written once
(the dead worker never got an answer, so it wrote none); after the join a request may have consistent repeats
(receipts are at least once). One stack of its own for the module (a temporary home, never the session's: its
workers are killed and added here); the tests run in file order; the join leaves the group one worker larger.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from demo.receiver import ReferenceReceiver
from deploy.connect_rest import ConnectClient
from ikkai.settings import Endpoints, jars_dir
from outbox_sink import OutboxRequest, ReceiptReader
from outbox_sink.receipts import decode_receipt
from stack.kit.topic_io import read_all
from stack.local_stack import LocalStack
from stack.shape import StackOptions
from tests.connect_helpers import wait_running
from tests.outbox_sink.conftest import DeployedSink, deploy_sink, make_request

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

REQUESTS = 30
IN_FLIGHT = 6  # first attempts held at the receiver before the fault: the fault lands with these in flight
GATE_LIMIT_S = 300  # a held attempt goes on by itself after this, so a failed test never hangs the receiver
SINK_SETTINGS = {
    "backoff_initial_ms": 200,
    "backoff_max_ms": 1_000,
    "http_request_timeout_ms": 120_000,  # a held first attempt never times out at the sink: only the fault ends it
}
# A killed task's consumer leaves its group after this, and only then does its partition get a new owner.
SINK_SETS = ["consumer.session_timeout_ms=10000", "consumer.heartbeat_interval_ms=2000"]


class GatedReceiver(ReferenceReceiver):
    """The reference receiver, with a gate: while it is closed, each new key's first attempt waits before it is
    applied, "in progress" (a repeat of the key meanwhile is answered 409), and its key is counted in ``held``."""

    def __init__(self, db_path: Path) -> None:
        super().__init__(db_path)
        self._gate = threading.Event()
        self._arrivals = threading.Condition()
        self.held: set[str] = set()  # keys whose first attempt arrived while the gate was closed

    def open_gate(self) -> None:
        self._gate.set()

    def wait_held(self, count: int, timeout_s: float) -> set[str]:
        """The keys held so far, once there are ``count`` of them (or ``timeout_s`` has passed)."""
        with self._arrivals:
            self._arrivals.wait_for(lambda: len(self.held) >= count, timeout_s)
            return set(self.held)

    def _apply(
        self, method: str, path: str, headers: dict[str, str], body: bytes, key: str
    ) -> tuple[int, dict[str, str], bytes, bool]:
        if not self._gate.is_set():
            with self._arrivals:
                self.held.add(key)
                self._arrivals.notify_all()
            self._gate.wait(GATE_LIMIT_S)
        return super()._apply(method, path, headers, body, key)

    def conflicts_since(self, since: float) -> set[str]:
        """Keys answered 409 (their first attempt still in progress) to requests that arrived after ``since``."""
        return {d.idempotency_key for d in self.deliveries() if d.status == 409 and d.received_at > since
                and d.idempotency_key is not None}  # fmt: skip


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack of one broker and a Connect group of two workers, for this module alone."""
    local = LocalStack(tmp_path_factory.mktemp("connect-group"), jars_dir(), StackOptions(connect_workers=2))
    try:
        local.up()
        yield local
    finally:
        local.down()


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[GatedReceiver]:
    with GatedReceiver(tmp_path / "receiver.sqlite") as r:
        try:
            yield r
        finally:
            r.open_gate()  # held attempts finish before the server stops


def endpoints_of(group: LocalStack) -> Endpoints:
    endpoints = group.endpoints()
    assert endpoints is not None
    return endpoints


def task_workers(group: LocalStack, client: ConnectClient, name: str) -> list[str]:
    """The component (``connect``, ``connect-<i>``) each RUNNING task of ``name`` runs on, by the group's status."""
    urls = group.connect_urls()
    tasks: list[dict[str, str]] = client.connector_status(name)["tasks"]
    return [group.connect_workers[urls.index(f"http://{t['worker_id']}")] for t in tasks if t["state"] == "RUNNING"]


def wait_until(condition: Callable[[], object], what: str, timeout_s: float) -> float:
    """Poll ``condition()`` until it holds; the seconds it took. Fails the test with ``what`` after ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"{what}: not after {timeout_s:.0f}s"
        time.sleep(0.2)
    return time.monotonic() - started


def check_each_applied_once_with_one_receipt(
    sink: DeployedSink, requests: list[OutboxRequest], *, written_once: bool
) -> int:
    """Every request applied once at the receiver and one final receipt each, DELIVERED, as a read_committed reader
    finds them on the receipts topic; the receipts written. ``written_once``: each receipt was also written only
    once. Otherwise a request may have repeats (a partition moved after its answer, before its offset commit:
    receipts are at least once, docs/outbox.md), and every repeat must say the same: DELIVERED, the same key."""
    with ReceiptReader(sink.cluster, topic=sink.receipts_topic) as reader:
        receipts = reader.wait_for([r.decision_id for r in requests], 180)
    assert len(receipts) == len(requests), f"{len(requests) - len(receipts)} requests have no receipt"
    assert {r.outcome for r in receipts.values()} == {"DELIVERED"}
    applied = Counter(a.idempotency_key for a in sink.receiver.applied())
    assert applied == Counter(r.idempotency_key for r in requests), "an effect applied twice, or never"
    written = [decode_receipt(value) for _, value in read_all(sink.cluster, sink.receipts_topic)
               if value is not None]  # fmt: skip
    per_request = Counter(r.decision_id for r in written)
    assert set(per_request) == {r.decision_id for r in requests}
    if written_once:
        assert set(per_request.values()) == {1}, "a request has more than one receipt"
    key_of = {r.decision_id: r.idempotency_key for r in requests}
    assert all(r.outcome == "DELIVERED" and r.idempotency_key == key_of[r.decision_id] for r in written)
    return len(written)


def test_a_killed_workers_task_moves_and_its_new_owner_resends_the_same_keys(
    group: LocalStack, receiver: GatedReceiver
) -> None:
    endpoints = endpoints_of(group)
    sink = deploy_sink(endpoints, receiver, tasks_max=1, sets=SINK_SETS, **SINK_SETTINGS)
    wait_running(sink.client, sink.name)
    [victim] = task_workers(group, sink.client, sink.name)
    [survivor] = [w for w in group.connect_workers if w != victim]
    survivor_client = ConnectClient(group.connect_urls()[group.connect_workers.index(survivor)])
    requests = [make_request(i, f"pay-{i}") for i in range(REQUESTS)]
    sink.emit(requests)
    assert len(receiver.wait_held(IN_FLIGHT, 120)) >= IN_FLIGHT, "the sink never had requests in flight"
    try:
        killed_at, killed_mono = time.time(), time.monotonic()
        group.kill(victim)
        in_flight = receiver.wait_held(0, 0)  # the dead worker's first attempts, still running at the receiver
        moved_s = wait_until(
            lambda: task_workers(group, survivor_client, sink.name) == [survivor], "the task never moved", 120
        )
        # The new owner sends the held requests again with the same keys, and hears that they are in progress.
        wait_until(lambda: in_flight <= receiver.conflicts_since(killed_at), "the new owner sent other keys", 60)
        resent_s = time.monotonic() - killed_mono
        receiver.open_gate()
        # The dead worker never got an answer, so it wrote no receipt: one each, written once.
        receipts = check_each_applied_once_with_one_receipt(sink, requests, written_once=True)
        # Each held key: its first attempt applied it; the new owner's repeat got the stored response.
        replayed = {d.idempotency_key for d in receiver.deliveries() if d.replayed}
        assert in_flight <= replayed
    finally:
        receiver.open_gate()
        group.start(victim)
        survivor_client.delete_connector(sink.name)
    sys.stderr.write(
        f"\nconnect worker kill: {len(in_flight)} request(s) in flight on {victim}; task RUNNING on {survivor} "
        f"{moved_s:.1f}s after the kill, every in-flight key resent (409) by {resent_s:.1f}s; {receipts} receipts\n"
    )


def test_a_worker_joining_mid_delivery_loses_nothing_and_applies_each_once(
    group: LocalStack, receiver: GatedReceiver
) -> None:
    endpoints = endpoints_of(group)
    sink = deploy_sink(endpoints, receiver, tasks_max=3, sets=SINK_SETS, **SINK_SETTINGS)
    wait_running(sink.client, sink.name)
    requests = [make_request(i, f"pay-{i}") for i in range(REQUESTS)]
    sink.emit(requests)
    assert len(receiver.wait_held(IN_FLIGHT, 120)) >= IN_FLIGHT, "the sink never had requests in flight"
    try:
        joined_at, joined_mono = time.time(), time.monotonic()
        joined = group.add_connect_worker()
        in_flight = receiver.wait_held(0, 0)
        moved_s = wait_until(lambda: joined in task_workers(group, sink.client, sink.name),
                             f"no task moved to {joined}", 120)  # fmt: skip
        # The moved partitions' next owner sends their held requests again: same keys, answered 409.
        wait_until(lambda: in_flight & receiver.conflicts_since(joined_at), "no in-flight request was resent", 60)
        resent = in_flight & receiver.conflicts_since(joined_at)
        resent_s = time.monotonic() - joined_mono
        receiver.open_gate()
        receipts = check_each_applied_once_with_one_receipt(sink, requests, written_once=False)
        wait_running(sink.client, sink.name)
    finally:
        receiver.open_gate()
        sink.client.delete_connector(sink.name)
    sys.stderr.write(
        f"\nconnect worker join: {len(in_flight)} request(s) in flight; a task RUNNING on {joined} {moved_s:.1f}s "
        f"after it was ready, {len(resent)} in-flight key(s) resent (409) {resent_s:.1f}s after its start; "
        f"{receipts} receipts\n"
    )
