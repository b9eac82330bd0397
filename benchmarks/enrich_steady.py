"""The enrich job at steady state, alone and with infer running on its output: one run, side by side.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL), publishes master data and lands a seeded raw stream in an ``ingest.payments`` topic of
each run's own: ``raw_payments.mixed_stream`` of ``--payments`` payments (valid payments, status updates,
retries, late and malformed lines), **looped** with fresh keys until it holds the warm-up and the window
(each copy's payment and event ids get a suffix of their own and its event times come after the copy
before, so deduplication and the watermark see new payments, not replays). Per round, each variant runs
continuously over the backlog into fresh topics, the variants' order rotated by one every round (round 1
A B C, round 2 B C A, ...: no variant always meets the freshest broker):

* ``enrich exactly-once``: ``python -m spark_jobs.enrich --continuous --progress`` (the
  ``TransactionalBatchWriter``, its default batch bound);
* ``enrich at-least-once``: the same with ``--mode at-least-once``;
* ``enrich + infer exactly-once``: both jobs at once, as their own processes on the same 2 cores, infer
  reading what enrich commits (``events.payments`` → ``decisions.fraud`` + ``outbox.requests``).

**Warm-up** (excluded, given apart): until enrich has read ``--warmup-lines`` raw lines *and* the job's JVMs
stopped compiling (``jit_activity.compilations_settled``: fewer than ``--settle-max`` new compilations over the
last ``--settle-span`` s, from each JVM's performance-data file, what ``jstat -compiler`` reads), or
``--warmup-max-s`` passed since the job's start (then the row says "not settled").
**Window**: from the arrival of the warm-up's last progress line to the first line at or past ``--seconds``
or by which ``--lines`` more raw lines were read, whichever comes first; a window that ends because the
backlog ran out first is marked "short". Raw lines/s = the window's ``numInputRows`` / its seconds (a batch's
line arrives after its transactions committed); the window's two halves are given apart (a rate or a CPU per
line that still moves between them was not steady). CPU = user + system of the job process trees
(``/proc``) over the same stretch, in µs per raw line; memory = peak PSS of the trees over the run;
compilations = how many the JVMs made inside the window. For enrich + infer, decided/s is what infer decided.

Then, once the job has read the whole backlog, **fixed loads** as in ``steady_state.py``: 200/s, 2,000/s and
50% of the run's own maximum, ``--load-seconds`` each, of fresh valid payment lines (payment ids of their
own, event times after the whole stream's: each becomes one event); p50/p99/max from a line's produce to its
event (enrich alone) or its decision (enrich + infer) arriving at a read_committed consumer. The targets
table ends the output: enrich >= 10,000 lines/s, raw line → decision p99 at 200/s <= 1.5 s (medians).

Usage: python -m benchmarks.enrich_steady [--payments 150000] [--seconds 60] [--lines 400000] [--rounds 3]
       [--warmup-lines 300000] [--settle-span 10] [--settle-max 50] [--warmup-max-s 300]
       [--load-seconds 20] [--batch N] [--partitions 2] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.enrich_infer import SEED, land_raw_stream
from benchmarks.harness import (
    JobProcess,
    bench_stack,
    median,
    print_table,
    proc_stats,
    process_tree,
    python_module,
    rotated,
)
from benchmarks.jit_activity import compilations, compilations_settled
from benchmarks.looped_stream import FreshLines, copies_for, looped
from benchmarks.steady_state import LOAD_LABELS, Load, fixed_load, phase_summary
from benchmarks.targets import Target, print_targets
from demo.raw_payments import MixedStream, mixed_stream
from ikkai.contract.kafka import KafkaContext
from spark_jobs.progress import parse_progress

ENRICH_EOS = "enrich exactly-once"
ENRICH_ALOS = "enrich at-least-once"
PIPELINE = "enrich + infer exactly-once"
VARIANTS = (ENRICH_EOS, ENRICH_ALOS, PIPELINE)
ENRICH_RATE = Target("enrich raw lines/s", 10_000, at_most=False)
RAW_TO_DECISION_P99 = Target("raw line -> decision p99 at 200/s", 1.5, at_most=True, unit="s")
SAMPLE_S = 0.25
MB = 1024 * 1024


# ---------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class Window:
    """The measured stretch of one job's progress: from ``start`` (exclusive) to ``end`` (inclusive)."""

    start: float
    end: float
    rows: int
    batches: list[dict[str, Any]]

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def measured_window(progress: Sequence[tuple[float, dict[str, Any]]], warmup: int, until: float) -> Window | None:
    """The batches after the first ``warmup`` whose progress line arrived by ``until``; None if there are none.

    The window starts at the warm-up's last line and ends at the last line counted: a window ending
    between two lines would count the time of a batch whose rows it does not count.
    """
    if len(progress) <= warmup or warmup < 1:
        return None
    start = progress[warmup - 1][0]
    counted = [(at, p) for at, p in progress[warmup:] if at <= until]
    if not counted:
        return None
    rows = sum(int(p.get("numInputRows", 0)) for _, p in counted)
    return Window(start, counted[-1][0], rows, [p for _, p in counted])


