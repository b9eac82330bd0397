"""A running pipeline, both sides in one run: ikkai's infer job against the Kafka Streams peer at steady state.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL). Per round, each variant runs as ONE continuous job on a fresh input topic:

* ``ikkai exactly-once``: the infer job (``--continuous``, its default trigger and batch bound) with the
  ``TransactionalBatchWriter``; started with ``--progress``, which prints every batch's
  ``StreamingQueryProgress`` (``durationMs`` by phase) on stderr (``spark_jobs.progress``);
* ``ikkai at-least-once``: the same with ``--mode at-least-once`` (the sink's ``AtLeastOnceBatchWriter``,
  as ``infer_throughput.py`` selects it);
* ``peer exactly_once_v2``: the Kafka Streams peer of ``peer_streams.py`` (Kafka Streams' defaults,
  ``--threads`` stream threads).

What one run does, in order:

1. **backlog**: the input is pre-filled with ``--backlog`` payments (a simulated set of ``--distinct``
   payments repeated; the same records for every variant), then the job starts; a feeder thread keeps
   the job's lag (produced - decided) near ``--backlog`` until the measurement ends, so the job never
   waits for input and little is left to drain afterwards.
2. **warm-up**, excluded and reported apart. ikkai: until ``--warmup-batches`` batches have run (from
   the progress lines) and their decisions have reached the read_committed consumer. The peer: from its
   "running" line until its rate settles — the decisions of three consecutive 2 s windows within
   ``SETTLE_TOLERANCE`` of their mean, after ``--peer-min-warmup`` s.
3. **maximum load**: from the end of the warm-up until ``--events`` decisions more have reached a
   read_committed consumer, or ``--seconds`` have passed. Events/s = decisions / seconds; CPU =
   user + system of the job's process tree (``/proc``, ``peer_streams.tree_cpu_seconds``) over the
   same interval, as seconds per 1,000 events. Then the feeder stops and the backlog drains.
4. **fixed loads**: 200/s, 2,000/s and 50% of this run's own maximum, ``--load-seconds`` each, with
   payments of their own keys. Latency = the produce call's wall clock → the wall clock at which the
   read_committed consumer of the decisions topic received the decision (arrival time, not the
   record's Kafka timestamp); p50/p99/max over every payment of the load.

Peak memory is the proportional set size (PSS) of the job's process tree over the whole run, sampled
every 0.25 s (``harness.PeakMemory``: forked Python workers share their daemon's pages, so a sum of
RSS would count them once per worker). Ratios are per round (the same load on the machine, minutes
apart); the table gives each round, the median and the spread (max - min). Start-up and recovery are
not measured here: ``job_startup.py`` and ``recovery.py`` keep their own rows.

The benchmark's own producer and consumer run on the same cores as the job; on a shared machine the
absolute numbers move with everybody's load, the ratios within a run much less.

Usage: .venv/bin/python -m benchmarks.steady_state [--events 400000] [--seconds 60] [--rounds 3] [--quick]
       [--warmup-batches 3] [--load-seconds 20] [--partitions 2] [--threads 2] [--batch N]
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

from benchmarks.harness import (
    JobProcess,
    alternating,
    bench_stack,
    median,
    percentile,
    print_table,
    python_module,
)
from spark_jobs.progress import parse_progress

IKKAI_EOS = "ikkai exactly-once"
IKKAI_ALOS = "ikkai at-least-once"
PEER_EOS = "peer exactly_once_v2"
IKKAI_DATA_SOURCE = "ikkai exactly-once (data source writer)"
IKKAI_BACK_TO_BACK = "ikkai exactly-once (processingTime=0)"
IKKAI_WORKER_PRODUCERS = "ikkai exactly-once (worker producers)"  # the default writer before the executor writer
VARIANTS = (IKKAI_EOS, IKKAI_ALOS, PEER_EOS)  # the default
TRIALS = (
    IKKAI_DATA_SOURCE,
    IKKAI_BACK_TO_BACK,
    IKKAI_WORKER_PRODUCERS,
)  # by --variants: each compared with IKKAI_EOS (#31)
ALL_VARIANTS = (*VARIANTS, *TRIALS)
PHASES = ("triggerExecution", "addBatch", "queryPlanning", "getBatch", "latestOffset", "walCommit", "commitOffsets")
SETTLE_TOLERANCE = 0.15
SAMPLE_S = 0.25
MB = 1024 * 1024


# ---------------------------------------------------------------- pure parts: progress, warm-up, summaries


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


def settled_at(
    samples: Sequence[tuple[float, int]], *, window: float = 2.0, windows: int = 3, min_seconds: float = 5.0
) -> int | None:
    """Index of the first sample at which a rate has settled, or None.

    ``samples`` are (seconds, count) from the job's start, in time order; settled = at least
    ``min_seconds`` in, and the count's rise in each of the last ``windows`` windows of ``window``
    seconds positive and within ``SETTLE_TOLERANCE`` of their mean (a cold JVM speeds up as its JIT
    compiles: its rises grow from window to window).
    """

    def count_at(i: int, t: float) -> int | None:
        return next((c for s, c in reversed(samples[: i + 1]) if s <= t), None)

    for i, (t, count) in enumerate(samples):
        if t < min_seconds:
            continue
        edges = [count_at(i, t - k * window) for k in range(windows, 0, -1)] + [count]
        if any(edge is None for edge in edges):
            continue
        rises = [float(b - a) for a, b in pairwise(edges) if a is not None and b is not None]
        mean = sum(rises) / len(rises)
        if mean > 0 and all(rise > 0 and abs(rise - mean) <= SETTLE_TOLERANCE * mean for rise in rises):
            return i
    return None


def last_rise(samples: Sequence[tuple[float, int, float]]) -> tuple[float, int, float]:
    """The first sample with the last sample's count: a window's end trimmed to its last decision.

    ikkai's decisions arrive a batch at a time; a window ending between two batches would count the
    time of a batch whose decisions it does not count.
    """
    final = samples[-1][1]
    return next(s for s in samples if s[1] == final)


def window_start(samples: Sequence[tuple[float, int, float]], decided: int) -> tuple[float, int, float] | None:
    """The first sample that counts ``decided`` decisions: a window's start at the warm-up's last decision.

    The warm-up ends when its last batch's progress line is written; the read_committed consumer sees
    that batch's decisions a little later. A window starting at the line would count them in the
    window without the time of their batch; it starts where the count reaches them instead.
    """
    return next((s for s in samples if s[1] >= decided), None)


def latency_summary(latencies_ms: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(p50, p99, max) in ms, by nearest rank; Nones for no values."""
    return percentile(latencies_ms, 50), percentile(latencies_ms, 99), max(latencies_ms, default=None)


