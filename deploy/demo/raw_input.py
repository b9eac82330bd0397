"""Which generated raw lines the demo writes to the ingestion connector's file, and what must become of them. Pure.

The lines come from ``spark_jobs.raw_payments.mixed_stream`` (the one truth shared with the enrich
tests). Two kinds are held back, and the report says how many of each class:

- lines a file cannot carry as generated (``via_connector=False``: no key, a foreign key, a
  forced partition, invalid UTF-8, an empty line);
- lines the ingestion connector's ``JsonFieldToKey`` cannot key: not JSON, or JSON without a
  scalar ``payment_id``. It throws on them and the bundle runs with ``errors.tolerance=none``,
  so one such line would fail the connector's task. ``connector_can_key`` mirrors its rule.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from deploy.demo.facts import Expectation

EVENT = "event"


class RawLineLike(Protocol):
    @property
    def value(self) -> bytes: ...
    @property
    def expected(self) -> str: ...
    @property
    def via_connector(self) -> bool: ...


def connector_can_key(value: bytes, field: str = "payment_id") -> bool:
    """Whether JsonFieldToKey finds a scalar ``field`` at the top of this line's first JSON value."""
    text = value.decode("utf-8", errors="replace").lstrip()
    try:
        root, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return False
    return isinstance(root, dict) and root.get(field) is not None and not isinstance(root[field], dict | list)


@dataclass(frozen=True)
class DemoInput:
    lines: list[bytes]  # in stream order, each without its newline
    expectation: Expectation
    held_back: dict[str, int]  # expected outcome → lines left out


def demo_input(stream: Iterable[RawLineLike]) -> DemoInput:
    kept = []
    held: Counter[str] = Counter()
    for line in stream:
        if line.via_connector and connector_can_key(line.value):
            kept.append(line)
        else:
            held[line.expected] += 1
    outcomes = Counter(line.expected for line in kept)
    events = outcomes.pop(EVENT, 0)
    return DemoInput(
        [line.value for line in kept], Expectation(len(kept), events, dict(outcomes)), dict(sorted(held.items()))
    )