@dataclass(frozen=True)
class Half:
    """One half of a window: its rows and seconds (the split is the first progress line at or past the middle)."""

    start: float
    end: float
    rows: int

    @property
    def rate(self) -> float:
        return self.rows / (self.end - self.start) if self.end > self.start else 0.0


def halves(progress: Sequence[tuple[float, dict[str, Any]]], start: float, end: float) -> tuple[Half, Half] | None:
    """The window (start, end] cut at its first progress line at or past the middle; None when that line is its
    last (one batch cannot be halved)."""
    inside = [at for at, _ in progress if start < at <= end]
    split = next((at for at in inside if at >= (start + end) / 2), None)
    if split is None or split >= end:
        return None
    return (Half(start, split, rows_between(progress, start, split)),
            Half(split, end, rows_between(progress, split, end)))  # fmt: skip


def window_end_reason(rows: int, seconds: float, args_lines: int, args_seconds: float) -> str:
    """Why the window ended: its seconds, its lines, or "short" (the backlog ran out before either)."""
    if seconds >= args_seconds:
        return f"{args_seconds:g} s"
    if rows >= args_lines:
        return f"{args_lines:,} lines"
    return "short"


def rows_between(progress: Sequence[tuple[float, dict[str, Any]]], start: float, end: float) -> int:
    """Input rows of the batches whose progress line arrived in (start, end]."""
    return sum(int(p.get("numInputRows", 0)) for at, p in progress if start < at <= end)


def cpu_between(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds spent between two instants, from (time, cumulative CPU) samples: the nearest at or after each."""

    def at(t: float) -> float:
        return next((cpu for s, cpu in samples if s >= t), samples[-1][1])

    return at(end) - at(start) if samples else 0.0


def warm_up_over(
    lines_read: int,
    jit: Sequence[tuple[float, int | None]],
    now: float,
    give_up_at: float,
    args: argparse.Namespace,
    lines_in_stream: int | None = None,
) -> bool:
    """The warm-up is over once ``args.warmup_lines`` raw lines were read and the JVMs' JIT settled (fewer than
    ``args.settle_max`` compilations over the last ``args.settle_span`` s), or, with the lines read, at
    ``give_up_at`` or when no more than the window's ``args.lines`` are left of ``lines_in_stream`` (the run
    then says "not settled"): a warm-up that waits for the JIT must not read the window's lines too."""
    if lines_read < args.warmup_lines:
        return False
    if lines_in_stream is not None and lines_in_stream - lines_read <= args.lines:
        return True
    return now > give_up_at or compilations_settled(jit, quiet_s=args.settle_span, threshold=args.settle_max)


def compiled_between(jit: Sequence[tuple[float, int | None]], start: float, end: float) -> int | None:
    """JIT compilations from (time, compilations so far) samples: the first known at or after ``start`` to the first
    at or after ``end`` (the last known if none is); None when no count is known."""
    known = [(at, count) for at, count in jit if count is not None]
    first = next((count for at, count in known if at >= start), None)
    last = next((count for at, count in known if at >= end), known[-1][1] if known else None)
    return None if first is None or last is None else last - first


@dataclass
class Run:
    round: int
    variant: str
    warmup_s: float = 0.0
    warmup_lines: int = 0
    settled: bool = True  # the JVMs stopped compiling before the warm-up's end
    lines: int = 0
    seconds: float = 0.0
    ended_by: str = ""  # "60 s", "400,000 lines" or "short"
    compilations: int | None = None  # the JVMs' compilations inside the window
    halves: tuple[Half, Half] | None = None
    halves_cpu_s: tuple[float, float] | None = None
    decided: int | None = None  # enrich + infer: events infer decided in the window
    cpu_s: float = 0.0
    peak_pss: int = 0
    batches: list[dict[str, Any]] = field(default_factory=list)
    loads: list[Load] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.lines / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_line(self) -> float | None:
        return self.cpu_s * 1e6 / self.lines if self.lines else None

    def half_rates(self) -> tuple[float | None, float | None]:
        return (self.halves[0].rate, self.halves[1].rate) if self.halves else (None, None)

    def half_cpu_us(self) -> tuple[float | None, float | None]:
        if not self.halves or not self.halves_cpu_s:
            return None, None
        return tuple(cpu * 1e6 / h.rows if h.rows else None  # type: ignore[return-value]
                     for cpu, h in zip(self.halves_cpu_s, self.halves, strict=True))  # fmt: skip


