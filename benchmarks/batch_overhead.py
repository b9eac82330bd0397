"""The driver's cost per small micro-batch of the infer job, this checkout against another, alternating.

Each round runs the infer job (foreachBatch, exactly-once) in a fresh Python process over one input
of small batches, once with this checkout's code and once with ``--base`` (a folder holding another
checkout, e.g. ``git archive main | tar -x -C /tmp/base``), alternating (A B A B ...). Inside that
process the batch function is timed, and within it every ``collect`` (the Spark job of the write
tasks, and of any check that runs one); what is left is the driver's own work per batch: py4j
calls, plan checks, building the write DataFrame. ``--profile`` prints the slowest functions of the
batch function (cProfile, per batch) too; ``--event-log DIR`` keeps Spark's event logs, whose task
metrics (scheduler delay, deserialization, the Python runner's time) say where a task waits.

Tables only; nothing here asserts anything about time.

Usage: .venv/bin/python -m benchmarks.batch_overhead --base /tmp/base [--rounds 3] [--events 3000] [--batch 100]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import alternating, bench_stack, median, print_table
from ikkai.contract.kafka import KafkaContext

REPO = Path(__file__).resolve().parents[1]
WARM_BATCHES = 5  # the first batches start the Python workers and load the model: left out
BATCH_LINE = re.compile(r": batch \d+ committed (\d+) records, slowest partition ([\d.]+) s")

# One run, in the job's own process: the job started as ``ikkai jobs run infer`` starts it, the batch function timed.
PROBE = r"""
import cProfile, io, json, pstats, sys, time
from pyspark.sql.classic.dataframe import DataFrame  # classic's collect, not the interface's
from spark_jobs import streaming_job
from spark_jobs.infer.job import InferOptions
from spark_jobs.session import spark_session
from spark_jobs.streaming_job import run_job
from spark_jobs.streaming_options import opened

args = json.loads(sys.argv[1])
conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": args["event_log"]} if args["event_log"] else {}
spark_session("ikkai-" + args["query"], conf=conf)  # run_job's getOrCreate finds it
calls, collects, profile = [], [], cProfile.Profile()
collect = DataFrame.collect

def timed_collect(self):
    started = time.perf_counter()
    try:
        return collect(self)
    finally:
        collects[-1] += time.perf_counter() - started

DataFrame.collect = timed_collect
call = streaming_job.ErrorKeepingBatch.__call__

def timed_call(self, batch, batch_id):
    collects.append(0.0)
    profiled = len(calls) >= args["warm"]
    started = time.perf_counter()
    if profiled:
        profile.enable()
    try:
        return call(self, batch, batch_id)
    finally:
        if profiled:
            profile.disable()
        calls.append(time.perf_counter() - started)

streaming_job.ErrorKeepingBatch.__call__ = timed_call
given = InferOptions(
    bootstrap=args["bootstrap"], checkpoint=args["checkpoint"], query=args["query"], input_topic=args["input"],
    decisions=args["decisions"], outbox=args["outbox"], dlq=args["dlq"], max_offsets_per_trigger=args["batch"],
)
job = given.job()
run_job(opened(job.name, given, given.query_name, job.outputs.written), job)
kept = slice(args["warm"], None)
top = ""
if args["profile"]:
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args["profile"])
    top = text.getvalue()
print(json.dumps({"calls": calls[kept], "collects": collects[kept], "profile": top}))
"""


def one_run(
    code: Path, cluster: KafkaContext, scratch: Path, input_topic: str, args: argparse.Namespace, name: str
) -> dict[str, Any]:
    from stack.kit.topic_io import create_topic, unique

    outputs = {kind: create_topic(cluster, unique(f"{kind}.bench"), args.partitions)
               for kind in ("decisions", "outbox", "dlq")}  # fmt: skip
    probe = {
        "bootstrap": cluster.bootstrap_servers, "checkpoint": str(scratch / unique("checkpoint")),
        "query": unique(name), "input": input_topic, "batch": args.batch, "warm": WARM_BATCHES, "profile": args.profile,
        "event_log": args.event_log and str(Path(args.event_log) / name), **outputs,
    }  # fmt: skip
    if args.event_log:
        Path(probe["event_log"]).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(probe)], cwd=code, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    lines = [BATCH_LINE.search(line) for line in done.stderr.splitlines()]
    result["written"] = [(int(m[1]), float(m[2])) for m in lines if m is not None][WARM_BATCHES:]
    return result


def measured_bound(written: list[tuple[int, float]], events: int, batch: int, args: argparse.Namespace) -> list[object]:
    """(records/s of one partition's writer, outputs per input, the bound they give for a 60 s timeout)."""
    from spark_jobs.options import measured_max_offsets_per_trigger

    records, seconds = sum(r for r, _ in written), sum(s for _, s in written)
    if not records or not seconds:
        return [None, None, None]
    rate = records / args.partitions / seconds  # the slowest partition's seconds, an even share of the records
    outputs = records / (batch * len(written)) if events else 0.0
    return [rate, outputs, measured_max_offsets_per_trigger(rate, outputs, 60_000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="another checkout's folder, the 'base' variant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=100, help="maxOffsetsPerTrigger: small batches")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--profile", type=int, default=0, help="print the N slowest functions of each run")
    parser.add_argument("--event-log", default="", help="keep Spark's event logs under this folder")
    args = parser.parse_args()
    from demo.payments_simulation import payment_records, simulate
    from stack.kit.topic_io import create_topic, produce_payments, unique

    codes = {"base": args.base.resolve(), "this": REPO}
    rows, ratios, bounds = [], [], []
    with bench_stack("batch-overhead") as (cluster, _connect, home):
        input_topic = create_topic(cluster, unique("events.bench"), args.partitions)
        produce_payments(cluster, input_topic, payment_records(simulate(7, payments=args.events).payments),
                         args.partitions)  # fmt: skip
        scratch = Path(tempfile.mkdtemp(dir=home))
        driver: dict[tuple[int, str], float] = {}
        for round_, variant in alternating(list(codes), args.rounds):
            run = one_run(codes[variant], cluster, scratch, input_topic, args, f"{variant}{round_}")
            calls, collects = run["calls"], run["collects"]
            own = [c - j for c, j in zip(calls, collects, strict=True)]
            driver[round_, variant] = median(own) or 0.0
            rows.append([round_, variant, len(calls), 1000 * (median(calls) or 0), 1000 * (median(collects) or 0),
                         1000 * driver[round_, variant]])  # fmt: skip
            bounds.append([round_, variant, *measured_bound(run["written"], args.events, args.batch, args)])
            if run["profile"]:
                print(f"\n## {variant} round {round_}: cProfile of {len(calls)} batch functions\n{run['profile']}")
        for round_ in range(1, args.rounds + 1):
            base, this = driver[round_, "base"], driver[round_, "this"]
            ratios.append([round_, this / base if base else None])
    print_table(
        f"The batch function per small batch ({args.batch} events, {args.partitions} partitions; medians, ms)",
        ["round", "code", "batches", "batch function", "in collect", "driver's own"],
        rows,
    )
    print_table("The driver's own work per batch, this / base", ["round", "ratio"], ratios)
    print_table(
        "The write rate measured, and the batch bound it gives (measured_max_offsets_per_trigger, 60 s timeout)",
        ["round", "code", "records/s per partition", "outputs per input", "bound"],
        bounds,
    )
    print(f"\nmedian ratio: {median([r[1] for r in ratios if r[1] is not None])}")


if __name__ == "__main__":
    main()
