"""What the demo writes to the connector's file: the generator's lines minus those the connector cannot carry."""

from __future__ import annotations

import pytest

from deploy.demo.raw_input import connector_can_key, demo_input
from spark_jobs.raw_payments import EVENT, mixed_stream


@pytest.mark.parametrize(
    ("line", "keyable"),
    [
        (b'{"payment_id":"p-1","amount":"1.00"}', True),
        (b'  {"payment_id":"p-1"} trailing', True),  # Jackson reads the first value and stops
        (b'{"payment_id":""}', True),  # an empty id is a key (enrich dead-letters it as missing_key)
        (b'{"payment_id":7}', True),  # a scalar of any type
        (b'{"payment_id":"m-\xff"}', True),  # bad UTF-8 becomes U+FFFD, still JSON
        (b'{"payment_id":null}', False),
        (b'{"payment_id":{"id":"p"}}', False),
        (b'{"amount":"1.00"}', False),
        (b'[{"payment_id":"p-1"}]', False),
        (b'{"payment_id": "p-1", "amount": 12.3', False),  # cut off
        (b"payment,p-1,12.30,EUR", False),
        (b"", False),
    ],
)
def test_connector_can_key_mirrors_json_field_to_key(line: bytes, keyable: bool) -> None:
    assert connector_can_key(line) is keyable


def test_demo_input_keeps_stream_order_and_counts_what_it_holds_back() -> None:
    stream = mixed_stream(7, payments=300, partitions=2)
    given = demo_input(stream.lines)
    kept = [line for line in stream.lines if line.via_connector and connector_can_key(line.value)]
    assert given.lines == [line.value for line in kept]
    assert given.expectation.lines == len(kept)
    assert given.expectation.events == sum(1 for line in kept if line.expected == EVENT)
    assert sum((given.expectation.dead_letters or {}).values()) + (given.expectation.events or 0) == len(kept)
    assert sum(given.held_back.values()) == len(stream.lines) - len(kept)
    assert {"not_json", "not_an_object", "empty_value", "invalid_utf8"} <= set(given.held_back)
    assert {"late", "duplicate", "stale", "missing_field", "missing_key"} <= set(given.expectation.dead_letters or {})