def spread(values: Sequence[float]) -> float | None:
    return max(values) - min(values) if values else None


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
    """One variant in one round: its warm-up, its maximum load, its fixed loads."""

    round: int
    variant: str
    warmup_s: float = 0.0
    warmup_events: int = 0
    events: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
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
    def new_producers_per_batch(self) -> float | None:
        return sum(self.new_producers) / len(self.new_producers) if self.new_producers else None

    def load(self, label: str) -> Load | None:
        return next((load for load in self.loads if load.label == label), None)


LOAD_LABELS = ("200/s", "2,000/s", "50% of max")
_BATCH_LINE = re.compile(r": batch \d+ committed ")
_NEW_PRODUCERS = re.compile(r"\((\d+) new producers?\)")


def new_producers(stamped: Sequence[tuple[float, str]], start: float, end: float) -> list[int]:
    """Per batch line of the job's log stamped in (start, end]: how many producers it started ("(N new producers)")."""
    counts: list[int] = []
    for at, line in stamped:
        if start < at <= end and _BATCH_LINE.search(line):
            fresh = _NEW_PRODUCERS.search(line)
            counts.append(int(fresh.group(1)) if fresh else 0)
    return counts


def ratio_rows(runs: Sequence[Run]) -> list[list[object]]:
    """The #31 ratios per round, then their median and spread: ikkai against the peer, exactly-once against ALOS."""
    by = {(r.round, r.variant): r for r in runs}
    rounds = sorted({r.round for r in runs})
    rows: list[list[object]] = []

    def row(label: str, value: Callable[[int], float | None]) -> None:
        values = [value(n) for n in rounds]
        known = [v for v in values if v is not None]
        rows.append([label, *values, median(known), spread(known)])

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    def get(n: int, variant: str) -> Run | None:
        return by.get((n, variant))

    def rate(n: int, variant: str) -> float | None:
        run = get(n, variant)
        return run.rate if run else None

    def cpu(n: int, variant: str) -> float | None:
        run = get(n, variant)
        return run.cpu_s_per_1000 if run else None

    def p99(n: int, variant: str, label: str) -> float | None:
        run = get(n, variant)
        load = run.load(label) if run else None
        return load.p99_ms if load else None

    row(f"throughput {IKKAI_EOS} / {PEER_EOS}", lambda n: ratio(rate(n, IKKAI_EOS), rate(n, PEER_EOS)))
    row(f"CPU per event {IKKAI_EOS} / {PEER_EOS}", lambda n: ratio(cpu(n, IKKAI_EOS), cpu(n, PEER_EOS)))
    row(f"throughput {IKKAI_EOS} / {IKKAI_ALOS}", lambda n: ratio(rate(n, IKKAI_EOS), rate(n, IKKAI_ALOS)))

    def p99_ratio(label: str) -> Callable[[int], float | None]:
        return lambda n: ratio(p99(n, IKKAI_EOS, label), p99(n, PEER_EOS, label))

    for label in LOAD_LABELS:
        row(f"p99 at {label} {IKKAI_EOS} / {PEER_EOS}", p99_ratio(label))

    def trial_p99_ratio(trial: str, label: str) -> Callable[[int], float | None]:
        return lambda n: ratio(p99(n, trial, label), p99(n, IKKAI_EOS, label))

    def trial_ratio(measure: Callable[[int, str], float | None], trial: str) -> Callable[[int], float | None]:
        return lambda n: ratio(measure(n, trial), measure(n, IKKAI_EOS))

    for trial in (t for t in TRIALS if any(r.variant == t for r in runs)):  # each trial against the default path
        row(f"throughput {trial} / {IKKAI_EOS}", trial_ratio(rate, trial))
        row(f"CPU per event {trial} / {IKKAI_EOS}", trial_ratio(cpu, trial))
        for label in LOAD_LABELS:
            row(f"p99 at {label} {trial} / {IKKAI_EOS}", trial_p99_ratio(trial, label))
    return rows