def enrich_targets(runs: Sequence[Run]) -> list[tuple[Target, float | None, str]]:
    """The two enrich targets against this run's medians: enrich exactly-once's lines/s, enrich + infer's p99."""
    rate = median([r.rate for r in runs if r.variant == ENRICH_EOS and r.lines])
    p99s = [load.p99_ms / 1000 for r in runs if r.variant == PIPELINE
            for load in r.loads if load.label == LOAD_LABELS[0] and load.p99_ms is not None]  # fmt: skip
    return [
        (ENRICH_RATE, rate, f"median of {ENRICH_EOS}'s windows"),
        (RAW_TO_DECISION_P99, median(p99s), f"median p99 of {PIPELINE} at 200/s"),
    ]


def report(runs: Sequence[Run]) -> None:
    print_table(
        "enrich at steady state (warm-up excluded and given apart; the window's halves side by side)",
        ["ROUND", "WHAT", "WARM-UP S", "WARM-UP LINES", "JIT", "LINES", "SECONDS", "ENDED BY", "LINES/S",
         "1ST HALF", "2ND HALF", "DECIDED/S", "CPU US/LINE", "1ST HALF", "2ND HALF", "COMPILATIONS",
         "PEAK PSS MB"],
        [[r.round, r.variant, r.warmup_s, r.warmup_lines, "settled" if r.settled else "not settled", r.lines,
          r.seconds, r.ended_by, r.rate, *r.half_rates(),
          None if r.decided is None else r.decided / r.seconds if r.seconds else None, r.cpu_us_per_line,
          *r.half_cpu_us(), r.compilations, r.peak_pss / MB] for r in runs],
    )  # fmt: skip
    print_table(
        "enrich, fixed loads: produced raw line -> its event (enrich) or decision (enrich + infer) received by a "
        "read_committed consumer",
        ["ROUND", "WHAT", "LOAD", "LINES/S", "LINES", "P50 MS", "P99 MS", "MAX MS"],
        [[r.round, r.variant, load.label, load.rate, load.events, load.p50_ms, load.p99_ms, load.max_ms]
         for r in runs for load in r.loads],
    )  # fmt: skip
    rounds = sorted({r.round for r in runs})
    by = {(r.round, r.variant): r for r in runs}

    def ratio(n: int, a: str, b: str) -> float | None:
        x, y = by.get((n, a)), by.get((n, b))
        return x.rate / y.rate if x and y and y.rate else None

    rows = []
    for label, a, b in ((f"{ENRICH_EOS} / {ENRICH_ALOS}", ENRICH_EOS, ENRICH_ALOS),
                        (f"{PIPELINE} / {ENRICH_EOS} (enrich's lines/s)", PIPELINE, ENRICH_EOS)):  # fmt: skip
        values = [ratio(n, a, b) for n in rounds]
        known = [v for v in values if v is not None]
        rows.append([label, *values, median(known), max(known) - min(known) if known else None])
    print_table("enrich: ratios per round", ["", *(f"ROUND {n}" for n in rounds), "MEDIAN", "SPREAD"], rows)
    for variant in (ENRICH_EOS, ENRICH_ALOS):
        batches = [p for r in runs if r.variant == variant for p in r.batches]
        if batches:
            per_batch = median([float(p.get("numInputRows", 0)) for p in batches])
            print_table(
                f"where a batch's time goes, {variant}: durationMs of {len(batches)} measured batches, all rounds "
                f"(median {per_batch:,.0f} rows per batch)",
                ["PHASE", "BATCHES", "MEDIAN MS", "P99 MS", "SHARE OF TRIGGER TIME"],
                [[row.phase, row.batches, row.median_ms, row.p99_ms, row.share] for row in phase_summary(batches)],
            )
    print_targets("enrich: targets (medians of this run)", enrich_targets(runs))


# ---------------------------------------------------------------- I/O: the jobs


