"""The steady-state method's pure parts: when a warm-up ends, where a window starts and ends, its two halves,
a figure's median and spread across rounds, and a target's verdict.

``steady_state.py`` measures; this module only decides from what it sampled. No clock, no Kafka, no JVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from benchmarks.harness import median
from benchmarks.jit_activity import compilations_settled
from benchmarks.targets import Target, verdict


class Sample(NamedTuple):
    """What the sampler read at one moment: the job's decisions so far, its process tree's CPU seconds and its JVMs'
    JIT compilations so far, and the broker's CPU seconds and compilations (None: not known)."""

    at: float  # monotonic seconds
    decided: int
    cpu_s: float
    compilations: int | None = None
    broker_cpu_s: float | None = None
    broker_compilations: int | None = None


@dataclass(frozen=True)
class WarmUp:
    """When a warm-up ends: ``events`` decided at least, and the job's JIT settled (fewer than ``threshold``
    compilations over the last ``quiet_s`` seconds), or ``cap_s`` seconds after the job's start (reported)."""

    events: int = 300_000
    quiet_s: float = 10.0
    threshold: int = 50
    cap_s: float = 300.0


def warmed_up(samples: Sequence[Sample], rule: WarmUp) -> bool:
    """Whether the samples since the job's start (in time order) end a warm-up by ``rule``, its cap aside."""
    if not samples or samples[-1].decided - samples[0].decided < rule.events:
        return False
    return compilations_settled([(s.at, s.compilations) for s in samples], quiet_s=rule.quiet_s,
                                threshold=rule.threshold)  # fmt: skip


def recent_compilations(samples: Sequence[Sample], quiet_s: float) -> int | None:
    """The job's JIT compilations over the last ``quiet_s`` seconds of the samples (None: not known that long)."""
    known = [s for s in samples if s.compilations is not None]
    before = [s for s in known if s.at <= known[-1].at - quiet_s] if known else []
    if not before:
        return None
    return int(known[-1].compilations or 0) - int(before[-1].compilations or 0)


def warm_up_end(samples: Sequence[Sample], rule: WarmUp, capped: bool) -> str:
    """How a warm-up ended: 'settled', or 'cap: ' and what was still missing at the cap."""
    if not capped:
        return "settled"
    events = samples[-1].decided - samples[0].decided if samples else 0
    missing = [f"{events:,} of {rule.events:,} events"] if events < rule.events else []
    recent = recent_compilations(samples, rule.quiet_s)
    if recent is None or recent >= rule.threshold:
        missing.append("JIT not settled")
    return "cap: " + ", ".join(missing) if missing else "cap"


def last_rise(samples: Sequence[Sample]) -> Sample:
    """The first sample with the last sample's count: a window's end trimmed to its last decision.

    ikkai's decisions arrive a batch at a time; a window ending between two batches would count the
    time of a batch whose decisions it does not count.
    """
    final = samples[-1].decided
    return next(s for s in samples if s.decided == final)


def window_start(samples: Sequence[Sample], decided: int) -> Sample | None:
    """The first sample that counts ``decided`` decisions: a window's start at the warm-up's last decision.

    The warm-up ends with a batch's progress line; the read_committed consumer sees that batch's decisions
    a little later. A window starting at the line would count them without the time of their batch; it
    starts where the count reaches them instead.
    """
    return next((s for s in samples if s.decided >= decided), None)


@dataclass(frozen=True)
class Half:
    """One half of a measured window: a still-warming job is faster and cheaper in its second."""

    events: int
    seconds: float
    cpu_s: float
    compilations: int | None  # the job's JVMs' JIT compilations in it

    @classmethod
    def between(cls, start: Sample, end: Sample) -> Half:
        jit = None if start.compilations is None or end.compilations is None else end.compilations - start.compilations
        return cls(end.decided - start.decided, end.at - start.at, end.cpu_s - start.cpu_s, jit)

    @property
    def rate(self) -> float | None:
        return self.events / self.seconds if self.seconds > 0 else None

    @property
    def cpu_s_per_1000(self) -> float | None:
        return self.cpu_s * 1000 / self.events if self.events else None


def halves(window: Sequence[Sample]) -> tuple[Half, Half]:
    """The window's first and second half, cut at the last decision before its middle in time (a batch's
    decisions arrive together: a cut between two arrivals would give one half time without its decisions)."""
    start, end = window[0], window[-1]
    middle = (start.at + end.at) / 2
    cut = last_rise([s for s in window if s.at <= middle])
    return Half.between(start, cut), Half.between(cut, end)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def spread(values: Sequence[float]) -> float | None:
    return max(values) - min(values) if values else None


def per_round_row(label: str, values: Sequence[float | None]) -> list[object]:
    """``label``, each round's value, their median and spread (max - min) over the rounds that have one."""
    known = [v for v in values if v is not None]
    return [label, *values, median(known), spread(known)]


def ratio_of_medians(ours: Sequence[float | None], theirs: Sequence[float | None]) -> tuple[float | None, str]:
    """median(ours) / median(theirs), and its range over the rounds: lowest of ours over highest of theirs to
    highest over lowest. Figures that move from run to run (the peer's p99) are compared by their medians, not
    round by round, and the range says how far the ratio may be from it."""
    a, b = [v for v in ours if v is not None], [v for v in theirs if v is not None]
    if not a or not b or not min(b):
        return None, "-"
    return ratio(median(a), median(b)), f"{min(a) / max(b):.2f} - {max(a) / min(b):.2f}"


def target_rows(targets: Sequence[Target], measured: dict[str, tuple[float | None, object]]) -> list[list[object]]:
    """Per target: what, the measured median, its spread or range, the limit, the verdict. ``measured`` maps a
    target's ``what`` to (median, spread); a target with no figure is 'not measured'."""
    rows: list[list[object]] = []
    for target in targets:
        value, around = measured.get(target.what, (None, None))
        rows.append([target.what, value, around, target.limit_text, verdict(target, value)])
    return rows
