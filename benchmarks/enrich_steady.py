"""The enrich job at steady state, alone and with infer running on its output: one run, side by side.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL), publishes master data and lands one seeded raw stream of ``--payments`` payments
(``raw_payments.mixed_stream``: valid payments, status updates, retries, late and malformed lines; every
line distinct, so dedupe and the watermark see what they would in production) in an ``ingest.payments``
topic. Per round, each variant runs continuously over the whole backlog into fresh topics:

* ``enrich exactly-once``: ``python -m spark_jobs.enrich --continuous --progress`` (the
  ``TransactionalBatchWriter``, its default batch bound);
* ``enrich at-least-once``: the same with ``--mode at-least-once``;
* ``enrich + infer exactly-once``: both jobs at once, as their own processes on the same 2 cores, infer
  reading what enrich commits (``events.payments`` → ``decisions.fraud`` + ``outbox.requests``).

Each run lands the same stream in an ``ingest.payments`` topic of its own (the fixed loads below add to it).
The numbers come from Spark's ``StreamingQueryProgress`` (the jobs' ``--progress`` lines): the warm-up
is enrich's first ``--warmup-batches`` batches (excluded, given apart); the window then runs from the
arrival of the warm-up's last progress line to the arrival of the first line at or past ``--seconds``
(or of the line by which ``--lines`` more raw lines were read, or the backlog ran out). Raw lines/s = the window's
``numInputRows`` / its seconds: a batch's line arrives after its transactions committed. CPU =
user + system of the job process trees (``/proc``) over the same window, per 1,000 raw lines; memory =
peak PSS of the trees over the run. For enrich + infer, events/s is what infer decided in the window.

Then, once the job has read the whole backlog, **fixed loads** as in ``steady_state.py``: 200/s, 2,000/s and
50% of the run's own maximum, ``--load-seconds`` each, of fresh valid payment lines (payment ids of their
own, event times after the whole stream's: each becomes one event); p50/p99/max from a line's produce to its
event (enrich alone) or its decision (enrich + infer) arriving at a read_committed consumer.

Usage: .venv/bin/python -m benchmarks.enrich_steady [--payments 150000] [--seconds 60] [--lines 400000]
       [--rounds 3] [--warmup-batches 3] [--load-seconds 20] [--batch N] [--partitions 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.enrich_infer import SEED, land_raw_stream
from benchmarks.harness import JobProcess, alternating, bench_stack, median, print_table, python_module
from benchmarks.steady_state import LOAD_LABELS, Load, fixed_load, phase_summary
from demo.raw_payments import EVENT, MixedStream, encode_line, format_event_time, mixed_stream
from spark_jobs.progress import parse_progress

ENRICH_EOS = "enrich exactly-once"
ENRICH_ALOS = "enrich at-least-once"
PIPELINE = "enrich + infer exactly-once"
VARIANTS = (ENRICH_EOS, ENRICH_ALOS, PIPELINE)
TARGET_LINES_PER_S = 10_000
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


def rows_between(progress: Sequence[tuple[float, dict[str, Any]]], start: float, end: float) -> int:
    """Input rows of the batches whose progress line arrived in (start, end]."""
    return sum(int(p.get("numInputRows", 0)) for at, p in progress if start < at <= end)


def cpu_between(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds spent between two instants, from (time, cumulative CPU) samples: the nearest at or after each."""

    def at(t: float) -> float:
        return next((cpu for s, cpu in samples if s >= t), samples[-1][1])

    return at(end) - at(start) if samples else 0.0


@dataclass
class FreshLines:
    """Valid raw payment lines for the fixed loads: the stream's accepted events with payment and event ids of
    their own and event times after every line of the stream (never late, never a duplicate: each one event)."""

    templates: list[dict[str, Any]]
    next_ms: int  # the next line's event time; it only grows, across loads and runs

    @classmethod
    def after(cls, stream: MixedStream, templates: int = 1_000) -> FreshLines:
        accepted = [json.loads(line.value) for line in stream.lines if line.expected == EVENT]
        latest = max(_epoch_ms(doc["event_time"]) for doc in accepted)
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