class TreeSampler:
    """Every ``SAMPLE_S``, of every job's process tree together: (monotonic time, CPU seconds) in ``samples`` and
    (monotonic time, the JVMs' JIT compilations so far, None if unknown) in ``jit``; one pass of /proc each."""

    def __init__(self, jobs: Sequence[JobProcess]) -> None:
        self.samples: list[tuple[float, float]] = []
        self.jit: list[tuple[float, int | None]] = []
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.wait(SAMPLE_S):
                stats = proc_stats()
                tree = {pid for job in jobs for pid in process_tree(job.process.pid, stats) if pid in stats}
                at = time.monotonic()
                self.samples.append((at, sum(stats[pid].own_cpu_s + stats[pid].children_cpu_s for pid in tree)))
                self.jit.append((at, compilations(pid for pid in tree if stats[pid].name == "java")))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def settled(self, quiet_s: float, threshold: int) -> bool:
        return compilations_settled(list(self.jit), quiet_s=quiet_s, threshold=threshold)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def one_run(
    cluster: KafkaContext,
    stream: MixedStream,
    fresh: FreshLines,
    variant: str,
    args: argparse.Namespace,
    scratch: Path,
    n: int,
) -> Run:
    from benchmarks.infer_throughput import DecisionWatch
    from stack.kit.topic_io import create_topic, unique

    ingest, merchants, customers, lines = land_raw_stream(cluster, args.payments, args.partitions, stream)
    name = unique("steady").replace(".", "-")
    topics = {kind: create_topic(cluster, f"{kind}.{name}", args.partitions)
              for kind in ("events", "dlq-enrich", "decisions", "outbox", "dlq-infer")}  # fmt: skip
    extra = ["--max-offsets-per-trigger", str(args.batch)] if args.batch else []
    mode = "at-least-once" if variant == ENRICH_ALOS else "exactly-once"
    command, cwd, env = python_module(
        "spark_jobs.enrich", "--progress", "--continuous", "--bootstrap", cluster.bootstrap_servers,
        "--checkpoint", str(scratch / f"enrich-{name}"), "--query", f"enrich-{name}", "--input", ingest,
        "--output", topics["events"], "--dlq", topics["dlq-enrich"], "--merchants", merchants,
        "--customers", customers, "--mode", mode, *extra,
    )  # fmt: skip
    jobs = [JobProcess(command, cwd=cwd, env=env, start_marker=", mode ")]
    if variant == PIPELINE:
        command, cwd, env = python_module(
            "spark_jobs.infer", "--progress", "--continuous", "--bootstrap", cluster.bootstrap_servers,
            "--checkpoint", str(scratch / f"infer-{name}"), "--query", f"infer-{name}", "--input", topics["events"],
            "--decisions", topics["decisions"], "--outbox", topics["outbox"], "--dlq", topics["dlq-infer"],
        )  # fmt: skip
        jobs.append(JobProcess(command, cwd=cwd, env=env))
    enrich = jobs[0]
    sampler = TreeSampler(jobs)
    run = Run(n, variant)
    try:
        enrich.wait_started()

        def enrich_progress() -> list[tuple[float, dict[str, Any]]]:
            return parse_progress(enrich.stamped)

        def read() -> int:
            return sum(int(p.get("numInputRows", 0)) for _, p in enrich_progress())

        assert enrich.started is not None
        give_up_settling = enrich.started + args.warmup_max_s

        _await(lambda: warm_up_over(read(), list(sampler.jit), time.monotonic(), give_up_settling, args, lines),
               jobs, args.warmup_max_s + 900, f"{variant} warm-up")  # fmt: skip
        run.settled = sampler.settled(args.settle_span, args.settle_max)
        warm = enrich_progress()
        t0 = warm[-1][0]
        run.warmup_s = t0 - enrich.started
        run.warmup_lines = sum(int(p.get("numInputRows", 0)) for _, p in warm)

        def window_done() -> bool:
            progress = enrich_progress()
            last = progress[-1][0]
            drained = sum(int(p.get("numInputRows", 0)) for _, p in progress) >= lines
            return drained or last - t0 >= args.seconds or rows_between(progress, t0, last) >= args.lines

        _await(window_done, jobs, args.seconds + 900, f"{variant} measurement")
        progress = enrich_progress()
        window = measured_window(progress, len(warm), time.monotonic())  # up to the line that ended it
        if window is None:
            raise SystemExit(
                f"{variant}: {len(progress)} batches in all, none measured after the {len(warm)} of the warm-up: "
                f"raise --payments\n{enrich.tail()}"
            )
        run.lines, run.seconds, run.batches = window.rows, window.seconds, window.batches
        run.ended_by = window_end_reason(run.lines, run.seconds, args.lines, args.seconds)
        run.cpu_s = cpu_between(sampler.samples, window.start, window.end)
        run.compilations = compiled_between(sampler.jit, window.start, window.end)
        run.halves = halves(progress, window.start, window.end)
        if run.halves:
            run.halves_cpu_s = tuple(cpu_between(sampler.samples, h.start, h.end)  # type: ignore[assignment]
                                     for h in run.halves)  # fmt: skip
        if variant == PIPELINE:
            run.decided = rows_between(parse_progress(jobs[1].stamped), window.start, window.end)
        print(f"round {n}, {variant}: {run.rate:,.0f} raw lines/s after {run.warmup_s:.1f} s of warm-up "
              f"({'settled' if run.settled else 'not settled'})", file=sys.stderr, flush=True)  # fmt: skip

        def read_all() -> bool:
            return sum(int(p.get("numInputRows", 0)) for _, p in enrich_progress()) >= lines

        _await(read_all, jobs, 1800, f"{variant} reading the whole backlog")
        watch = DecisionWatch(cluster, topics["decisions"] if variant == PIPELINE else topics["events"])
        try:
            _await(lambda: settled(watch), jobs, 1800, f"{variant} writing the whole backlog")  # infer, too
            for label, rate in zip(LOAD_LABELS, (200.0, 2000.0, run.rate / 2), strict=True):
                tag = f"r{n}{VARIANTS.index(variant)}{len(run.loads)}"
                run.loads.append(fixed_load(cluster, ingest, watch, enrich, fresh, label, rate, args, tag))
                print(f"round {n}, {variant}, {label}: p99 {run.loads[-1].p99_ms:.0f} ms", file=sys.stderr, flush=True)
        finally:
            watch.close()
    finally:
        sampler.stop()
        for job in jobs:
            job.stop()
    run.peak_pss = sum(job.memory.peak for job in jobs)
    return run


