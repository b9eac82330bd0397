"""The raw payment format and the seeded mixed stream (pure: no stack, no Spark)."""

from __future__ import annotations

import json

from demo.raw_payments import EVENT, format_amount, format_event_time, mixed_stream
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.parse import RAW_FIELDS


def test_the_stream_is_seeded() -> None:
    assert mixed_stream(3).lines == mixed_stream(3).lines
    assert mixed_stream(3).lines != mixed_stream(4).lines


def test_every_outcome_occurs_and_every_line_has_one() -> None:
    stream = mixed_stream(7, partitions=2)
    outcomes = stream.outcomes()
    assert set(outcomes) == {EVENT, *r.ERROR_CLASSES}
    assert sum(outcomes.values()) == len(stream.lines)
    assert len(stream.expected_event_ids()) == len(set(stream.expected_event_ids())) == outcomes[EVENT]


def test_valid_lines_carry_every_raw_field_and_sit_on_their_keys_partition() -> None:
    stream = mixed_stream(7, partitions=3)
    for line in stream.lines:
        if line.expected == EVENT:
            document = json.loads(line.value)
            assert tuple(document) == RAW_FIELDS
            assert line.key == document["payment_id"].encode()
            assert line.partition == kafka_partition(line.key, 3)


def test_connector_lines_leave_out_what_a_file_connector_cannot_land() -> None:
    stream = mixed_stream(7)
    kept = {line.expected for line in stream.connector_lines()}
    assert {r.KEY_MISMATCH, r.WRONG_PARTITION, r.INVALID_UTF8, r.EMPTY_VALUE}.isdisjoint(kept)
    assert all(b"\n" not in line.value for line in stream.connector_lines())


def test_formats() -> None:
    assert format_event_time(1_767_225_600_123) == "2026-01-01T00:00:00.123Z"
    assert format_amount(1234, "EUR") == "12.34"
    assert format_amount(5, "USD") == "0.05"
    assert format_amount(1500, "JPY") == "1500"
