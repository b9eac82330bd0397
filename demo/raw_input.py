"""Which generated raw lines the demo writes to the ingestion connector's file, and what must become of them. Pure.

The lines come from ``demo.raw_payments.mixed_stream`` (the one truth shared with the enrich
tests). Lines a file cannot carry as generated are held back (``via_connector=False``: no key, a
foreign key, a forced partition, invalid UTF-8 that FileStreamSource would rewrite as U+FFFD, an
empty line), and the report says how many of each class. Everything else goes in, malformed lines
included: ``JsonFieldToKey`` lands a line it cannot key (not JSON, no scalar ``payment_id``) with a
null key and the reason in a header, and enrich dead-letters it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from demo.facts import Expectation

EVENT = "event"


class RawLineLike(Protocol):
    @property
    def value(self) -> bytes: ...
    @property
    def expected(self) -> str: ...
    @property
    def via_connector(self) -> bool: ...


@dataclass(frozen=True)
class DemoInput:
    lines: list[bytes]  # in stream order, each without its newline
    expectation: Expectation
    held_back: dict[str, int]  # expected outcome → lines left out


def demo_input(stream: Iterable[RawLineLike]) -> DemoInput:
    kept = []
    held: Counter[str] = Counter()
    for line in stream:
        if line.via_connector:
            kept.append(line)
        else:
            held[line.expected] += 1
    outcomes = Counter(line.expected for line in kept)
    events = outcomes.pop(EVENT, 0)
    return DemoInput(
        [line.value for line in kept], Expectation(len(kept), events, dict(outcomes)), dict(sorted(held.items()))
    )
