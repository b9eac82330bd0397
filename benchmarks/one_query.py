"""Enrich and infer as one query against the two jobs of today, side by side in one run.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL). Per round, each variant runs on a raw stream landed for it (``enrich_infer.land_raw_stream``:
the same seeded lines, master data first) into fresh output topics, the variants' order rotated by one every
round (``harness.rotated``):

* ``two jobs``: ``python -m spark_jobs.enrich --continuous`` and ``python -m spark_jobs.infer --continuous`` at
  once, as their own processes, infer reading what enrich commits (today's pipeline);
* ``one query``: ``python -m spark_jobs.enrich_infer --continuous``: enrich's query whose sink also writes the
  decisions and outbox requests of its events, in the same transactions.

Both with their default batch bound and trigger. What one variant's run does, in order:

1. **backlog**: the landed stream (``--payments`` payments: valid lines, updates, retries, late and
   malformed ones) is read from the start; raw lines/s to decision = the stream's lines / seconds from the
   jobs' spawn to the last decision (start-up included), and / seconds from the first decision to the last
   (start-up excluded); each decision seen by a read_committed consumer (``infer_throughput.DecisionWatch``).
2. **warm-up** at 200 lines/s for ``--warmup-seconds`` of fresh valid lines, not measured.
3. **200 lines/s** for ``--load-seconds``: each line's produce → its decision received by the read_committed
   consumer (``steady_state.fixed_load``), p50/p99/max.

The ratios (one query / two jobs) are per round, with their median. The machine's load average is printed
before and after: the ratios of one run are what count on a shared machine.

Usage: .venv/bin/python -m benchmarks.one_query [--payments 20000] [--rounds 3] [--warmup-seconds 20]
       [--load-seconds 40] [--partitions 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.enrich_infer import SEED, land_raw_stream
from benchmarks.enrich_steady import _await
from benchmarks.harness import JobProcess, bench_stack, median, print_table, python_module, rotated
from benchmarks.infer_throughput import MB, DecisionWatch
from benchmarks.looped_stream import FreshLines
from benchmarks.steady_state import Load, fixed_load
from demo.raw_payments import EVENT, MixedStream, mixed_stream
from ikkai.contract.kafka import KafkaContext

TWO_JOBS = "two jobs (enrich, infer)"
ONE_QUERY = "one query (enrich_infer)"
VARIANTS = (TWO_JOBS, ONE_QUERY)


@dataclass
class Run:
    round: int
    variant: str
    lines: int = 0
    decisions: int = 0
    from_spawn_s: float = 0.0
    from_first_s: float = 0.0
    load: Load | None = None
    peak_pss: int = 0

    @property
    def rate_from_spawn(self) -> float:
        return self.lines / self.from_spawn_s if self.from_spawn_s > 0 else 0.0

    @property
    def rate_from_first(self) -> float:
        return self.lines / self.from_first_s if self.from_first_s > 0 else 0.0


def commands(variant: str, cluster: KafkaContext, raw: tuple[str, str, str, int], topics: dict[str, str],
             scratch: Path, name: str) -> list[list[str]]:  # fmt: skip
    ingest, merchants, customers, _ = raw
    common = ["--continuous", "--bootstrap", cluster.bootstrap_servers]
    enrich = [
        "--input", ingest, "--output", topics["events"], "--dlq", topics["dlq-enrich"], "--merchants", merchants,
        "--customers", customers, *common,
    ]  # fmt: skip
    if variant == ONE_QUERY:
        command, _, _ = python_module(
            "spark_jobs.enrich_infer", "--checkpoint", str(scratch / f"one-{name}"), "--query", f"one-{name}",
            *enrich, "--decisions", topics["decisions"], "--outbox", topics["outbox"],
            "--dlq-infer", topics["dlq-infer"],
        )  # fmt: skip
        return [command]
    enrich_command, _, _ = python_module(
        "spark_jobs.enrich", "--checkpoint", str(scratch / f"enrich-{name}"), "--query", f"enrich-{name}", *enrich
    )
    infer_command, _, _ = python_module(
        "spark_jobs.infer", "--checkpoint", str(scratch / f"infer-{name}"), "--query", f"infer-{name}",
        "--input", topics["events"], "--decisions", topics["decisions"], "--outbox", topics["outbox"],
        "--dlq", topics["dlq-infer"], *common,
    )  # fmt: skip
    return [enrich_command, infer_command]


def one_run(
    cluster: KafkaContext, stream: MixedStream, fresh: FreshLines, variant: str, args: argparse.Namespace,
    scratch: Path, n: int,
) -> Run:  # fmt: skip
    from stack.kit.topic_io import create_topic, unique

    raw = land_raw_stream(cluster, args.payments, args.partitions, stream)
    name = unique("one").replace(".", "-")
    topics = {kind: create_topic(cluster, f"{kind}.{name}", args.partitions)
              for kind in ("events", "dlq-enrich", "decisions", "outbox", "dlq-infer")}  # fmt: skip
    expected = sum(1 for line in stream.lines if line.expected == EVENT)
    run = Run(n, variant, lines=raw[3])
    watch = DecisionWatch(cluster, topics["decisions"])
    spawned = time.time()
    jobs = [JobProcess(command, start_marker=", mode ") for command in commands(variant, cluster, raw, topics,
                                                                                  scratch, name)]  # fmt: skip
    try:
        _await(lambda: watch.count >= expected, jobs, 1800, f"{variant}: the backlog's {expected:,} decisions")
        assert watch.last is not None
        run.decisions = watch.count
        run.from_spawn_s = watch.last - spawned
        run.from_first_s = watch.last - min(watch.arrived.values())
        print(f"round {n}, {variant}: backlog {run.rate_from_spawn:,.0f} lines/s from spawn, "
              f"{run.rate_from_first:,.0f} from the first decision", file=sys.stderr, flush=True)  # fmt: skip
        tag = f"r{n}{VARIANTS.index(variant)}"
        warm = argparse.Namespace(**{**vars(args), "load_seconds": args.warmup_seconds})
        fixed_load(cluster, raw[0], watch, jobs[0], fresh, "warm-up", 200.0, warm, tag + "w")
        run.load = fixed_load(cluster, raw[0], watch, jobs[0], fresh, "200/s", 200.0, args, tag + "m")
        print(f"round {n}, {variant}, 200/s: p50 {run.load.p50_ms:.0f} ms, p99 {run.load.p99_ms:.0f} ms",
              file=sys.stderr, flush=True)  # fmt: skip
    finally:
        watch.close()
        for job in jobs:
            job.stop()
    run.peak_pss = sum(job.memory.peak for job in jobs)
    return run


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def report(runs: list[Run], load_before: tuple[float, ...], load_after: tuple[float, ...]) -> None:
    loads = f"load average before {', '.join(f'{x:.2f}' for x in load_before)}; after " + ", ".join(
        f"{x:.2f}" for x in load_after
    )
    print_table(
        f"enrich + infer: one query against two jobs ({loads})",
        ["ROUND", "WHAT", "RAW LINES", "DECISIONS", "LINES/S FROM SPAWN", "LINES/S FROM 1ST DECISION",
         "200/S LINES", "P50 MS", "P99 MS", "MAX MS", "PEAK PSS MB"],
        [[r.round, r.variant, r.lines, r.decisions, r.rate_from_spawn, r.rate_from_first,
          r.load.events if r.load else None, r.load.p50_ms if r.load else None, r.load.p99_ms if r.load else None,
          r.load.max_ms if r.load else None, r.peak_pss / MB] for r in runs],
    )  # fmt: skip
    rounds = sorted({r.round for r in runs})
    by = {(r.round, r.variant): r for r in runs}

    def per_round(measure: str) -> list[float | None]:
        out: list[float | None] = []
        for n in rounds:
            one, two = by.get((n, ONE_QUERY)), by.get((n, TWO_JOBS))
            if one is None or two is None or one.load is None or two.load is None:
                out.append(None)
            elif measure.startswith("lines/s"):
                attribute = "rate_from_spawn" if "spawn" in measure else "rate_from_first"
                out.append(ratio(getattr(one, attribute), getattr(two, attribute)))
            else:
                out.append(ratio(getattr(one.load, measure), getattr(two.load, measure)))
        return out

    rows = []
    for label, measure in (("p50 at 200/s", "p50_ms"), ("p99 at 200/s", "p99_ms"), ("max at 200/s", "max_ms"),
                           ("backlog lines/s from spawn", "lines/s spawn"),
                           ("backlog lines/s from 1st decision", "lines/s first")):  # fmt: skip
        values = per_round(measure)
        rows.append([f"{label}: one query / two jobs", *values, median([v for v in values if v is not None])])
    print_table("one query / two jobs, per round", ["", *(f"ROUND {n}" for n in rounds), "MEDIAN"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=20_000, help="payments in the raw stream (lines are more)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-seconds", type=float, default=20, help="200 lines/s before the measured load")
    parser.add_argument("--load-seconds", type=float, default=40, help="the measured 200 lines/s: how long")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, 2,000 payments, 5 + 10 s loads")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.payments, args.warmup_seconds, args.load_seconds = 1, 2_000, 5, 10
    started = time.monotonic()
    load_before = os.getloadavg()
    stream = mixed_stream(SEED, payments=args.payments, partitions=args.partitions)
    fresh = FreshLines.after(stream)
    runs: list[Run] = []
    with bench_stack("one-query") as (cluster, _, scratch):
        for n, variant in rotated(VARIANTS, args.rounds):
            runs.append(one_run(cluster, stream, fresh, variant, args, scratch, n))
    report(runs, load_before, os.getloadavg())
    print(f"\n{args.rounds} round(s), {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
