"""The outbox contract: requests and receipts round-trip through the schema catalog; ids are deterministic."""

from __future__ import annotations

import pytest

from ikkai.contract.codec import default_codec
from outbox_sink import (
    OutboxRequest,
    OutboxRequestError,
    Receipt,
    decode_receipt,
    derive_decision_id,
    derive_idempotency_key,
    prevailing,
)


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


@pytest.mark.parametrize(
    ("overrides", "field", "said"),
    [
        ({"effect": "notify-客户"}, "effect", "U+5BA2"),
        ({"effect": "hold payment"}, "effect", "U+0020"),
        ({"effect": "x" * 257}, "effect", "257 bytes"),
        ({"decision_id": "d\r\nX-Evil: 1"}, "decision_id", "U+000D"),
        ({"decision_id": "d" * 257}, "decision_id", "257 bytes"),
        ({"model_version": "fraud@1\x00"}, "model_version", "U+0000"),
        ({"model_version": "modèle@1"}, "model_version", "U+00E8"),
        ({"model_version": ""}, "model_version", "empty"),
        ({"content_type": "text/plain; charset=\u0100"}, "content_type", "U+0100"),
        ({"content_type": "application/json\n"}, "content_type", "U+000A"),
        ({"content_type": "a/" + "b" * 300}, "content_type", "bytes"),
        ({"key": "pay\x1b[31m"}, "key", "U+001B"),
        ({"key": "p" * 257}, "key", "257 bytes"),
        ({"target": "payments\tapi"}, "target", "U+0009"),
        ({"path": "/holds/pay 1"}, "path", "U+0020"),
        ({"path": "/holds/客户"}, "path", "U+5BA2"),
        ({"path": "/holds/a#frag"}, "path", "'#'"),
        ({"path": "/holds/../admin"}, "path", "dot segment"),
        ({"path": "/holds/%2e%2e;x/admin"}, "path", "dot segment"),
        ({"path": "/" + "p" * 2048}, "path", "2049 bytes"),
        ({"headers": {"X-Note": "a\nb"}}, "headers", "U+000A"),
        ({"headers": {"X-Note": "\x7f"}}, "headers", "U+007F"),
        ({"headers": {"X-Note": "é"}}, "headers", "U+00E9"),
        ({"headers": {"X-Note": "v" * (8 * 1024 + 1)}}, "headers", "8193 bytes"),
        ({"headers": {"X Note": "v"}}, "headers", "not an HTTP header name"),
        ({"headers": {"X-Nöte": "v"}}, "headers", "not an HTTP header name"),
        ({"headers": {"N" * 257: "v"}}, "headers", "257"),
        ({"headers": {f"X-{i}": "v" for i in range(65)}}, "headers", "65 headers"),
    ],
)
def test_values_the_http_layer_cannot_carry_are_refused_naming_the_field(
    overrides: dict[str, object], field: str, said: str
) -> None:
    with pytest.raises(OutboxRequestError) as caught:
        request(**overrides)
    assert caught.value.field == field
    assert said in str(caught.value) and caught.value.fix
    assert "\n" not in str(caught.value) and "\r" not in str(caught.value)  # the message itself stays one line


def test_values_at_the_bounds_are_accepted() -> None:
    request(
        decision_id="d" * 256, key="客户-" + "k" * 240, effect="e" * 256, model_version="m" * 256,
        content_type="application/json; charset=utf-8", path="/" + "p" * 2047,
        headers={"X-Note": "v" * (8 * 1024), **{f"X-{i}": "\tv w" for i in range(63)}},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("effect", "effect_kind", "kind"),
    [
        ("api/ok/1", "EXPLICIT", "EXPLICIT"),  # v3: the receipt says, whatever the name looks like
        ("api/ok/1", "DEFAULT", "DEFAULT"),
        ("api/ok/1", None, "DEFAULT"),  # before v3: target + "/" + ... is a default effect's name
        ("hold-payment", None, "EXPLICIT"),
        ("api-other/x", None, "EXPLICIT"),  # another target's prefix is no default name of this one
        (None, None, "DEFAULT"),  # v1: no effect, the target names it
    ],
)
def test_a_receipt_names_its_effect_with_its_kind(effect: str | None, effect_kind: str | None, kind: str) -> None:
    made = Receipt("d-1", "pay-1", "api", "DELIVERED", 201, 1, 1, 2, None, None, effect, None, effect_kind)  # type: ignore[arg-type]
    assert made.effect_ref == ("d-1", kind, effect or "api")
    assert decode_receipt(default_codec().encode("outbox_receipt", made.to_record())).effect_ref == made.effect_ref


