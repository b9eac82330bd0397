"""Digests, percentiles and latencies: the numbers the demo's report stands on."""

from __future__ import annotations

import hashlib

import pytest

from demo.measures import TopicRecord, first_seen, latencies, latency_summary, percentile, topic_digest


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
