"""Parsing and validating raw ingest records: one test per bad-input class (pure: no stack, no Spark)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.job import main
from spark_jobs.enrich.parse import (
    MAX_ID_CHARS,
    RAW_FIELDS,
    ParsedPayment,
    Rejection,
    parse_event_time,
    parse_record,
)
from tests.ikkai.contract.card_number_checks import card_numbers_in
from transforms import CURRENCY_EXPONENTS, TransformSpecError

PARTITIONS = 3
INGESTED = 1_767_312_000_000  # 2026-01-02T00:00:00Z
VALID = {
    "event_id": "evt-1", "payment_id": "pay-1", "customer_id": "cust-00001", "merchant_id": "m-001",
    "amount": "12.34", "currency": "EUR", "country": "DE", "card_present": True, "channel": "pos",
    "card_number": "4111111111111111", "merchant_category_code": "5411", "status": "authorized",
    "event_time": "2026-01-01T23:59:59.123Z",
}  # fmt: skip
KEY = b"pay-1"
LONG_ID = b"p" * (MAX_ID_CHARS + 1)
HOME = kafka_partition(KEY, PARTITIONS)


def parse(value: bytes | None, key: bytes | None = KEY, partition: int = HOME) -> ParsedPayment | Rejection:
    return parse_record(key, value, partition, PARTITIONS, INGESTED, CURRENCY_EXPONENTS)


def line(**changes: Any) -> bytes:
    return json.dumps({**VALID, **changes}).encode()


def test_a_valid_record_parses_to_its_fields() -> None:
    parsed = parse(line())
    assert parsed == ParsedPayment(**{**VALID, "event_time": 1_767_311_999_123})  # type: ignore[arg-type]


def test_amounts_with_trailing_zeros_and_currencies_without_decimals_are_valid() -> None:
    assert isinstance(parse(line(amount="12.340")), ParsedPayment)
    assert isinstance(parse(line(amount="1500", currency="JPY")), ParsedPayment)
    assert isinstance(parse(line(amount="1.005", currency="KWD")), ParsedPayment)


BAD = [
    (r.EMPTY_VALUE, b"", KEY, HOME),
    (r.EMPTY_VALUE, None, KEY, HOME),
    (r.INVALID_UTF8, line(merchant_id="m-X").replace(b"m-X", b"m-\xff"), KEY, HOME),
    (r.NOT_JSON, b'{"payment_id": "pay-1", "amount": 12', KEY, HOME),
    (r.NOT_JSON, b"pay-1,12.34,EUR", KEY, HOME),
    (r.NOT_AN_OBJECT, b'["pay-1", "12.34"]', KEY, HOME),
    (r.NOT_AN_OBJECT, b'"pay-1"', KEY, HOME),
    (r.MISSING_FIELD, json.dumps({k: v for k, v in VALID.items() if k != "currency"}).encode(), KEY, HOME),
    (r.MISSING_FIELD, line(status=None), KEY, HOME),
    (r.WRONG_TYPE, line(amount=12.34), KEY, HOME),
    (r.WRONG_TYPE, line(card_present="yes"), KEY, HOME),
    (r.WRONG_TYPE, line(card_present=1), KEY, HOME),
    (r.MISSING_KEY, line(), None, HOME),
    (r.MISSING_KEY, line(payment_id=" "), b" ", kafka_partition(b" ", PARTITIONS)),
    (r.KEY_MISMATCH, line(), b"pay-2", kafka_partition(b"pay-2", PARTITIONS)),
    (r.WRONG_PARTITION, line(), KEY, (HOME + 1) % PARTITIONS),
    (r.BAD_AMOUNT, line(amount="12,34"), KEY, HOME),
    (r.BAD_AMOUNT, line(amount="1e3"), KEY, HOME),
    (r.BAD_AMOUNT, line(amount="NaN"), KEY, HOME),
    (r.BAD_AMOUNT, line(amount="+5"), KEY, HOME),
    (r.NON_POSITIVE_AMOUNT, line(amount="-5.00"), KEY, HOME),
    (r.NON_POSITIVE_AMOUNT, line(amount="0.00"), KEY, HOME),
    (r.UNKNOWN_CURRENCY, line(currency="XYZ"), KEY, HOME),
    (r.UNKNOWN_CURRENCY, line(currency="eur"), KEY, HOME),
    (r.TOO_MANY_DECIMALS, line(amount="12.345"), KEY, HOME),
    (r.TOO_MANY_DECIMALS, line(amount="10.5", currency="JPY"), KEY, HOME),
    (r.ABSURD_AMOUNT, line(amount="1000000.01"), KEY, HOME),
    (r.BAD_TIMESTAMP, line(event_time="yesterday"), KEY, HOME),
    (r.BAD_TIMESTAMP, line(event_time="2026-02-30T10:00:00.000Z"), KEY, HOME),
    (r.BAD_TIMESTAMP, line(event_time="2026-01-05T10:00:00.000+02:00"), KEY, HOME),
    (r.BAD_TIMESTAMP, line(event_time="1767311999123"), KEY, HOME),
    (r.FUTURE_TIMESTAMP, line(event_time="2026-01-02T01:00:00.001Z"), KEY, HOME),
    (r.INVALID_FIELD, line(status="exploded"), KEY, HOME),
    (r.INVALID_FIELD, line(channel="fax"), KEY, HOME),
    (r.INVALID_FIELD, line(country="Germany"), KEY, HOME),
    (r.INVALID_FIELD, line(merchant_category_code="54111"), KEY, HOME),
    (r.INVALID_FIELD, line(card_number="4111-1111"), KEY, HOME),
    (r.INVALID_FIELD, line(event_id=""), KEY, HOME),
    # Ids are the free text that reaches an event: each has a length bound (MAX_ID_CHARS).
    (r.INVALID_FIELD, line(customer_id="c" * (MAX_ID_CHARS + 1)), KEY, HOME),
    (r.INVALID_FIELD, line(merchant_id="m" * 900_000), KEY, HOME),
    (r.INVALID_FIELD, line(event_id="é" * (MAX_ID_CHARS + 1)), KEY, HOME),
    (r.INVALID_FIELD, line(payment_id=LONG_ID.decode()), LONG_ID, kafka_partition(LONG_ID, PARTITIONS)),
    # Valid JSON whose strings are not Unicode text (a lone surrogate escape): no UTF-8 can hold them.
    (r.INVALID_UTF8, line(customer_id="\ud800"), KEY, HOME),
    (r.INVALID_UTF8, line(payment_id="\udc00"), "\udc00".encode("utf-8", "surrogatepass"), HOME),
    (r.INVALID_UTF8, line(status="\ud800"), KEY, HOME),
    (r.INVALID_UTF8, json.dumps({**VALID, "extra": [{"\udfff": "fine"}]}).encode(), KEY, HOME),
    (r.INVALID_UTF8, json.dumps({**VALID, "note": ["ok", {"deep": "x\ud83d"}]}).encode(), KEY, HOME),
    # Python's ``$`` also matches before a trailing newline, ``\d`` any script's digits.
    (r.BAD_AMOUNT, line(amount="12.34\n"), KEY, HOME),
    (r.BAD_AMOUNT, line(amount="１２.34"), KEY, HOME),
    (r.BAD_TIMESTAMP, line(event_time="2026-01-01T23:59:59.123Z\n"), KEY, HOME),
    (r.BAD_TIMESTAMP, line(event_time="２０２６-01-01T23:59:59.123Z"), KEY, HOME),
    (r.BAD_TIMESTAMP, line(event_time="٢٠٢٦-٠١-٠١T23:59:59.123Z"), KEY, HOME),
    (r.INVALID_FIELD, line(country="DE\n"), KEY, HOME),
    (r.INVALID_FIELD, line(merchant_category_code="5411\n"), KEY, HOME),
    (r.INVALID_FIELD, line(card_number="4111111111111111\n"), KEY, HOME),
    # Numbers past Python's 4300-digit int conversion limit, and nesting past any sane depth.
    (r.ABSURD_AMOUNT, line(amount="1" * 5000), KEY, HOME),
    (r.ABSURD_AMOUNT, line(amount="9" * 5000 + ".00"), KEY, HOME),
    (r.NON_POSITIVE_AMOUNT, line(amount="0" * 5000), KEY, HOME),
    (r.NOT_JSON, line().replace(b'"12.34"', b"1" * 5000), KEY, HOME),
    (r.NOT_JSON, b"[" * 100_000 + b"]" * 100_000, KEY, HOME),
    (r.NOT_JSON, line().replace(b'"12.34"', b"[" * 200 + b"]" * 200), KEY, HOME),
]


@pytest.mark.parametrize(
    ("error_class", "value", "key", "partition"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_each_bad_input_is_rejected_with_its_class_and_a_reason(
    error_class: str, value: bytes | None, key: bytes | None, partition: int
) -> None:
    rejection = parse(value, key, partition)
    assert isinstance(rejection, Rejection)
    assert rejection.error_class == error_class, rejection.reason
    assert rejection.reason


def test_every_bad_input_class_is_covered() -> None:
    assert {b[0] for b in BAD} == set(r.BAD_INPUT_CLASSES)
    assert len(r.BAD_INPUT_CLASSES) >= 12


def test_ids_up_to_their_bound_are_valid() -> None:
    longest = "x" * MAX_ID_CHARS
    key = longest.encode()
    valid = line(event_id=longest, payment_id=longest, customer_id=longest, merchant_id=longest)
    assert isinstance(parse(valid, key, kafka_partition(key, PARTITIONS)), ParsedPayment)


def test_a_valid_line_just_under_1_mib_with_a_long_id_is_a_dead_letter_that_quotes_a_short_prefix() -> None:
    """The line of issue 27 item 4: it made an event over message.max.bytes and stopped enrich on every restart."""
    value = line(event_id="e" * 1_040_000)
    assert len(value) < 1024 * 1024
    rejection = parse(value)
    assert isinstance(rejection, Rejection) and rejection.error_class == r.INVALID_FIELD
    assert rejection.reason.startswith(f"event_id is 1,040,000 characters long, at most {MAX_ID_CHARS}")
    assert len(rejection.reason) < 200


def test_a_reason_never_quotes_the_card_number() -> None:
    rejection = parse(line(card_number="41111111111111112222"))
    assert isinstance(rejection, Rejection) and "4111" not in rejection.reason


PAN = "4111111111111111"
CARD_FORMS = (int(PAN), float(PAN), PAN, "4111 1111 1111 1111", "4111-1111-1111-1111", f"card {PAN} at m-001",
              PAN * 10, "x" * 50 + PAN)  # fmt: skip


def test_a_reason_never_quotes_a_card_number_whichever_field_holds_it() -> None:
    """Issue 30 item 3: a card number sent as a JSON number was quoted whole ("card_number is 4111…, not a string")."""
    reasons = []
    for field in RAW_FIELDS:
        for form in CARD_FORMS:
            key = str(form).encode() if field == "payment_id" else KEY
            for partition in range(PARTITIONS):  # the home partition, and the others (wrong_partition quotes the key)
                rejection = parse(line(**{field: form}), key, partition)
                if isinstance(rejection, Rejection):
                    reasons.append(rejection.reason)
    reasons += [parse(line(), PAN.encode()).reason, parse(json.dumps({**VALID, PAN: "\ud800"}).encode()).reason]  # type: ignore[union-attr]
    assert len(reasons) > len(RAW_FIELDS) * len(CARD_FORMS)
    assert [reason for reason in reasons if card_numbers_in(reason)] == []
    assert "card_number is ************1111, not a string" in reasons  # masked, not dropped: the last four show


@pytest.mark.parametrize(
    ("error_class", "value", "key", "partition"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_no_bad_input_reason_holds_a_card_like_run_of_digits(
    error_class: str, value: bytes | None, key: bytes | None, partition: int
) -> None:
    """Not even an instant: the future is named as ISO-8601 text, not as 13 digits of epoch millis."""
    rejection = parse(value, key, partition)
    assert isinstance(rejection, Rejection) and not card_numbers_in(rejection.reason), rejection.reason


def test_a_quoted_value_is_masked_before_it_is_cut() -> None:
    """Cutting first would leave a card number's first digits at the end of the quote."""
    quoted = r.quote("x" * (r.QUOTED_CHARS - 10) + PAN)
    assert len(quoted) == r.QUOTED_CHARS and not re.search(r"[0-9]", quoted), quoted


