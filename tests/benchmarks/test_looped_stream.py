"""A raw stream looped with fresh keys: every copy keeps each line's outcome, with ids and event times of its own."""

from __future__ import annotations

import json
from collections.abc import Sequence

from benchmarks.looped_stream import GAP_MS, copies_for, event_time_ms, looped
from demo.raw_payments import EVENT, RawLine, mixed_stream
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich.reasons import WRONG_PARTITION


def test_copies_keep_every_outcome_with_new_ids_later_times_and_the_right_partitions() -> None:
    one = mixed_stream(11, payments=400, partitions=2)
    stream = looped(one, 3)
    size = len(one.lines)
    assert len(stream.lines) == 3 * size
    for k in (1, 2):
        copy = stream.lines[k * size : (k + 1) * size]
        assert [line.expected for line in copy] == [line.expected for line in one.lines]
    events = [line for line in stream.lines if line.expected == EVENT]
    ids = [line.event_id for line in events]
    assert len(set(ids)) == len(ids) == 3 * len([line for line in one.lines if line.expected == EVENT])
    for line in events:  # a well-formed event: keyed by its payment id, on its key's partition
        document = json.loads(line.value)
        assert line.key == document["payment_id"].encode() and line.event_id == document["event_id"]
        assert line.partition == kafka_partition(line.key or b"", 2)
    wrong = [line for line in stream.lines if line.expected == WRONG_PARTITION]
    assert len(wrong) == 3 and all(line.partition != kafka_partition(line.key or b"", 2) for line in wrong)

    def times(lines: Sequence[RawLine]) -> list[int]:
        return [event_time_ms(json.loads(line.value)["event_time"]) for line in lines if line.expected == EVENT]

    def latest(lines: Sequence[RawLine]) -> int:
        return max(times(lines))

    def earliest(lines: Sequence[RawLine]) -> int:
        return min(times(lines))

    # each copy's events start GAP_MS after the copy before ends: never behind it, and not far ahead (a line kept
    # for its timestamp in the future must not push the copies into the future, where they would be refused)
    assert earliest(stream.lines[size : 2 * size]) == latest(stream.lines[:size]) + GAP_MS
    assert earliest(stream.lines[2 * size :]) == latest(stream.lines[size : 2 * size]) + GAP_MS


def test_enough_copies_for_the_lines_needed() -> None:
    assert copies_for(190_000, 770_000) == 5
    assert copies_for(190_000, 190_000) == 1
    assert copies_for(190_000, 0) == 1
