"""The reference receiver: applies each Idempotency-Key once, persists it, and fails on request."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from demo.receiver import ReferenceReceiver


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[ReferenceReceiver]:
    with ReferenceReceiver(tmp_path / "receiver.sqlite") as r:
        yield r


def post(receiver: ReferenceReceiver, key: str | None, path: str = "/payments/holds/1") -> requests.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return requests.post(receiver.url + path, data=b'{"amount": 5}', headers=headers, timeout=10)


def test_a_key_is_applied_once_and_repeats_get_the_stored_answer(receiver: ReferenceReceiver) -> None:
    first = post(receiver, "d-1")
    again = post(receiver, "d-1")
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    assert [a.idempotency_key for a in receiver.applied()] == ["d-1"]
    assert [d.replayed for d in receiver.deliveries()] == [False, True]


def test_a_key_sent_as_a_structured_field_string_is_the_same_key_as_its_token(receiver: ReferenceReceiver) -> None:
    # The outbox sink sends the IETF draft's form, "<hex>"; a client may send the bare token.
    assert post(receiver, '"d-1"').status_code == 201
    assert post(receiver, "d-1").status_code == 201
    assert post(receiver, '"d-\\"2"').status_code == 201
    assert [a.idempotency_key for a in receiver.applied()] == ["d-1", 'd-"2']
    assert [d.replayed for d in receiver.deliveries()] == [False, True, False]


def test_applied_keys_survive_a_restart(tmp_path: Path) -> None:
    with ReferenceReceiver(tmp_path / "r.sqlite") as r:
        post(r, "d-1")
    with ReferenceReceiver(tmp_path / "r.sqlite") as r:
        assert post(r, "d-1").status_code == 201
        assert len(r.applied()) == 1
        assert r.deliveries()[0].replayed


def test_a_request_without_idempotency_key_is_refused(receiver: ReferenceReceiver) -> None:
    assert post(receiver, None).status_code == 400
    assert receiver.applied() == []


def test_faults_unavailable_throttled_rejected(receiver: ReferenceReceiver) -> None:
    receiver.faults(unavailable_s=3600)
    assert post(receiver, "d-1").status_code == 503
    receiver.faults(unavailable_s=0, throttle_requests=1, retry_after_s=7)
    throttled = post(receiver, "d-1")
    assert throttled.status_code == 429 and throttled.headers["Retry-After"] == "7"
    receiver.faults(reject_keys=["d-1"])
    rejected = post(receiver, "d-1")
    assert rejected.status_code == 400 and "amount must be positive" in rejected.text
    receiver.reset_faults()
    assert post(receiver, "d-1").status_code == 201
    assert [d.status for d in receiver.deliveries()] == [503, 429, 400, 201]
    assert len(receiver.applied()) == 1


def test_faults_can_be_set_over_http(receiver: ReferenceReceiver) -> None:
    control = requests.post(receiver.url + "/_ikkai/faults", json={"reject_keys": ["d-9"]}, timeout=10)
    assert control.status_code == 204
    assert post(receiver, "d-9").status_code == 400
    applied = requests.get(receiver.url + "/_ikkai/applied", timeout=10).json()
    assert applied == []
    assert post(receiver, "d-8").status_code == 201
    assert [
        a["idempotency_key"] for a in json.loads(requests.get(receiver.url + "/_ikkai/applied", timeout=10).text)
    ] == ["d-8"]


def test_one_key_space_across_paths_as_a_gateway_keeps_it(receiver: ReferenceReceiver) -> None:
    # A key reused on another path is a repeat: the second path gets the first's stored answer.
    first = post(receiver, "d-1", "/payments/holds/1")
    other = post(receiver, "d-1", "/notifications/n/1")
    assert first.status_code == other.status_code == 201 and other.content == first.content
    assert [(a.api, a.idempotency_key) for a in receiver.applied()] == [("payments", "d-1")]
    assert [d.replayed for d in receiver.deliveries()] == [False, True]


def test_a_repeat_while_the_first_is_in_progress_gets_409(receiver: ReferenceReceiver) -> None:
    receiver.faults(delay_s=1.5)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(post, receiver, "d-1")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "d-1" not in receiver._in_progress:
            time.sleep(0.01)
        concurrent = post(receiver, "d-1")
        assert slow.result().status_code == 201
    assert concurrent.status_code == 409 and "still being processed" in concurrent.text
    assert post(receiver, "d-1").status_code == 201  # done now: the stored answer, at once
    assert [d.status for d in receiver.deliveries()] == [409, 201, 201]
    assert len(receiver.applied()) == 1


def test_retry_after_can_be_any_string(receiver: ReferenceReceiver) -> None:
    receiver.faults(throttle_requests=1, retry_after="9000000000000000000")
    assert post(receiver, "d-1").headers["Retry-After"] == "9000000000000000000"