def _epoch_ms(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000)


@dataclass
class Run:
    round: int
    variant: str
    warmup_s: float = 0.0
    warmup_lines: int = 0
    lines: int = 0
    seconds: float = 0.0
    decided: int | None = None  # enrich + infer: events infer decided in the window
    cpu_s: float = 0.0
    peak_pss: int = 0
    batches: list[dict[str, Any]] = field(default_factory=list)
    loads: list[Load] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.lines / self.seconds if self.seconds else 0.0

    @property
    def cpu_s_per_1000(self) -> float | None:
        return self.cpu_s * 1000 / self.lines if self.lines else None


def report(runs: Sequence[Run]) -> None:
    print_table(
        "enrich at steady state (warm-up excluded and given apart)",
        ["ROUND", "WHAT", "WARM-UP S", "WARM-UP LINES", "LINES", "SECONDS", "LINES/S", "DECIDED/S",
         "CPU S / 1000 LINES", "PEAK PSS MB"],
        [[r.round, r.variant, r.warmup_s, r.warmup_lines, r.lines, r.seconds, r.rate,
          None if r.decided is None else r.decided / r.seconds if r.seconds else None, r.cpu_s_per_1000,
          r.peak_pss / MB] for r in runs],
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
    rate = median([r.rate for r in runs if r.variant == ENRICH_EOS])
    met = rate is not None and rate >= TARGET_LINES_PER_S
    print_table(
        "enrich: #31 target (median)", ["TARGET", "LIMIT", "MEASURED", ""],
        [[f"raw lines/s, {ENRICH_EOS}", f">= {TARGET_LINES_PER_S:,}", rate, "met" if met else "not met"]],
    )  # fmt: skip
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


# ---------------------------------------------------------------- I/O: the jobs


class CpuSampler:
    """(monotonic time, CPU seconds of every job's tree, summed) every ``SAMPLE_S``."""

    def __init__(self, jobs: Sequence[JobProcess]) -> None:
        from benchmarks.peer_streams import tree_cpu_seconds

        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.wait(SAMPLE_S):
                self.samples.append((time.monotonic(), sum(tree_cpu_seconds(j.process.pid) for j in jobs)))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def one_run(
    bootstrap: str,
    stream: MixedStream,
    fresh: FreshLines,
    variant: str,
    args: argparse.Namespace,
    scratch: Path,
    n: int,
) -> Run:
    from benchmarks.infer_throughput import DecisionWatch
    from stack.kit.topic_io import create_topic, unique

    ingest, merchants, customers, lines = land_raw_stream(bootstrap, args.payments, args.partitions, stream)
    name = unique("steady").replace(".", "-")
    topics = {kind: create_topic(bootstrap, f"{kind}.{name}", args.partitions)
              for kind in ("events", "dlq-enrich", "decisions", "outbox", "dlq-infer")}  # fmt: skip
    extra = ["--max-offsets-per-trigger", str(args.batch)] if args.batch else []
    mode = "at-least-once" if variant == ENRICH_ALOS else "exactly-once"
    command, cwd, env = python_module(
        "spark_jobs.enrich", "--progress", "--continuous", "--bootstrap", bootstrap,
        "--checkpoint", str(scratch / f"enrich-{name}"), "--query", f"enrich-{name}", "--input", ingest,
        "--output", topics["events"], "--dlq", topics["dlq-enrich"], "--merchants", merchants,
        "--customers", customers, "--mode", mode, *extra,
    )  # fmt: skip
    jobs = [JobProcess(command, cwd=cwd, env=env, start_marker=", mode ")]
    if variant == PIPELINE:
        command, cwd, env = python_module(
            "spark_jobs.infer", "--progress", "--continuous", "--bootstrap", bootstrap,
            "--checkpoint", str(scratch / f"infer-{name}"), "--query", f"infer-{name}", "--input", topics["events"],
            "--decisions", topics["decisions"], "--outbox", topics["outbox"], "--dlq", topics["dlq-infer"],
        )  # fmt: skip
        jobs.append(JobProcess(command, cwd=cwd, env=env))
    enrich = jobs[0]
    sampler = CpuSampler(jobs)
    run = Run(n, variant)
    try:
        enrich.wait_started()

        def enrich_progress() -> list[tuple[float, dict[str, Any]]]:
            return parse_progress(enrich.stamped)

        _await(lambda: len(enrich_progress()) >= args.warmup_batches, jobs, 900, f"{variant} warm-up")
        warm = enrich_progress()[: args.warmup_batches]
        assert enrich.started is not None
        t0 = warm[-1][0]
        run.warmup_s = t0 - enrich.started
        run.warmup_lines = sum(int(p.get("numInputRows", 0)) for _, p in warm)

        def window_done() -> bool:
            progress = enrich_progress()
            last = progress[-1][0]
            drained = sum(int(p.get("numInputRows", 0)) for _, p in progress) >= lines
            return drained or last - t0 >= args.seconds or rows_between(progress, t0, last) >= args.lines

        _await(window_done, jobs, args.seconds + 900, f"{variant} measurement")
        window = measured_window(
            enrich_progress(), args.warmup_batches, time.monotonic()
        )  # up to the line that ended it
        if window is None:
            raise SystemExit(
                f"{variant}: {len(enrich_progress())} batches in all, none measured after the {args.warmup_batches} of "
                f"the warm-up: raise --payments\n{enrich.tail()}"
            )
        run.lines, run.seconds, run.batches = window.rows, window.seconds, window.batches
        run.cpu_s = cpu_between(sampler.samples, window.start, window.end)
        if variant == PIPELINE:
            run.decided = rows_between(parse_progress(jobs[1].stamped), window.start, window.end)
        print(f"round {n}, {variant}: {run.rate:,.0f} raw lines/s after {run.warmup_s:.1f} s of warm-up",
              file=sys.stderr, flush=True)  # fmt: skip

        def read_all() -> bool:
            return sum(int(p.get("numInputRows", 0)) for _, p in enrich_progress()) >= lines

        _await(read_all, jobs, 1800, f"{variant} reading the whole backlog")
        watch = DecisionWatch(bootstrap, topics["decisions"] if variant == PIPELINE else topics["events"])
        try:
            _await(lambda: settled(watch), jobs, 1800, f"{variant} writing the whole backlog")  # infer, too
            for label, rate in zip(LOAD_LABELS, (200.0, 2000.0, run.rate / 2), strict=True):
                tag = f"r{n}{VARIANTS.index(variant)}{len(run.loads)}"
                run.loads.append(fixed_load(bootstrap, ingest, watch, enrich, fresh, label, rate, args, tag))
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
    parser.add_argument("--payments", type=int, default=150_000, help="payments in the raw stream (lines are more)")
    parser.add_argument("--seconds", type=float, default=60, help="measured seconds per run after the warm-up")
    parser.add_argument("--lines", type=int, default=400_000, help="... or this many raw lines, whichever is first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-batches", type=int, default=3, help="enrich's batches excluded as warm-up")
    parser.add_argument("--batch", type=int, help="maxOffsetsPerTrigger [default: the job's own]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--load-seconds", type=float, default=20, help="each fixed load: how long")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, 10,000 payments, 15 s, 3 s loads")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.payments, args.seconds, args.batch = 1, 10_000, 15, args.batch or 2_000
        args.load_seconds = 3
    started = time.monotonic()
    runs: list[Run] = []
    stream = mixed_stream(SEED, payments=args.payments, partitions=args.partitions)
    fresh = FreshLines.after(stream)
    print(f"{len(stream.lines):,} raw lines made in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    with bench_stack("enrich-steady") as (bootstrap, _, scratch):
        for n, variant in alternating(VARIANTS, args.rounds):
            runs.append(one_run(bootstrap, stream, fresh, variant, args, scratch, n))
    report(runs)
    print(f"\n{args.rounds} round(s), {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
