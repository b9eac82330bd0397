"""The steady-state benchmark's figures and tables (pure): what each run measured, the ratios, p99s and targets
across rounds, and the printed report. ``steady_state.py`` measures and calls ``report``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness import median, percentile, print_table
from benchmarks.steady_method import Half, Sample, halves, per_round_row, ratio, ratio_of_medians, target_rows
from benchmarks.targets import Target

IKKAI_EOS = "ikkai exactly-once"
IKKAI_TXN_OFF = "ikkai transactions off"  # the same writer, its producers without transactions: NOT exactly-once
PEER_EOS = "peer exactly_once_v2"
IKKAI_ALOS = "ikkai at-least-once (Spark's sink)"  # another write path: a secondary baseline, by --variants
IKKAI_DATA_SOURCE = "ikkai exactly-once (data source writer)"
IKKAI_BACK_TO_BACK = "ikkai exactly-once (processingTime=0)"
IKKAI_WORKER_PRODUCERS = "ikkai exactly-once (worker producers)"  # the default writer before the executor writer
VARIANTS = (IKKAI_EOS, IKKAI_TXN_OFF, PEER_EOS)  # the default
TRIALS = (IKKAI_DATA_SOURCE, IKKAI_BACK_TO_BACK, IKKAI_WORKER_PRODUCERS)  # by --variants: each against IKKAI_EOS
ALL_VARIANTS = (*VARIANTS, IKKAI_ALOS, *TRIALS)
BASELINES = (IKKAI_TXN_OFF, IKKAI_ALOS)  # what exactly-once is compared with, besides the peer
PHASES = ("triggerExecution", "addBatch", "queryPlanning", "getBatch", "latestOffset", "walCommit", "commitOffsets")
SAMPLE_S = 0.25
MB = 1024 * 1024


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    batches: int
    median_ms: float | None
    p99_ms: float | None
    share: float | None  # of the batches' triggerExecution, summed


def phase_summary(progresses: Sequence[dict[str, Any]]) -> list[PhaseRow]:
    """Per phase of ``durationMs``: median and p99 ms per batch, and its share of all trigger time.

    ``triggerExecution`` is the whole batch; the other phases are parts of it (``addBatch`` is the
    ``foreachBatch`` call: the model and the sink's write). A phase a batch did not report counts 0.
    """
    total = sum(float(p["durationMs"].get("triggerExecution", 0)) for p in progresses)
    rows = []
    for phase in PHASES:
        values = [float(p["durationMs"].get(phase, 0)) for p in progresses]
        rows.append(
            PhaseRow(phase, len(values), median(values), percentile(values, 99), sum(values) / total if total else None)
        )
    return rows


def latency_summary(latencies_ms: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(p50, p99, max) in ms, by nearest rank; Nones for no values."""
    return percentile(latencies_ms, 50), percentile(latencies_ms, 99), max(latencies_ms, default=None)


@dataclass(frozen=True)
class Load:
    label: str  # "200/s", "2,000/s", "50% of max"
    rate: float
    events: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


@dataclass
class Run:
    """One variant in one round: its warm-up, its maximum load (and the window's halves), its fixed loads."""

    round: int
    variant: str
    position: int = 1  # its place in the round's order (rotated)
    warmup_s: float = 0.0
    warmup_events: int = 0
    warmup_end: str = "settled"  # or "cap: ..." and what was missing at --warmup-cap (steady_method.warm_up_end)
    warmup_recent_jit: int | None = None  # the job's JIT compilations over the warm-up's last --jit-quiet seconds
    events: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    compilations: int | None = None  # the job's JVMs' JIT compilations inside the window
    broker_cpu_s: float | None = None  # the broker's CPU inside the window
    broker_compilations: int | None = None
    halves: tuple[Half, Half] | None = None
    peak_pss: int = 0
    loads: list[Load] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)  # ikkai: the measured batches
    new_producers: list[int] = field(default_factory=list)  # ikkai: per measured batch, producers it had to start
    low_load_progress: list[dict[str, Any]] = field(default_factory=list)  # ikkai: the batches at 200/s

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def cpu_s_per_1000(self) -> float | None:
        return self.cpu_s * 1000 / self.events if self.events else None

    @property
    def broker_cpu_s_per_1000(self) -> float | None:
        return self.broker_cpu_s * 1000 / self.events if self.events and self.broker_cpu_s is not None else None

    @property
    def new_producers_per_batch(self) -> float | None:
        return sum(self.new_producers) / len(self.new_producers) if self.new_producers else None

    def load(self, label: str) -> Load | None:
        return next((load for load in self.loads if load.label == label), None)

    def measured(self, window: Sequence[Sample]) -> None:
        """The window's figures, from its first and last sample (the job's and the broker's) and its halves."""
        first, last = window[0], window[-1]
        self.events, self.seconds, self.cpu_s = (
            last.decided - first.decided,
            last.at - first.at,
            last.cpu_s - first.cpu_s,
        )
        self.compilations = growth(first.compilations, last.compilations)
        self.broker_cpu_s = growth(first.broker_cpu_s, last.broker_cpu_s)
        self.broker_compilations = growth(first.broker_compilations, last.broker_compilations)
        self.halves = halves(window)


