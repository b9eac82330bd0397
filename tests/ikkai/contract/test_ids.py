"""decision_id and the Idempotency-Key: one derivation, used by the infer job and the outbox alike."""

from __future__ import annotations

import hashlib

from ikkai.contract.ids import decision_id, idempotency_key
from ikkai.contract.outbox import derive_decision_id, derive_idempotency_key


def test_decision_id_is_sha256_of_the_parts_joined_by_unit_separator() -> None:
    expected = hashlib.sha256(b"pay-1\x1fevt-9\x1ffraud-lr-1").hexdigest()
    assert decision_id("pay-1", "evt-9", "fraud-lr-1") == expected
    assert decision_id("pay-1", "evt-9", "fraud-lr-2") != expected  # a new model version, a new decision


def test_the_outbox_contract_derives_the_same_ids_after_checking_the_parts() -> None:
    assert derive_decision_id("pay-1", "evt-9", "fraud-lr-1") == decision_id("pay-1", "evt-9", "fraud-lr-1")
    assert derive_idempotency_key("d" * 64, "hold-payment") == idempotency_key("d" * 64, "hold-payment")
    assert idempotency_key("d" * 64, "hold-payment") != idempotency_key("d" * 64, "notify-customer")