def test_a_reason_is_always_utf8_and_bounded() -> None:
    for value in (line(status="\ud800" * 100), line(status=["x\udc00"] * 3), line(amount="9" * 5000 + "\ud800")):
        rejection = parse(value)
        assert isinstance(rejection, Rejection)
        assert len(rejection.reason.encode("utf-8")) < 500, rejection.error_class


@pytest.mark.parametrize("depth", range(900, 1000, 7))
def test_a_deep_document_is_rejected_the_same_way_whatever_the_stack(depth: int) -> None:
    """Near Python's recursion limit json.loads may pass and quoting may fail: the class must not hang on that."""

    def nested(frames: int) -> ParsedPayment | Rejection:
        return nested(frames - 1) if frames else parse(line().replace(b'"12.34"', b"[" * depth + b"]" * depth))

    results = {nested(frames) for frames in (0, 5, 10, 20, 40)}
    assert len(results) == 1 and isinstance(results.pop(), Rejection)


def test_the_future_is_judged_against_the_ingest_timestamp_not_the_clock() -> None:
    late_ingest = parse_record(KEY, line(event_time="2099-01-01T00:00:00.000Z"), HOME, PARTITIONS,
                               4_070_908_800_000, CURRENCY_EXPONENTS)  # fmt: skip
    assert isinstance(late_ingest, ParsedPayment)


def test_event_times() -> None:
    assert parse_event_time("2026-01-05T10:00:00.123Z") == 1_767_607_200_123
    assert parse_event_time("2026-01-05T10:00:00Z") == 1_767_607_200_000
    assert parse_event_time("2026-01-05T10:00:00.5+00:00") == 1_767_607_200_500
    assert parse_event_time("2026-01-05 10:00:00Z") is None
    assert parse_event_time("2026-01-05T10:00:00Z\n") is None
    assert parse_event_time("2026-01-05T10:00:00.１２３Z") is None


def test_a_bad_transform_spec_stops_the_job_before_spark_starts(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "transforms:\n  - name: amount_to_minor_units\n    params: {amount: amount}\n  - name: no_such_one\n"
    )
    result = CliRunner().invoke(main, ["--transforms", str(spec), "--bootstrap", "127.0.0.1:1"])
    assert isinstance(result.exception, TransformSpecError)
    assert str(spec) in str(result.exception)