def growth(a: Any, b: Any) -> Any:
    return None if a is None or b is None else b - a


LOAD_LABELS = ("200/s", "2,000/s", "50% of max")
_BATCH_LINE = re.compile(r": batch \d+ committed ")
_NEW_PRODUCERS = re.compile(r"\((\d+) new producers?\)")


def measured_batches(after_warm_up: Sequence[dict[str, Any]], events: int) -> list[dict[str, Any]]:
    """The window's batches: the progress lines after the warm-up's, until their rows make the window's events (one
    decision per payment). By count, not by time: a batch's line may print after its decisions arrived."""
    batches, rows = [], 0
    for progress in after_warm_up:
        if rows >= events:
            break
        batches.append(progress)
        rows += int(progress.get("numInputRows", 0))
    return batches


def new_producers(stamped: Sequence[tuple[float, str]], start: float, end: float) -> list[int]:
    """Per batch line of the job's log stamped in (start, end]: how many producers it started ("(N new producers)")."""
    counts: list[int] = []
    for at, line in stamped:
        if start < at <= end and _BATCH_LINE.search(line):
            fresh = _NEW_PRODUCERS.search(line)
            counts.append(int(fresh.group(1)) if fresh else 0)
    return counts


class Rounds:
    """The runs by (round, variant): each figure per round, for the rows of the ratio, p99 and target tables."""

    def __init__(self, runs: Sequence[Run]) -> None:
        self.by = {(r.round, r.variant): r for r in runs}
        self.numbers = sorted({r.round for r in runs})
        self.variants = {r.variant for r in runs}

    def rate(self, variant: str) -> list[float | None]:
        return [run.rate if (run := self.by.get((n, variant))) else None for n in self.numbers]

    def cpu(self, variant: str) -> list[float | None]:
        return [run.cpu_s_per_1000 if (run := self.by.get((n, variant))) else None for n in self.numbers]

    def p99(self, variant: str, label: str) -> list[float | None]:
        loads = [run.load(label) if (run := self.by.get((n, variant))) else None for n in self.numbers]
        return [load.p99_ms if load else None for load in loads]


def ratio_rows(runs: Sequence[Run]) -> list[list[object]]:
    """Throughput and CPU per event, per round with their median and spread: ikkai exactly-once against the peer
    and against each baseline that ran; each trial that ran against ikkai exactly-once (p99 at each load too)."""
    rounds = Rounds(runs)
    rows: list[list[object]] = []

    def pair(a: str, b: str, figure: Callable[[str], list[float | None]]) -> list[float | None]:
        return [ratio(x, y) for x, y in zip(figure(a), figure(b), strict=True)]

    for other in (PEER_EOS, *BASELINES):
        if other in rounds.variants:
            rows.append(per_round_row(f"throughput {IKKAI_EOS} / {other}", pair(IKKAI_EOS, other, rounds.rate)))
            rows.append(per_round_row(f"CPU per event {IKKAI_EOS} / {other}", pair(IKKAI_EOS, other, rounds.cpu)))
    for trial in (t for t in TRIALS if t in rounds.variants):
        rows.append(per_round_row(f"throughput {trial} / {IKKAI_EOS}", pair(trial, IKKAI_EOS, rounds.rate)))
        rows.append(per_round_row(f"CPU per event {trial} / {IKKAI_EOS}", pair(trial, IKKAI_EOS, rounds.cpu)))
        for label in LOAD_LABELS:
            p99s = pair(trial, IKKAI_EOS, lambda v, label=label: rounds.p99(v, label))  # type: ignore[misc]
            rows.append(per_round_row(f"p99 at {label} {trial} / {IKKAI_EOS}", p99s))
    return rows


