"""Digests, percentiles and latencies: the numbers the demo's report stands on."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from demo.measures import (
    TopicRecord,
    content_digest,
    first_seen,
    latencies,
    latency_summary,
    percentile,
    topic_digest,
)
from ikkai.contract.codec import default_codec
from ikkai.contract.topics import DECISIONS_FRAUD, EVENTS_PAYMENTS


def rec(partition: int, offset: int, key: bytes | None, value: bytes | None, ts: int = 0) -> TopicRecord:
    return TopicRecord(partition, offset, ts, key, value)


def test_digest_ignores_arrival_order_and_timestamps() -> None:
    a = [rec(0, 0, b"k1", b"v1", 5), rec(1, 0, b"k2", b"v2", 6), rec(0, 1, b"k3", b"v3", 7)]
    b = [rec(0, 1, b"k3", b"v3", 99), rec(1, 0, b"k2", b"v2", 1), rec(0, 0, b"k1", b"v1", 2)]
    assert topic_digest(a) == topic_digest(b)


@pytest.mark.parametrize(
    "other",
    [
        [rec(0, 0, b"k1", b"v1"), rec(0, 1, b"k2", b"v2x")],  # a changed value
        [rec(0, 0, b"k2", b"v2"), rec(0, 1, b"k1", b"v1")],  # the same records in another offset order
        [rec(0, 0, b"k1", b"v1"), rec(1, 0, b"k2", b"v2")],  # the same records on another partition
        [rec(0, 0, b"k1", b"v1")],  # one missing
        [rec(0, 0, b"k1", b"v1"), rec(0, 1, b"k2", b"v2"), rec(0, 2, b"k2", b"v2")],  # one duplicated
        [rec(0, 0, b"k1v", b"1"), rec(0, 1, b"k2", b"v2")],  # bytes moved from the value to the key
        [rec(0, 0, None, b"k1v1"), rec(0, 1, b"k2", b"v2")],  # a null key is not an empty key
    ],
)
def test_digest_sees_every_difference_in_content_or_placement(other: list[TopicRecord]) -> None:
    assert topic_digest(other) != topic_digest([rec(0, 0, b"k1", b"v1"), rec(0, 1, b"k2", b"v2")])


def test_digest_of_an_empty_topic_is_the_sha256_of_nothing() -> None:
    assert topic_digest([]) == hashlib.sha256(b"").hexdigest()


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50, 95, 99)
    assert percentile([7.0], 99) == 7
    assert percentile([3.0, 1.0, 2.0], 50) == 2


def test_percentile_of_nothing_is_an_error_and_the_summary_says_none() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    assert latency_summary([]) == {"count": 0, "p50": None, "p95": None, "p99": None, "max": None}


def test_latency_from_the_first_arrival_of_a_key() -> None:
    ingested = first_seen([rec(0, 0, b"p1", b"", 100), rec(0, 1, b"p1", b"", 50), rec(0, 2, b"p2", b"", 10)])
    assert ingested == {b"p1": 50, b"p2": 10}
    starts = {k.decode(): v for k, v in ingested.items()}
    assert latencies(starts, [("p1", 80), ("p2", 15), ("unknown", 1)]) == [30.0, 5.0]


EVENT_TIME = 1_767_607_200_000  # 2026-01-05T10:00Z in epoch ms, as the codec decodes a timestamp-millis


def event(event_id: str, ingested_at: int) -> dict[str, Any]:
    """A payment event as the codec decodes it, ingested at ``ingested_at`` (epoch ms)."""
    return {
        "event_id": event_id, "payment_id": f"p-{event_id}", "amount_minor": 1250, "currency": "EUR",
        "event_time": EVENT_TIME, "merchant_profile_as_of": None, "ingested_at": ingested_at,
    }  # fmt: skip


def decision(decision_id: str, offset: int, action: str = "approve") -> dict[str, Any]:
    """A fraud decision as the codec decodes it, of the event at ``offset`` of events.payments."""
    return {
        "decision_id": decision_id, "payment_id": "p-1", "event_id": "e-1", "model_version": "m1", "score": 0.125,
        "action": action, "features": {"amount": 12.5}, "features_as_of": None,
        "event_time": EVENT_TIME, "input_topic": EVENTS_PAYMENTS,
        "input_partition": offset % 2, "input_offset": offset,
    }  # fmt: skip


def test_the_content_digest_leaves_out_when_and_where_a_run_wrote_each_record() -> None:
    """Two runs of one seed: the ingest timestamps differ, an aborted transaction moved the offsets, the records
    arrived in another order; the content is the same."""
    assert content_digest(EVENTS_PAYMENTS, [event("e-1", 1_000), event("e-2", 1_001)]) == content_digest(
        EVENTS_PAYMENTS, [event("e-2", 9_999_999), event("e-1", 5_000_000)]
    )
    assert content_digest(DECISIONS_FRAUD, [decision("d-1", 0), decision("d-2", 1)]) == content_digest(
        DECISIONS_FRAUD, [decision("d-2", 7), decision("d-1", 4)]
    )


@pytest.mark.parametrize(
    "other",
    [
        [decision("d-1", 0), decision("d-2", 1, action="hold")],  # a changed decision
        [decision("d-1", 0), {**decision("d-2", 1), "score": 0.126}],  # a changed score
        [decision("d-1", 0)],  # one missing
        [decision("d-1", 0), decision("d-2", 1), decision("d-2", 2)],  # one duplicated
        [decision("d-1", 0), {**decision("d-2", 1), "model_version": "m2"}],  # another model decided it
    ],
)
def test_the_content_digest_sees_every_change_of_a_decision(other: list[dict[str, Any]]) -> None:
    assert content_digest(DECISIONS_FRAUD, other) != content_digest(
        DECISIONS_FRAUD, [decision("d-1", 0), decision("d-2", 1)]
    )


def test_the_content_digest_reads_what_the_codec_decodes() -> None:
    """Through the schema's own encoding and decoding: the same digest as the record decoded from another offset."""
    codec = default_codec()
    record = codec.decode("fraud_decision", codec.encode("fraud_decision", decision("d-1", 3), version=1))
    assert content_digest(DECISIONS_FRAUD, [record]) == content_digest(DECISIONS_FRAUD, [decision("d-1", 8)])