@dataclass(frozen=True)
class Target:
    what: str
    limit: float
    at_least: bool  # the measured median must be >= limit (else <=)


TARGETS = (
    Target(f"throughput {IKKAI_EOS} / {PEER_EOS}", 0.7, True),
    Target(f"CPU per event {IKKAI_EOS} / {PEER_EOS}", 1.5, False),
    Target(f"throughput {IKKAI_EOS} / {IKKAI_ALOS}", 0.97, True),
)


def target_rows(ratios: Sequence[Sequence[object]], runs: Sequence[Run]) -> list[list[object]]:
    """Each #31 target against the median of its ratio row (and the p99 targets against ikkai's median p99)."""
    medians = {str(row[0]): row[-2] for row in ratios}
    rows: list[list[object]] = []
    for target in TARGETS:
        value = medians.get(target.what)
        met = isinstance(value, float) and (value >= target.limit if target.at_least else value <= target.limit)
        rows.append([target.what, f"{'>=' if target.at_least else '<='} {target.limit}", value,
                     "met" if met else "not met"])  # fmt: skip
    for label, limit_ms in (("200/s", 400.0), ("2,000/s", 1000.0)):
        p99s = [load.p99_ms for r in runs if r.variant == IKKAI_EOS and (load := r.load(label)) and load.p99_ms]
        value = median(p99s)
        met = value is not None and value <= limit_ms
        rows.append([f"p99 ms at {label} {IKKAI_EOS}", f"<= {limit_ms:.0f}", value, "met" if met else "not met"])
    return rows


def report(runs: Sequence[Run]) -> None:
    """The tables: maximum load, fixed loads, ratios per round, targets, where a batch's time goes."""
    print_table(
        "steady state, maximum load (warm-up excluded and given apart)",
        ["ROUND", "WHAT", "WARM-UP S", "WARM-UP EVENTS", "EVENTS", "SECONDS", "EVENTS/S", "CPU S / 1000 EVENTS",
         "PEAK PSS MB", "NEW PRODUCERS / BATCH"],
        [[r.round, r.variant, r.warmup_s, r.warmup_events, r.events, r.seconds, r.rate, r.cpu_s_per_1000,
          r.peak_pss / MB, r.new_producers_per_batch] for r in runs],
    )  # fmt: skip
    print_table(
        "steady state, fixed loads: produced -> decision received by a read_committed consumer (arrival time)",
        ["ROUND", "WHAT", "LOAD", "EVENTS/S", "EVENTS", "P50 MS", "P99 MS", "MAX MS"],
        [[r.round, r.variant, load.label, load.rate, load.events, load.p50_ms, load.p99_ms, load.max_ms]
         for r in runs for load in r.loads],
    )  # fmt: skip
    ratios = ratio_rows(runs)
    rounds = sorted({r.round for r in runs})
    print_table("steady state: ratios per round", ["", *(f"ROUND {n}" for n in rounds), "MEDIAN", "SPREAD"], ratios)
    print_table("steady state: #31 targets (medians)", ["TARGET", "LIMIT", "MEASURED", ""], target_rows(ratios, runs))
    for variant in (IKKAI_EOS, IKKAI_ALOS, *TRIALS):
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