def p99_rows(runs: Sequence[Run]) -> list[list[object]]:
    """Per load: each variant's p99 per round (median, spread), then exactly-once's against the peer's from the
    medians, with the range over the rounds (the peer's p99 moves from run to run: one round's ratio misleads)."""
    rounds = Rounds(runs)
    rows: list[list[object]] = []
    for label in LOAD_LABELS:
        for variant in (v for v in ALL_VARIANTS if v in rounds.variants):
            rows.append([*per_round_row(f"p99 ms at {label}, {variant}", rounds.p99(variant, label)), None])
        if {IKKAI_EOS, PEER_EOS} <= rounds.variants:
            value, around = ratio_of_medians(rounds.p99(IKKAI_EOS, label), rounds.p99(PEER_EOS, label))
            rows.append([f"p99 at {label}, {IKKAI_EOS} / {PEER_EOS} (medians)", *[None] * len(rounds.numbers), value,
                         None, around])  # fmt: skip
    return rows


P99_TARGET_S = 0.6
TARGETS = (
    Target(f"throughput {IKKAI_EOS} / {PEER_EOS}", 0.7, at_most=False),
    Target(f"CPU per event {IKKAI_EOS} / {PEER_EOS}", 1.5, at_most=True),
    Target(f"p99 s at 200/s, {IKKAI_EOS}", P99_TARGET_S, at_most=True),
)


def infer_targets(runs: Sequence[Run]) -> list[list[object]]:
    """Infer's targets against the medians: the ratios to the warmed peer (per round, median and spread), and
    exactly-once's p99 at 200/s in seconds (median over the rounds, spread)."""
    measured: dict[str, tuple[float | None, object]] = {}
    for row in ratio_rows(runs):
        measured[str(row[0])] = (row[-2], row[-1])  # type: ignore[assignment]
    p99s = [v / 1000 for v in Rounds(runs).p99(IKKAI_EOS, "200/s") if v is not None]
    spread = max(p99s) - min(p99s) if p99s else None
    measured[TARGETS[2].what] = (median(p99s), spread)
    return target_rows(TARGETS, measured)