def test_receipts_decode_from_what_the_sink_writes() -> None:
    receipt = Receipt("d-1", "pay-1", "payments-api", "DELIVERED", 201, 2, 1_000, 2_000, "ab" * 32, None)
    encoded = default_codec().encode("outbox_receipt", receipt.to_record())
    assert decode_receipt(encoded) == receipt
    assert decode_receipt(encoded).delivered


def test_decision_ids_match_the_infer_jobs() -> None:
    from ikkai.contract.ids import decision_id

    assert derive_decision_id("pay-1", "evt-1", "fraud@1") == decision_id("pay-1", "evt-1", "fraud@1")


def test_each_side_effect_has_its_own_idempotency_key() -> None:
    # Vectors of tests/outbox_sink/idempotency_key_vectors.json, which the sink's IdempotencyKeyTest reads too.
    assert derive_idempotency_key("dec-9", "hold-payment") == (
        "0fd2279cb80c82b5a784ae755bdd1e4599f44835ccc9f1aa56bbe0df536f5bb1"
    )
    assert derive_idempotency_key("dec-9", "hold-payment", version="v1") == (
        "c1a02b85c4b683f44d325b9a398ca5eacabe76e2205009d08ef22d15d51ce4b3"
    )
    hold = request(effect="hold-payment")
    notify = request(target="notifications-api", path="/notify", effect="notify-customer")
    assert hold.idempotency_key != notify.idempotency_key
    assert hold.idempotency_key == derive_idempotency_key(hold.decision_id, "hold-payment")
    # No effect name: the default effect, target + path, so two targets of one decision still get two keys;
    # and an explicit effect spelled like it has a key of its own (v2).
    unnamed = request()
    assert unnamed.effect_name == "payments-api/holds/pay-1"
    assert unnamed.idempotency_key == derive_idempotency_key(
        unnamed.decision_id, target="payments-api", path="/holds/pay-1"
    )
    assert unnamed.idempotency_key != derive_idempotency_key(unnamed.decision_id, "payments-api/holds/pay-1")
    with pytest.raises(OutboxRequestError) as caught:
        request(effect="")
    assert caught.value.field == "effect"


def test_a_v1_request_decodes_without_an_effect() -> None:
    codec = default_codec()
    v1 = codec.encode("outbox_request", {k: v for k, v in request().to_record().items() if k != "effect"}, version=1)
    decoded = OutboxRequest.from_record(codec.decode("outbox_request", v1))
    assert decoded == request() and decoded.effect is None


def test_the_fraud_decisions_side_effects_never_share_a_key() -> None:
    from spark_jobs.infer.fraud_decisions import outbox_requests

    decision = {
        "decision_id": derive_decision_id("pay-1", "evt-1", "fraud@1"), "payment_id": "pay-1", "action": "hold",
        "event_time": 1_700_000_000_000, "model_version": "fraud@1", "score": 0.9,
    }  # fmt: skip
    held = [OutboxRequest.from_record(r) for r in outbox_requests(decision, "cust-1")]
    assert [r.effect for r in held] == ["hold-payment", "notify-customer"]
    assert len({r.idempotency_key for r in held}) == 2
    [review] = [OutboxRequest.from_record(r) for r in outbox_requests({**decision, "action": "review"}, "cust-1")]
    assert review.effect == "review-payment"


def test_delivered_prevails_over_dead_lettered_whatever_the_order() -> None:
    dead = Receipt("d-1", "pay-1", "payments-api", "DEAD_LETTERED", 503, 9, 1, 2, None, "retries-exhausted: x")
    delivered = Receipt("d-1", "pay-1", "payments-api", "DELIVERED", 201, 1, 3, 3, "ab" * 32, None)
    repeat = Receipt("d-1", "pay-1", "payments-api", "DELIVERED", 201, 2, 5, 6, "ab" * 32, None)
    assert prevailing(dead, delivered) is delivered
    assert prevailing(delivered, dead) is delivered
    assert prevailing(delivered, repeat) is delivered  # a repeat changes nothing: the first is kept
