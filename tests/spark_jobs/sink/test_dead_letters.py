"""A dead letter always fits one producer request, in both jobs: too large a key or value is copied cut."""

from __future__ import annotations

import hashlib

import pandas as pd

from ikkai.contract.codec import default_codec
from spark_jobs.infer.fraud_decisions import Topics, decide
from spark_jobs.model.fraud_model import FraudModel, load_snapshots
from spark_jobs.sink.dead_letters import (
    DEAD_LETTER_KEY_BYTES,
    DEAD_LETTER_VALUE_BYTES,
    KEY_BYTES_HEADER,
    VALUE_BYTES_HEADER,
    VALUE_SHA256_HEADER,
    cut_copy,
)


def test_what_fits_is_copied_whole_and_what_does_not_is_cut_with_its_size_and_hash() -> None:
    assert cut_copy(b"k", b"v" * DEAD_LETTER_VALUE_BYTES) == (b"k", b"v" * DEAD_LETTER_VALUE_BYTES, {})
    assert cut_copy(None, None) == (None, None, {})
    key, value = b"k" * (DEAD_LETTER_KEY_BYTES + 1), b"v" * (DEAD_LETTER_VALUE_BYTES + 1)
    assert cut_copy(key, value) == (
        key[:DEAD_LETTER_KEY_BYTES], value[:DEAD_LETTER_VALUE_BYTES],
        {KEY_BYTES_HEADER: str(len(key)), VALUE_BYTES_HEADER: str(len(value)),
         VALUE_SHA256_HEADER: hashlib.sha256(value).hexdigest()},
    )  # fmt: skip


def test_the_infer_jobs_dead_letter_of_a_near_1_mib_record_fits_a_producer_request() -> None:
    value = b"\x00" * 1_040_000  # not single-object Avro: a dead letter
    rows = pd.DataFrame({"key": [b"pay-1"], "value": [value], "topic": ["events.payments"], "partition": [0],
                         "offset": [9]})  # fmt: skip
    out = decide(rows, FraudModel.load(), load_snapshots(), default_codec(), Topics())
    [letter_bytes] = out["value"]
    letter = default_codec().decode("dead_letter", letter_bytes)
    assert len(letter_bytes) < 1_000_000 and letter["value"] == value[:DEAD_LETTER_VALUE_BYTES]
    assert letter["headers"][VALUE_BYTES_HEADER] == str(len(value))
    assert out["headers"].iat[0][VALUE_SHA256_HEADER] == hashlib.sha256(value).hexdigest()
    assert out["key"].iat[0] == b"pay-1"


def test_a_reason_is_bounded_and_never_holds_a_card_number() -> None:
    """An infer dead letter's reason is the contract's or the codec's error text, which may quote the input.

    Mutation: ``reason_text`` returning ``str(error)``: the card number and all 5,000 characters stay.
    """
    from spark_jobs.sink.dead_letters import MAX_REASON_CHARS, reason_text

    reason = reason_text(ValueError("effect path '/cards/4111 1111 1111 1111' refused " + "x" * 5000))
    assert "4111 1111 1111 1111" not in reason and "1111" in reason
    assert len(reason) <= MAX_REASON_CHARS
    assert reason_text(ValueError("short, 12.34 EUR")) == "short, 12.34 EUR"
