"""Where the demo's time goes: named phases with a start and an end, on one clock.

Phases may overlap (the Spark jobs start while the Connect worker starts; the replay runs while
the outbox sink delivers the last side effects), so each is kept as (start, end) since the demo
began, not as a share of the total. ``PhaseClock`` is the only part that reads a clock;
``phase_lines`` renders the report's table and is pure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Phase:
    name: str
    start_s: float  # since the demo began
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.name, "start_s": round(self.start_s, 1), "seconds": round(self.seconds, 1)}


class PhaseClock:
    """Start and end of each named phase; safe to use from the demo's threads. A phase started
    twice keeps its first start; one never ended is left out of ``phases``."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self.origin = now()
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._ended: dict[str, float] = {}

    def since_origin(self) -> float:
        return self._now() - self.origin

    def start(self, name: str, at: float | None = None) -> None:
        """Phase ``name`` starts now, or at ``at`` (a reading of this clock's ``now``)."""
        since = self.since_origin() if at is None else at - self.origin
        with self._lock:
            self._started.setdefault(name, since)

    def end(self, name: str) -> None:
        at = self.since_origin()
        with self._lock:
            self._started.setdefault(name, at)
            self._ended[name] = at

    def ended(self, name: str) -> bool:
        with self._lock:
            return name in self._ended

    def started(self, name: str) -> bool:
        with self._lock:
            return name in self._started

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.start(name)
        try:
            yield
        finally:
            self.end(name)

    def phases(self) -> list[Phase]:
        """The ended phases in the order they started."""
        with self._lock:
            done = [
                Phase(name, start, self._ended[name]) for name, start in self._started.items() if name in self._ended
            ]
        return sorted(done, key=lambda p: p.start_s)


def phase_lines(phases: Sequence[Mapping[str, Any]], total_s: float | None = None, width: int = 40) -> list[str]:
    """The report's PHASES table: start, length and a bar showing when each phase ran within the total."""
    if not phases:
        return []
    total = total_s or max(p["start_s"] + p["seconds"] for p in phases) or 1.0
    name_width = max(len(p["phase"]) for p in phases)
    lines = [f"{'PHASES':<{name_width}} {'from':>7} {'took':>7}  (overlapping phases ran at the same time)"]
    for p in phases:
        first = min(width - 1, int(p["start_s"] / total * width))
        last = max(first + 1, min(width, round((p["start_s"] + p["seconds"]) / total * width)))
        bar = " " * first + "#" * (last - first)
        lines.append(f"{p['phase']:<{name_width}} {p['start_s']:>6.0f}s {p['seconds']:>6.0f}s  |{bar:<{width}}|")
    return lines