def report(runs: Sequence[Run], broker: BrokerWarmUp | None = None, load: tuple[float, float] | None = None) -> None:
    """The tables: the broker's warm-up, the rounds' order, each run's warm-up, maximum load and halves, fixed
    loads, p99 per round, ratios per round, infer's targets, where a batch's time goes."""
    if broker is not None:
        print_table(
            "the broker warmed first: payments produced in transactions, read by a read_committed consumer",
            ["EVENTS", "SECONDS", "EVENTS/S", "BROKER CPU S / 1000 EVENTS", "BROKER JIT COMPILATIONS"],
            [[broker.events, broker.seconds, broker.events / broker.seconds if broker.seconds else None,
              broker.cpu_s * 1000 / broker.events if broker.cpu_s is not None and broker.events else None,
              broker.compilations]],
        )  # fmt: skip
    numbers = sorted({r.round for r in runs})
    order = [[n, *(r.variant for r in sorted((r for r in runs if r.round == n), key=lambda r: r.position))]
             for n in numbers]  # fmt: skip
    print_table("the rounds' order (rotated)", ["ROUND", *(f"#{i + 1}" for i in range(max(map(len, order)) - 1))],
                order)  # fmt: skip
    print_table(
        "warm-up: until the events and a settled JIT (or the cap), excluded from the window",
        ["ROUND", "WHAT", "WARM-UP S", "WARM-UP EVENTS", "ENDED BY", "JIT IN ITS LAST QUIET S",
         "JIT COMPILATIONS IN WINDOW", "BROKER JIT COMPILATIONS IN WINDOW"],
        [[r.round, r.variant, r.warmup_s, r.warmup_events, r.warmup_end, r.warmup_recent_jit, r.compilations,
          r.broker_compilations] for r in runs],
    )  # fmt: skip
    print_table(
        "steady state, maximum load (warm-up excluded and given apart)",
        ["ROUND", "WHAT", "EVENTS", "SECONDS", "EVENTS/S", "CPU S / 1000 EVENTS", "BROKER CPU S / 1000 EVENTS",
         "PEAK PSS MB", "NEW PRODUCERS / BATCH"],
        [[r.round, r.variant, r.events, r.seconds, r.rate, r.cpu_s_per_1000, r.broker_cpu_s_per_1000,
          r.peak_pss / MB, r.new_producers_per_batch] for r in runs],
    )  # fmt: skip
    print_table(
        "the window's two halves: a window still warming is faster and cheaper in its second half",
        ["ROUND", "WHAT", "EVENTS/S 1ST", "EVENTS/S 2ND", "2ND / 1ST", "CPU S / 1000 1ST", "CPU S / 1000 2ND",
         "2ND / 1ST", "JIT 1ST", "JIT 2ND"],
        [[r.round, r.variant, a.rate, b.rate, ratio(b.rate, a.rate), a.cpu_s_per_1000, b.cpu_s_per_1000,
          ratio(b.cpu_s_per_1000, a.cpu_s_per_1000), a.compilations, b.compilations]
         for r in runs if r.halves for a, b in [r.halves]],
    )  # fmt: skip
    print_table(
        "steady state, fixed loads: produced -> decision received by a read_committed consumer (arrival time)",
        ["ROUND", "WHAT", "LOAD", "EVENTS/S", "EVENTS", "P50 MS", "P99 MS", "MAX MS"],
        [[r.round, r.variant, load.label, load.rate, load.events, load.p50_ms, load.p99_ms, load.max_ms]
         for r in runs for load in r.loads],
    )  # fmt: skip
    rounds = [f"ROUND {n}" for n in numbers]
    print_table("p99 per round, and exactly-once against the peer from the medians", ["", *rounds, "MEDIAN", "SPREAD",
                "RANGE"], p99_rows(runs))  # fmt: skip
    print_table("steady state: ratios per round", ["", *rounds, "MEDIAN", "SPREAD"], ratio_rows(runs))
    idle = (
        "" if load is None else f" (load average {load[0]:.2f} before, {load[1]:.2f} after: verdicts count when idle)"
    )
    print_table(f"infer's targets, from the medians{idle}", ["TARGET", "MEASURED", "SPREAD / RANGE", "LIMIT", ""],
                infer_targets(runs))  # fmt: skip
    for variant in (IKKAI_EOS, *BASELINES, *TRIALS):
        for where, batches in (
            ("measured batches", [p for r in runs if r.variant == variant for p in r.progress]),
            (f"batches at {LOAD_LABELS[0]}", [p for r in runs if r.variant == variant for p in r.low_load_progress]),
        ):
            if not batches:
                continue
            rows_per_batch = median([float(p.get("numInputRows", 0)) for p in batches])
            print_table(
                f"where a batch's time goes, {variant}: durationMs of {len(batches)} {where}, all rounds "
                f"(median {rows_per_batch:,.0f} rows per batch)",
                ["PHASE", "BATCHES", "MEDIAN MS", "P99 MS", "SHARE OF TRIGGER TIME"],
                [[row.phase, row.batches, row.median_ms, row.p99_ms, row.share] for row in phase_summary(batches)],
            )


@dataclass(frozen=True)
class BrokerWarmUp:
    events: int
    seconds: float
    cpu_s: float | None  # the broker's, during the pass
    compilations: int | None
