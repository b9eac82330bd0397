"""What the demo writes to the connector's file: the generator's lines minus those a file cannot carry."""

from __future__ import annotations

from demo.raw_input import demo_input
from demo.raw_payments import EVENT, mixed_stream


def test_demo_input_keeps_stream_order_and_counts_what_it_holds_back() -> None:
    stream = mixed_stream(7, payments=300, partitions=2)
    given = demo_input(stream.lines)
    kept = [line for line in stream.lines if line.via_connector]
    assert given.lines == [line.value for line in kept]
    assert given.expectation.lines == len(kept)
    assert given.expectation.events == sum(1 for line in kept if line.expected == EVENT)
    assert sum((given.expectation.dead_letters or {}).values()) + (given.expectation.events or 0) == len(kept)
    assert sum(given.held_back.values()) == len(stream.lines) - len(kept)
    assert {"empty_value", "invalid_utf8"} <= set(given.held_back)
    # malformed lines go in: the connector lands them unkeyed and enrich dead-letters them
    assert {"not_json", "not_an_object"} <= set(given.expectation.dead_letters or {})
    assert {"late", "duplicate", "stale", "missing_field", "missing_key"} <= set(given.expectation.dead_letters or {})