# ---------------------------------------------------------------- I/O: the jobs, the input, the clock


WALL = time.time() - time.monotonic()  # JobProcess stamps monotonic times; the decision watch notes wall clock


@dataclass(frozen=True)
class Input:
    """The payments every run is fed: (key, Avro value) pairs, encoded once before any clock starts."""

    base: list[dict[str, Any]]
    encoded: list[tuple[bytes, bytes]]

    @classmethod
    def simulated(cls, distinct: int) -> Input:
        from demo.payments_simulation import payment_records, simulate
        from ikkai.contract.codec import default_codec

        codec = default_codec()
        base = payment_records(simulate(3, payments=distinct).payments)
        encoded = [(str(p["payment_id"]).encode(), codec.encode("payment_event", p, version=1)) for p in base]
        return cls(base, encoded)

    def fresh(self, tag: str, count: int) -> list[tuple[bytes, bytes]]:
        """``count`` payments with keys of their own (payment_id + ``tag``), for the latency of each."""
        from ikkai.contract.codec import default_codec

        codec = default_codec()
        out = []
        for i in range(count):
            base = self.base[i % len(self.base)]
            payment = {**base, "payment_id": f"{base['payment_id']}.{tag}.{i}"}
            out.append((str(payment["payment_id"]).encode(), codec.encode("payment_event", payment, version=1)))
        return out