def settled(watch: Any, quiet_s: float = 2.0) -> bool:
    """True once the watched topic got nothing new for ``quiet_s``: the jobs wrote what they read."""
    before = watch.count
    time.sleep(quiet_s)
    return bool(watch.count == before and watch.count > 0)


def _await(condition: Any, jobs: Sequence[JobProcess], timeout: float, what: str) -> None:
    give_up_at = time.monotonic() + timeout
    while not condition():
        for job in jobs:
            if job.process.poll() is not None:
                raise SystemExit(f"{what}: a job exited:\n{job.tail()}")
        if time.monotonic() > give_up_at:
            raise SystemExit(f"{what}: timed out after {timeout:.0f} s:\n{jobs[0].tail()}")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=150_000, help="payments in one copy of the raw stream")
    parser.add_argument("--seconds", type=float, default=60, help="the window ends after this many seconds ...")
    parser.add_argument("--lines", type=int, default=400_000, help="... or this many raw lines, whichever is first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-lines", type=int, default=300_000, help="raw lines read before the window")
    parser.add_argument("--settle-span", type=float, default=10, help="JIT settled: over the last this many s ...")
    parser.add_argument("--settle-max", type=int, default=50, help="... fewer than this many new compilations")
    parser.add_argument("--warmup-max-s", type=float, default=300, help="end an unsettled warm-up after this")
    parser.add_argument("--batch", type=int, help="maxOffsetsPerTrigger [default: the job's own]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--load-seconds", type=float, default=20, help="each fixed load: how long")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 1 round, 11,652 lines, 15 s or 6,000 lines, 3 s loads"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.payments, args.seconds, args.lines, args.batch = 1, 3_000, 15, 6_000, args.batch or 2_000
        args.warmup_lines, args.warmup_max_s, args.settle_span, args.load_seconds = 4_000, 60, 6, 3
    started = time.monotonic()
    runs: list[Run] = []
    one = mixed_stream(SEED, payments=args.payments, partitions=args.partitions)
    # a little over the warm-up and the window: the rate is unknown before the run, so the line count decides
    stream = looped(one, copies_for(len(one.lines), int((args.warmup_lines + args.lines) * 1.1)))
    fresh = FreshLines.after(stream)
    print(f"{len(stream.lines):,} raw lines made in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    with bench_stack("enrich-steady") as (cluster, _, scratch):
        for n, variant in rotated(VARIANTS, args.rounds):
            runs.append(one_run(cluster, stream, fresh, variant, args, scratch, n))
    report(runs)
    print(f"\n{args.rounds} round(s), {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
