"""A seeded raw stream made as long as a benchmark needs: copies of it with fresh keys, one after another in time.

``raw_payments.mixed_stream`` of a few hundred thousand payments takes tens of seconds to make; a steady-state
window of 400,000 lines after a 300,000-line warm-up needs more. Each copy renames every payment and event id
(``<id>.c<k>``), moves every event time past the copy before, and keeps each line's outcome: a retried line is
still the same bytes twice, a late line still ten minutes behind its neighbours, a malformed line still
malformed, a line on the wrong partition still on the wrong one. So deduplication, the state store and the
watermark see new payments, never replays of old ones. ``FreshLines`` makes the fixed loads' lines: valid
payments after every line of the stream.
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from demo.raw_payments import EVENT, MixedStream, RawLine, encode_line, format_event_time
from ikkai.contract.partitioning import kafka_partition

GAP_MS = 60_000  # between the last event time of one copy and the first of the next


def event_time_ms(text: str) -> int:
    """Epoch millis of the raw format's event time; ValueError for a malformed one."""
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000)


def _document(line: RawLine) -> dict[str, Any] | None:
    try:
        document = json.loads(line.value)
    except ValueError:  # not JSON, or not UTF-8: a bad line, the same in every copy
        return None
    return document if isinstance(document, dict) else None


def span_ms(stream: MixedStream) -> int:
    """Event times of the stream's accepted events, latest - earliest (0 when there are none). Not of every line:
    a line kept for its timestamp in the future would move each copy decades ahead, into the future itself."""
    times = [event_time_ms(json.loads(line.value)["event_time"]) for line in stream.lines if line.expected == EVENT]
    return max(times) - min(times) if times else 0


def copy_line(line: RawLine, suffix: str, shift_ms: int, partitions: int) -> RawLine:
    """``line`` with its ids renamed by ``suffix`` and its event time moved by ``shift_ms``; its outcome kept."""
    document = _document(line)
    if document is None:
        return line
    renamed = dict(document)
    for name in ("payment_id", "event_id"):
        if isinstance(document.get(name), str):
            renamed[name] = document[name] + suffix
    if isinstance(document.get("event_time"), str):
        with suppress(ValueError):  # a malformed timestamp stays malformed
            renamed["event_time"] = format_event_time(event_time_ms(document["event_time"]) + shift_ms)
    key, partition = line.key, line.partition
    if key is not None and isinstance(document.get("payment_id"), str) and key == document["payment_id"].encode():
        key = renamed["payment_id"].encode()
        right = kafka_partition(key, partitions)
        # a line on its key's partition moves with its new key; one on the wrong partition stays wrong
        partition = (
            right if line.partition == kafka_partition(line.key or b"", partitions) else (right + 1) % partitions
        )
    event_id = renamed.get("event_id") if line.event_id is not None else None
    return RawLine(key, encode_line(renamed), partition, line.expected, event_id, line.via_connector)


def looped(stream: MixedStream, copies: int) -> MixedStream:
    """The stream followed by ``copies - 1`` renamed copies of it, each after the one before in event time."""
    shift = span_ms(stream) + GAP_MS
    lines = list(stream.lines)
    for k in range(1, copies):
        lines += [copy_line(line, f".c{k}", k * shift, stream.partitions) for line in stream.lines]
    return replace(stream, lines=tuple(lines))


def copies_for(lines_per_copy: int, needed: int) -> int:
    """How many copies hold at least ``needed`` lines (at least one)."""
    return max(1, -(-needed // max(lines_per_copy, 1)))


@dataclass
class FreshLines:
    """Valid raw payment lines for the fixed loads: the stream's accepted events with payment and event ids of
    their own and event times after every line of the stream (never late, never a duplicate: each one event)."""

    templates: list[dict[str, Any]]
    next_ms: int  # the next line's event time; it only grows, across loads and runs

    @classmethod
    def after(cls, stream: MixedStream, templates: int = 1_000) -> FreshLines:
        accepted = [json.loads(line.value) for line in stream.lines if line.expected == EVENT]
        latest = max(event_time_ms(doc["event_time"]) for doc in accepted)
        return cls(accepted[-templates:], latest + 60_000)

    def fresh(self, tag: str, count: int) -> list[tuple[bytes, bytes]]:
        """``count`` (key, raw line) pairs keyed by their payment id, as a keyed ingest line is."""
        out = []
        for i in range(count):
            template = self.templates[i % len(self.templates)]
            line = {
                **template, "payment_id": f"{template['payment_id']}.{tag}.{i}",
                "event_id": f"{template['event_id']}.{tag}.{i}", "event_time": format_event_time(self.next_ms),
            }  # fmt: skip
            self.next_ms += 1
            out.append((line["payment_id"].encode(), encode_line(line)))
        return out
