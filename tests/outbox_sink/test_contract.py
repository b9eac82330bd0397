"""The outbox contract: requests and receipts round-trip through the schema catalog; ids are deterministic."""

from __future__ import annotations

import pytest

from outbox_sink import OutboxRequest, OutboxRequestError, Receipt, decode_receipt, derive_decision_id
from spark_jobs.serialization import default_codec


def request(**overrides: object) -> OutboxRequest:
    fields: dict[str, object] = {
        "decision_id": derive_decision_id("pay-1", "evt-1", "fraud@1"),
        "key": "pay-1",
        "target": "payments-api",
        "path": "/holds/pay-1",
        "body": b'{"amount": 12}',
        "created_at": 1_700_000_000_000,
    }
    fields.update(overrides)
    return OutboxRequest(**fields)  # type: ignore[arg-type]


def test_decision_ids_are_derived_not_random() -> None:
    first = derive_decision_id("pay-1", "evt-1", "fraud@1")
    assert first == derive_decision_id("pay-1", "evt-1", "fraud@1")
    assert len(first) == 64 and int(first, 16) >= 0
    others = {derive_decision_id("pay-2", "evt-1", "fraud@1"), derive_decision_id("pay-1", "evt-2", "fraud@1")}
    others.add(derive_decision_id("pay-1", "evt-1", "fraud@2"))
    assert first not in others and len(others) == 3


def test_parts_cannot_be_empty_or_ambiguous() -> None:
    with pytest.raises(OutboxRequestError):
        derive_decision_id("", "evt-1", "fraud@1")
    with pytest.raises(OutboxRequestError):
        derive_decision_id("pay\x1fevt", "1", "fraud@1")


def test_a_request_round_trips_through_single_object_encoding() -> None:
    codec = default_codec()
    original = request(method="PUT", headers={"traceparent": "00-a-b-01"}, model_version="fraud@1")
    encoded = codec.encode("outbox_request", original.to_record())
    assert encoded[:2] == b"\xc3\x01"
    assert OutboxRequest.from_record(codec.decode("outbox_request", encoded)) == original


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"decision_id": ""}, "decision_id"),
        ({"key": ""}, "key"),
        ({"target": "http://evil.example"}, "target"),
        ({"path": "holds"}, "path"),
        ({"path": "//evil.example/x"}, "path"),
        ({"method": "GET"}, "method"),
        ({"headers": {"Idempotency-Key": "other"}}, "headers"),
        ({"headers": {"X-Ikkai-Attempt": "1"}}, "headers"),
        ({"created_at": -1}, "created_at"),
    ],
)
def test_requests_that_break_the_contract_are_refused_before_sending(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(OutboxRequestError) as caught:
        request(**overrides)
    assert caught.value.field == field


def test_receipts_decode_from_what_the_sink_writes() -> None:
    receipt = Receipt("d-1", "pay-1", "payments-api", "DELIVERED", 201, 2, 1_000, 2_000, "ab" * 32, None)
    encoded = default_codec().encode("outbox_receipt", receipt.to_record())
    assert decode_receipt(encoded) == receipt
    assert decode_receipt(encoded).delivered


def test_decision_ids_match_the_infer_jobs() -> None:
    from spark_jobs.fraud_decisions import decision_id

    assert derive_decision_id("pay-1", "evt-1", "fraud@1") == decision_id("pay-1", "evt-1", "fraud@1")