class Feeder:
    """Produces the input's payments in a loop, keeping ``produced - decided()`` at ``backlog`` until stopped."""

    def __init__(
        self, bootstrap: str, topic: str, data: Input, partitions: int, backlog: int, decided: Callable[[], int]
    ) -> None:
        from confluent_kafka import Producer

        from ikkai.contract.kafka import KafkaContext
        from ikkai.contract.partitioning import kafka_partition

        self.produced = 0
        self._stop = threading.Event()
        producer = Producer(KafkaContext.from_environment(bootstrap).producer_config(**{"linger.ms": 20}))
        records = [(key, value, kafka_partition(key, partitions)) for key, value in data.encoded]

        def produce(count: int) -> None:
            for _ in range(count):
                key, value, partition = records[self.produced % len(records)]
                while True:
                    try:
                        producer.produce(topic, value=value, key=key, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
                self.produced += 1
            producer.poll(0)

        def run() -> None:
            while not self._stop.is_set():
                wanted = min(backlog - (self.produced - decided()), 5_000)
                if wanted > 0:
                    produce(wanted)
                else:
                    self._stop.wait(0.02)
            assert producer.flush(120) == 0

        produce(backlog)
        assert producer.flush(120) == 0
        self._thread = threading.Thread(target=run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        """Stops producing; the number of payments produced in all."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(180)
        return self.produced


class Sampler:
    """(monotonic time, decisions seen, CPU seconds of the job's tree) every ``SAMPLE_S``."""

    def __init__(self, job: JobProcess, count: Callable[[], int]) -> None:
        from benchmarks.peer_streams import tree_cpu_seconds

        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.wait(SAMPLE_S):
                self.samples.append((time.monotonic(), count(), tree_cpu_seconds(job.process.pid)))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def latest(self) -> tuple[float, int, float]:
        while not self.samples:
            time.sleep(0.05)
        return self.samples[-1]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


Starter = Callable[[Any, Path], JobProcess]


def starters(build: Path, bootstrap: str, args: argparse.Namespace) -> dict[str, Starter]:
    from benchmarks.peer_streams import start_peer
    from stack.kit.topic_io import unique

    extra = ["--max-offsets-per-trigger", str(args.batch)] if args.batch else []

    def ikkai(mode: str, *more: str) -> Starter:
        def start(topics: Any, scratch: Path) -> JobProcess:
            checkpoint = scratch / unique("ck").replace(".", "-")
            command, cwd, env = python_module(
                "spark_jobs.infer", "--progress", "--bootstrap", bootstrap, "--checkpoint", str(checkpoint),
                "--query", checkpoint.name, "--input", topics.input, "--decisions", topics.decisions,
                "--outbox", topics.outbox, "--dlq", topics.dlq, "--mode", mode, "--continuous", *extra, *more,
            )  # fmt: skip
            return JobProcess(command, cwd=cwd, env=env)

        return start

    def peer(topics: Any, scratch: Path) -> JobProcess:
        return start_peer(build, bootstrap, topics, "exactly_once_v2", scratch, threads=args.threads)

    return {IKKAI_EOS: ikkai("exactly-once"), IKKAI_ALOS: ikkai("at-least-once"), PEER_EOS: peer,
            IKKAI_DATA_SOURCE: ikkai("exactly-once", "--sink-api", "data-source"),
            IKKAI_BACK_TO_BACK: ikkai("exactly-once", "--trigger-interval", "0ms"),
            IKKAI_WORKER_PRODUCERS: ikkai("exactly-once", "--transactional-writer", "worker")}  # fmt: skip


def _wait(condition: Callable[[], bool], job: JobProcess, timeout: float, what: str) -> None:
    give_up_at = time.monotonic() + timeout
    while not condition():
        if job.process.poll() is not None:
            raise SystemExit(f"{what}: the job exited:\n{job.tail()}")
        if time.monotonic() > give_up_at:
            raise SystemExit(f"{what}: timed out after {timeout:.0f} s:\n{job.tail()}")
        time.sleep(0.05)


def one_run(
    bootstrap: str, variant: str, start: Starter, data: Input, scratch: Path, args: argparse.Namespace, n: int
) -> Run:
    from benchmarks.infer_throughput import DecisionWatch, fresh_outputs
    from stack.kit.topic_io import create_topic, unique

    topic = create_topic(bootstrap, unique("events.payments.steady"), args.partitions)
    topics = fresh_outputs(bootstrap, topic, args.partitions)
    watch = DecisionWatch(bootstrap, topics.decisions)
    feeder = Feeder(bootstrap, topic, data, args.partitions, args.backlog, lambda: watch.count)
    job = start(topics, scratch)
    run = Run(n, variant)
    sampler = Sampler(job, lambda: watch.count)
    try:
        job.wait_started()
        feeder.start()
        assert job.started is not None
        # warm-up
        if variant == PEER_EOS:
            index: list[int | None] = [None]

            def peer_settled() -> bool:
                assert job.started is not None
                points = [(t - job.started, c) for t, c, _ in sampler.samples if t >= job.started]
                index[0] = settled_at(points, min_seconds=args.peer_min_warmup)
                return index[0] is not None or (bool(points) and points[-1][0] > args.peer_max_warmup)

            _wait(peer_settled, job, 600, f"{variant} warm-up")
            t0, count0, cpu0 = sampler.latest()
        else:
            _wait(lambda: len(parse_progress(job.stamped)) >= args.warmup_batches, job, 600, f"{variant} warm-up")
            warm = [p for _, p in parse_progress(job.stamped)[: args.warmup_batches]]
            decided = sum(int(p.get("numInputRows", 0)) for p in warm)  # one decision per payment, none dead
            _wait(lambda: window_start(sampler.samples, decided) is not None, job, 600, f"{variant} warm-up decisions")
            first = window_start(sampler.samples, decided)
            assert first is not None
            t0, count0, cpu0 = first
        run.warmup_s, run.warmup_events = t0 - job.started, count0
        # maximum load
        _wait(
            lambda: sampler.latest()[1] - count0 >= args.events or sampler.latest()[0] - t0 >= args.seconds,
            job, args.seconds + 600, f"{variant} maximum load",
        )  # fmt: skip
        t1, count1, cpu1 = last_rise([s for s in sampler.samples if s[0] >= t0])
        run.events, run.seconds, run.cpu_s = count1 - count0, t1 - t0, cpu1 - cpu0
        run.progress = [p for at, p in parse_progress(job.stamped) if t0 < at <= t1 + SAMPLE_S]
        run.new_producers = new_producers(job.stamped, t0, t1 + SAMPLE_S)
        print(f"round {n}, {variant}: {run.rate:,.0f} events/s after {run.warmup_s:.1f} s of warm-up",
              file=sys.stderr, flush=True)  # fmt: skip
        total = feeder.stop()
        _wait(lambda: watch.count >= total, job, 1800, f"{variant} draining the backlog")
        # fixed loads
        for label, rate in zip(LOAD_LABELS, (200.0, 2000.0, run.rate / 2), strict=True):
            load_began = time.monotonic()
            run.loads.append(fixed_load(bootstrap, topic, watch, job, data, label, rate, args, f"r{n}{len(run.loads)}"))
            if label == LOAD_LABELS[0]:  # the small batches of the lowest load: a batch's fixed cost
                run.low_load_progress = [p for at, p in parse_progress(job.stamped) if at > load_began]
            print(f"round {n}, {variant}, {label}: p99 {run.loads[-1].p99_ms:.0f} ms", file=sys.stderr, flush=True)
    finally:
        feeder.stop()
        sampler.stop()
        job.stop()
        watch.close()
    run.peak_pss = job.memory.peak
    return run


class FreshRecords(Protocol):
    """Records with keys of their own for a fixed load (``Input``; enrich_steady's raw lines)."""

    def fresh(self, tag: str, count: int) -> list[tuple[bytes, bytes]]: ...


def fixed_load(
    bootstrap: str, topic: str, watch: Any, job: JobProcess, data: FreshRecords, label: str, rate: float,
    args: argparse.Namespace, tag: str,
) -> Load:  # fmt: skip
    from confluent_kafka import Producer

    from ikkai.contract.kafka import KafkaContext
    from ikkai.contract.partitioning import kafka_partition

    records = data.fresh(tag, max(1, int(rate * args.load_seconds)))  # before the clock starts
    producer = Producer(KafkaContext.from_environment(bootstrap).producer_config(**{"linger.ms": 1}))
    sent: dict[bytes, float] = {}
    began = time.monotonic()
    for i, (key, value) in enumerate(records):
        pause = began + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        sent[key] = time.time()
        producer.produce(topic, value=value, key=key, partition=kafka_partition(key, args.partitions))
        producer.poll(0)
    offered = (len(records) - 1) / max(time.monotonic() - began, 1e-9) if len(records) > 1 else rate
    producer.flush(60)
    _wait(lambda: all(key in watch.arrived for key in sent), job, 600, f"{label} load")
    p50, p99, worst = latency_summary([(watch.arrived[key] - at) * 1000 for key, at in sent.items()])
    return Load(label, offered, len(records), p50, p99, worst)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400_000, help="measured events per run after the warm-up")
    parser.add_argument("--seconds", type=float, default=60, help="... or this long, whichever comes first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-batches", type=int, default=3, help="ikkai: batches excluded as warm-up")
    parser.add_argument("--peer-min-warmup", type=float, default=10, help="the peer: seconds excluded at least")
    parser.add_argument("--peer-max-warmup", type=float, default=30, help="the peer: seconds excluded at most")
    parser.add_argument("--backlog", type=int, help="payments waiting for the job [default: 2 ikkai batches]")
    parser.add_argument("--load-seconds", type=float, default=20, help="each fixed load: how long")
    parser.add_argument("--distinct", type=int, default=10_000, help="simulated payments the backlog repeats")
    parser.add_argument("--batch", type=int, help="ikkai's maxOffsetsPerTrigger [default: the job's own]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="the peer's num.stream.threads (ikkai: local[2])")
    parser.add_argument(
        "--variants", type=lambda text: tuple(v.strip() for v in text.split(",")), default=VARIANTS,
        help=f"comma-separated, in round order, of: {', '.join(ALL_VARIANTS)} [default: the first three]",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, 20,000 events or 15 s, 3 s loads")
    args = parser.parse_args()
    unknown = [v for v in args.variants if v not in ALL_VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {list(ALL_VARIANTS)}")
    if args.quick:
        args.rounds, args.events, args.seconds, args.load_seconds = 1, 20_000, 15, 3
        args.distinct, args.peer_min_warmup, args.peer_max_warmup = 2_000, 2, 8
        args.batch = args.batch or 5_000
    from benchmarks.peer_streams import build_peer

    build = build_peer()
    started = time.monotonic()
    if args.backlog is None:
        from spark_jobs.options import default_max_offsets_per_trigger

        args.backlog = 2 * (args.batch or default_max_offsets_per_trigger())
    data = Input.simulated(args.distinct)
    with bench_stack("steady") as (bootstrap, _, scratch):
        start = starters(build, bootstrap, args)
        runs = [one_run(bootstrap, name, start[name], data, scratch, args, n)
                for n, name in alternating(args.variants, args.rounds)]  # fmt: skip
    report(runs)
    print(f"\n{args.rounds} round(s), {args.events:,} events measured per run, {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
