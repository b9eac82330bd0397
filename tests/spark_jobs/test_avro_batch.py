"""Batch Avro encoding and decoding give exactly the codec's bytes and records, one record at a time."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import SchemaError, default_codec
from spark_jobs.avro_batch import SameKeys, decode_values, encode_columns, encode_records
from spark_jobs.model.fraud_model import FEATURES


def _text(rng: random.Random) -> str:
    return "".join(rng.choice("aé€😀b\x00") for _ in range(rng.randint(0, 150)))  # lengths past one varint byte


def _long(rng: random.Random) -> int:
    edges = [0, -1, 1, 63, 64, -64, -65, 2**31, -(2**31), 2**63 - 1, -(2**63)]
    return rng.choice([*edges, rng.randint(-(2**63), 2**63 - 1), rng.randint(-1000, 1000)])


def _double(rng: random.Random) -> float:
    return rng.choice([0.0, -0.0, 1.5, math.inf, -math.inf, math.nan, rng.random() * 1e300, 5e-324, rng.random()])


def _decision(rng: random.Random) -> dict[str, Any]:
    return {
        "decision_id": _text(rng), "payment_id": _text(rng), "event_id": _text(rng), "model_version": _text(rng),
        "score": _double(rng), "action": _text(rng), "features": {name: _double(rng) for name in FEATURES},
        "features_as_of": rng.choice([None, _long(rng)]), "event_time": _long(rng), "input_topic": _text(rng),
        "input_partition": rng.randint(-(2**31), 2**31 - 1), "input_offset": _long(rng),
    }  # fmt: skip


def test_decisions_encoded_column_by_column_are_the_codecs_bytes() -> None:
    rng, codec = random.Random(1), default_codec()  # noqa: S311 - test data, not cryptography
    records = [_decision(rng) for _ in range(2000)]
    expected = [codec.encode("fraud_decision", r) for r in records]
    assert encode_records(codec, "fraud_decision", records) == expected
    columns: dict[str, Any] = {key: [r[key] for r in records] for key in records[0] if key != "features"}
    columns["features"] = SameKeys({name: np.array([r["features"][name] for r in records]) for name in FEATURES})
    assert encode_columns(codec, "fraud_decision", columns, len(records)) == expected
    columns["model_version"] = "fraud-lr-0"  # one value for every record
    assert encode_columns(codec, "fraud_decision", columns, len(records))[5] == codec.encode(
        "fraud_decision", {**records[5], "model_version": "fraud-lr-0"}
    )


def test_outbox_requests_and_dead_letters_are_the_codecs_bytes() -> None:
    rng, codec = random.Random(2), default_codec()  # noqa: S311 - test data, not cryptography
    requests = [
        {"decision_id": _text(rng), "key": _text(rng), "target": _text(rng), "path": _text(rng),
         "method": rng.choice([None, _text(rng)]), "content_type": _text(rng), "body": _text(rng).encode(),
         "headers": {_text(rng): _text(rng) for _ in range(rng.randint(0, 3))}, "created_at": _long(rng),
         "model_version": rng.choice([None, _text(rng)]), "effect": rng.choice([None, _text(rng)])}
        for _ in range(1000)
    ]  # fmt: skip
    assert encode_records(codec, "outbox_request", requests) == [codec.encode("outbox_request", r) for r in requests]
    letters = [
        {"stage": _text(rng), "source_topic": _text(rng), "source_partition": rng.randint(0, 99),
         "source_offset": _long(rng), "key": rng.choice([None, _text(rng).encode()]),
         "value": rng.choice([None, b"", _text(rng).encode()]), "reason": _text(rng), "error_class": _text(rng),
         "source_timestamp": _long(rng), "headers": {_text(rng): _text(rng)}}
        for _ in range(500)
    ]  # fmt: skip
    assert encode_records(codec, "dead_letter", letters) == [codec.encode("dead_letter", r) for r in letters]


def test_a_value_that_does_not_fit_is_a_schema_error() -> None:
    codec = default_codec()
    record = _decision(random.Random(3))  # noqa: S311 - test data, not cryptography
    for field, wrong in [("score", "high"), ("input_offset", 1.5), ("event_time", 2**63), ("payment_id", None)]:
        with pytest.raises(SchemaError):
            encode_records(codec, "fraud_decision", [{**record, field: wrong}])


def test_decoding_many_gives_the_codecs_records_and_errors() -> None:
    codec = default_codec()
    payments = payment_records(simulate(5, payments=300).payments)
    values = [codec.encode("payment_event", p, version=version) for p in payments for version in (1, 2, 3)]
    values += [v[:-3] for v in values[:30]]  # truncated bodies
    values += [b"xx", b"\xc3\x01" + b"\x00" * 8 + b"abc", values[0][:12], b'{"json": 1}']
    for value, got in zip(values, decode_values(codec, "payment_event", values), strict=True):
        try:
            expected: Any = codec.decode("payment_event", value)
        except SchemaError as exc:
            expected = exc
        if isinstance(expected, SchemaError):
            assert isinstance(got, SchemaError) and (type(got), str(got)) == (type(expected), str(expected))
        else:
            assert got == expected and list(got) == list(expected)  # same fields, same order


def test_a_value_that_does_not_fit_is_never_quoted_with_its_card_number() -> None:
    """fastavro's and the column encoder's errors quote the value; the schema error masks it and stays short.

    Mutation: ``record_misfit`` quoting ``str(exc)`` as it is: fastavro's error holds the card number.
    """
    codec = default_codec()
    record = _decision(random.Random(4))  # noqa: S311 - test data, not cryptography
    pan = "4111111111111111"
    wrongs = (("score", f"card {pan}"), ("score", f"card {pan}" + "x" * 5000), ("input_offset", f"card {pan}"))
    for field, wrong in wrongs:
        for columnwise in (True, False):
            with pytest.raises(SchemaError) as caught:
                if columnwise:
                    encode_records(codec, "fraud_decision", [{**record, field: wrong}])
                else:
                    codec.encode("fraud_decision", {**record, field: wrong})
            assert pan not in str(caught.value) and "41111111" not in str(caught.value)
            assert len(str(caught.value)) < 400
