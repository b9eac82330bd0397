"""The outbox sink on the real worker and broker, against the reference receiver.

Every assertion is on what the receiver applied, what a read_committed consumer sees on the
receipts and DLQ topics, and what Connect reports — never on what our code believes it did.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from demo.receiver import ReferenceReceiver
from stack.kit.topic_io import create_topic, read_all, unique
from tests.outbox_sink.conftest import SinkFactory, make_request, read_dead_letters

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

FAST_RETRIES = {"backoff_initial_ms": 200, "backoff_max_ms": 2_000, "retry_max_duration_ms": 120_000}
WAIT = 120.0


def test_each_request_is_applied_once_with_its_own_key_and_receipted(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    requests = [make_request(i, f"pay-{i % 5}") for i in range(25)]
    requests += [make_request(100 + i, f"order-{i}", target="notifications-api", prefix="notify") for i in range(5)]
    sink.emit(requests)

    receipts = sink.receipts().wait_for([r.decision_id for r in requests], WAIT)

    assert len(receipts) == len(requests)
    applied = {a.idempotency_key: a for a in receiver.applied()}
    assert sorted(applied) == sorted(r.idempotency_key for r in requests)
    for request in requests:
        a = applied[request.idempotency_key]
        alias_base = "/payments" if request.target == "payments-api" else "/notifications"
        assert a.path == alias_base + request.path
        assert a.method == ("POST" if request.target == "payments-api" else "PUT")
        assert a.body == request.body
        # An RFC 8941 sf-string, as the IETF Idempotency-Key draft writes it (outbox.idempotency.key.format).
        assert a.headers["idempotency-key"] == f'"{request.idempotency_key}"'
        assert a.headers["x-ikkai-decision-id"] == request.decision_id
        assert a.headers["x-ikkai-effect"] == request.effect_name
        assert a.headers["content-type"] == "application/json"
        assert a.headers["x-ikkai-model-version"] == request.model_version
        receipt = receipts[request.decision_id]
        assert (receipt.outcome, receipt.status_code, receipt.key, receipt.target) == (
            "DELIVERED", 201, request.key, request.target,
        )  # fmt: skip
        assert (receipt.effect, receipt.idempotency_key) == (request.effect_name, request.idempotency_key)
        assert (
            receipt.response_digest == hashlib.sha256(_stored_response(receiver, request.idempotency_key)).hexdigest()
        )
        assert receipt.attempts == 1 and receipt.first_attempt_at <= receipt.last_attempt_at
    # Order per key: a key's requests were applied in the order they were emitted.
    seq_by_key: dict[str, list[int]] = defaultdict(list)
    for request in requests:
        seq_by_key[request.key].append(applied[request.idempotency_key].seq)
    assert all(seqs == sorted(seqs) for seqs in seq_by_key.values())
    assert read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1, timeout=3) == []


def _stored_response(receiver: ReferenceReceiver, key: str) -> bytes:
    applied = next(a for a in receiver.applied() if a.idempotency_key == key)
    return json.dumps({"applied": True, "idempotency_key": key, "path": applied.path}, sort_keys=True).encode()


def test_an_api_down_for_ten_seconds_delays_delivery_but_loses_nothing(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    receiver.faults(unavailable_s=10)
    requests = [make_request(i, f"pay-{i % 4}") for i in range(12)]
    sink.emit(requests)

    receipts = sink.receipts().wait_for([r.decision_id for r in requests], WAIT)

    assert {d: r.outcome for d, r in receipts.items()} == {r.decision_id: "DELIVERED" for r in requests}
    assert any(d.status == 503 for d in receiver.deliveries()), "the outage was never hit; the test proves nothing"
    assert any(r.attempts > 1 for r in receipts.values())
    assert sorted(a.idempotency_key for a in receiver.applied()) == sorted(r.idempotency_key for r in requests)
    assert read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1, timeout=3) == []
    assert sink.task_states() == ["RUNNING"]


def test_retry_after_is_honoured(outbox_sink: SinkFactory, receiver: ReferenceReceiver) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    receiver.faults(throttle_requests=1, retry_after_s=3)
    request = make_request(0, "pay-throttled")
    sink.emit([request])

    receipt = sink.receipts().wait_for([request.decision_id], WAIT)[request.decision_id]

    assert (receipt.outcome, receipt.attempts) == ("DELIVERED", 2)
    tries = [d for d in receiver.deliveries() if d.idempotency_key == request.idempotency_key]
    assert [d.status for d in tries] == [429, 201]
    # The second attempt came no sooner than the receiver asked (the backoff alone would be < 0.2 s).
    assert tries[1].received_at - tries[0].received_at >= 3.0
    assert [d.attempt for d in tries] == ["1", "2"]


def test_a_rejected_request_is_dead_lettered_with_reasons_and_the_rest_delivered(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    requests = [make_request(i, "pay-same-key") for i in range(5)]
    bad = requests[2]
    receiver.faults(reject_keys=[bad.idempotency_key])
    sink.emit(requests)

    receipts = sink.receipts().wait_for([r.decision_id for r in requests], WAIT)

    assert receipts[bad.decision_id].outcome == "DEAD_LETTERED"
    assert receipts[bad.decision_id].status_code == 400
    assert receipts[bad.decision_id].attempts == 1
    assert all(receipts[r.decision_id].outcome == "DELIVERED" for r in requests if r is not bad)
    assert sorted(a.idempotency_key for a in receiver.applied()) == sorted(
        r.idempotency_key for r in requests if r is not bad
    )
    [dead] = read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1)
    assert dead.key == b"pay-same-key"
    assert dead.value is not None and dead.value[:2] == b"\xc3\x01"  # the original bytes, replayable
    assert dead.headers["ikkai.dlq.error_class"] == "rejected-by-target"
    assert dead.headers["ikkai.dlq.status_code"] == "400"
    assert "amount must be positive" in dead.headers["ikkai.dlq.response_excerpt"]
    assert "returned 400" in dead.headers["ikkai.dlq.reason"]
    assert dead.headers["ikkai.dlq.decision_id"] == bad.decision_id
    assert dead.headers["__connect.errors.topic"] == sink.requests_topic
    assert sink.task_states() == ["RUNNING"]


class ServiceCrashed(Exception):
    pass


def test_an_aborted_transaction_is_never_delivered(outbox_sink: SinkFactory, receiver: ReferenceReceiver) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    cluster = sink.cluster
    committed_before, aborted, committed_after = (make_request(i, "pay-txn") for i in range(3))
    own_topic = create_topic(cluster, unique("decisions.test"))
    emitter = sink.emitter(transactional_id=unique("test.outbox.emitter"))
    with emitter.transaction():
        emitter.emit(committed_before)
        emitter.produce(own_topic, b"pay-txn", b"decision-0")
    with pytest.raises(ServiceCrashed), emitter.transaction():
        emitter.emit(aborted)
        emitter.produce(own_topic, b"pay-txn", b"decision-1")
        emitter.flush()  # the records reach the log; only the abort marker follows
        raise ServiceCrashed
    with emitter.transaction():
        emitter.emit(committed_after)
        emitter.produce(own_topic, b"pay-txn", b"decision-2")
    emitter.close()

    # Same key, same partition: once the later request is receipted, the sink has read past the aborted one.
    receipts = sink.receipts().wait_for([committed_before.decision_id, committed_after.decision_id], WAIT)

    assert set(receipts) == {committed_before.decision_id, committed_after.decision_id}
    assert aborted.idempotency_key not in {d.idempotency_key for d in receiver.deliveries()}
    assert aborted.idempotency_key not in {a.idempotency_key for a in receiver.applied()}
    assert [v for _, v in read_all(cluster, own_topic)] == [b"decision-0", b"decision-2"]
    # The aborted request was in the log all along: only read_committed kept it from the sink.
    uncommitted = read_all(cluster, sink.requests_topic, isolation="read_uncommitted")
    assert len(uncommitted) == 3


def test_an_unknown_target_alias_is_dead_lettered_without_any_request(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    rogue = make_request(0, "pay-rogue", target="attacker-api")
    after = make_request(1, "pay-rogue")
    sink.emit([rogue, after])

    receipts = sink.receipts().wait_for([rogue.decision_id, after.decision_id], WAIT)

    assert receipts[rogue.decision_id].outcome == "DEAD_LETTERED"
    assert receipts[rogue.decision_id].attempts == 0
    assert receipts[rogue.decision_id].status_code is None
    assert "unknown-target" in (receipts[rogue.decision_id].reason or "")
    assert receipts[after.decision_id].outcome == "DELIVERED"
    assert rogue.idempotency_key not in {d.idempotency_key for d in receiver.deliveries()}
    [dead] = read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1)
    assert dead.headers["ikkai.dlq.error_class"] == "unknown-target"
    assert "attacker-api" in dead.headers["ikkai.dlq.reason"]
    assert sink.task_states() == ["RUNNING"]


def test_a_request_failing_past_the_retry_budget_is_dead_lettered(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(backoff_initial_ms=200, backoff_max_ms=1_000, retry_max_duration_ms=3_000)
    receiver.faults(unavailable_s=3600)
    request = make_request(0, "pay-never")
    sink.emit([request])

    receipt = sink.receipts().wait_for([request.decision_id], WAIT)[request.decision_id]

    assert receipt.outcome == "DEAD_LETTERED"
    assert receipt.status_code == 503
    assert receipt.attempts > 1
    assert receipt.reason is not None and receipt.reason.startswith("retries-exhausted")
    assert receiver.applied() == []
    [dead] = read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1)
    assert dead.headers["ikkai.dlq.error_class"] == "retries-exhausted"
    assert sink.task_states() == ["RUNNING"]


def test_a_timed_out_request_the_api_did_apply_is_retried_with_the_same_key_and_applied_once(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(**FAST_RETRIES, http_request_timeout_ms=300)
    receiver.faults(delay_s=1.0)  # the API applies the request, but answers after the sink gave up waiting
    request = make_request(0, "pay-slow")
    sink.emit([request])
    deadline = time.monotonic() + WAIT
    while not receiver.applied() and time.monotonic() < deadline:
        time.sleep(0.1)
    receiver.reset_faults()

    receipt = sink.receipts().wait_for([request.decision_id], WAIT)[request.decision_id]

    assert (receipt.outcome, receipt.status_code) == ("DELIVERED", 201)
    assert receipt.attempts >= 2
    tries = [d for d in receiver.deliveries() if d.idempotency_key == request.idempotency_key]
    assert len(tries) >= 2 and tries[-1].replayed, "the retry must be answered from the stored first application"
    assert [a.idempotency_key for a in receiver.applied()] == [request.idempotency_key]


def test_a_value_that_is_not_an_outbox_request_is_dead_lettered_and_the_key_goes_on(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    producer = Producer({"bootstrap.servers": sink.endpoints.bootstrap_servers, "enable.idempotence": True})
    producer.produce(sink.requests_topic, key=b"pay-junk", value=b'{"not": "avro"}')
    producer.flush(30)
    after = make_request(0, "pay-junk")
    sink.emit([after])

    receipts = sink.receipts().wait_for([after.decision_id], WAIT)

    assert receipts[after.decision_id].outcome == "DELIVERED"
    [dead] = read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1)
    assert (dead.key, dead.value) == (b"pay-junk", b'{"not": "avro"}')
    assert dead.headers["ikkai.dlq.error_class"] == "undecodable"
    assert sink.task_states() == ["RUNNING"]


def test_one_decision_with_two_side_effects_gets_both_applied_and_two_receipts(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    # The receiver keeps ONE key space across paths, as a gateway does: two effects of one
    # decision that shared an Idempotency-Key would show up as one applied and one replayed.
    sink = outbox_sink(**FAST_RETRIES)
    hold = make_request(0, "pay-held")
    notify = replace(hold, target="notifications-api", path="/notify/pay-held")  # same decision, same key
    sink.emit([hold, notify])

    receipts = sink.receipts().wait_for_targets(
        [(hold.decision_id, "payments-api"), (hold.decision_id, "notifications-api")], WAIT
    )

    assert {target: r.outcome for (_, target), r in receipts.items()} == {
        "payments-api": "DELIVERED", "notifications-api": "DELIVERED",
    }  # fmt: skip
    assert not any(d.replayed for d in receiver.deliveries()), "one effect was answered with the other's response"
    applied = receiver.applied()
    assert sorted(a.path for a in applied) == ["/notifications/notify/pay-held", "/payments" + hold.path]
    assert len({a.idempotency_key for a in applied}) == 2


def test_an_explicit_effect_and_a_default_effect_of_one_name_are_two_effects_to_the_reader(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    # Issue 44 case 6: the explicit effect "payments-api/holds/<id>" and the default effect of target
    # payments-api, path /holds/<id> (same decision) share a name; their keys differ (v2) and the API
    # applies both. The reader must report two effects, both DELIVERED, not one and a repeat.
    sink = outbox_sink(**FAST_RETRIES)
    by_default = make_request(0, "pay-named")
    explicit = replace(by_default, path="/explicit/pay-named", effect=by_default.target + by_default.path)
    assert explicit.effect_name == by_default.effect_name and explicit.idempotency_key != by_default.idempotency_key
    sink.emit([by_default, explicit])
    reader = sink.receipts()

    deadline = time.monotonic() + WAIT
    while reader.duplicates + len(reader.seen) + reader.corrected < 2:  # two receipts read, whatever it believes
        assert time.monotonic() < deadline, "fewer than two receipts arrived"
        reader.poll(0.5)

    assert sorted(a.idempotency_key for a in receiver.applied()) == sorted(
        r.idempotency_key for r in (by_default, explicit)
    )
    assert reader.duplicates == 0, "two effects read as one and a repeat"
    effects = {ref: r for ref, r in reader.seen.items() if ref.decision_id == by_default.decision_id}
    assert {(ref.kind, ref.name) for ref in effects} == {
        ("DEFAULT", by_default.effect_name), ("EXPLICIT", explicit.effect_name),
    }  # fmt: skip
    assert {r.idempotency_key: r.outcome for r in effects.values()} == {
        by_default.idempotency_key: "DELIVERED", explicit.idempotency_key: "DELIVERED",
    }  # fmt: skip


def test_tracing_headers_reach_the_api(outbox_sink: SinkFactory, receiver: ReferenceReceiver) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    traced = make_request(0, "pay-traced")
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with sink.emitter() as emitter:
        emitter.emit(traced, headers={"traceparent": traceparent})

    sink.receipts().wait_for([traced.decision_id], WAIT)

    [applied] = receiver.applied()
    assert applied.headers["traceparent"] == traceparent  # from the Kafka record's headers
    assert applied.headers["x-ikkai-decision-id"] == traced.decision_id
    assert applied.headers["x-ikkai-source"].startswith(sink.requests_topic + "/")
    assert applied.headers["x-ikkai-attempt"] == "1"
