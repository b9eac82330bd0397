"""The enrich job alone at maximum load: exactly-once against at-least-once, A B A B in one run.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL), publishes master data and lands a seeded raw stream
(``raw_payments.mixed_stream``: valid payments, status updates, retries, late and malformed lines)
in an ``ingest.payments`` topic once. Each round and variant then drains all of it into fresh
``events.payments`` and ``dlq.enrich`` topics (batches of ``--batch`` = maxOffsetsPerTrigger).
Raw lines/s from the job's start-up line (", mode ...": Spark is up, the query is about to start)
to the process's exit: JVM start-up excluded, query start and shutdown included, the same for
every variant. Every line must come out once (events + dead letters = lines).

Peak memory is the PSS of the job's whole process tree. Ratios are per round (same load on the
machine, minutes apart); quote the medians.

Usage: .venv/bin/python -m benchmarks.enrich_throughput [--payments 20000] [--batch 10000] [--rounds 3]
       [--partitions 2] [--compare-code DIR]

``--compare-code DIR`` adds a third variant: exactly-once with the code of another checkout
(e.g. ``git worktree add /tmp/before <commit>``), to measure a change side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from benchmarks.enrich_infer import land_raw_stream
from benchmarks.harness import JobProcess, alternating, bench_stack, python_module
from benchmarks.infer_throughput import ALOS, EOS, MB, Result, Variant, batch_costs, report
from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import by_partition, create_topic, unique


def drain(cluster: KafkaContext, raw: tuple[str, str, str, int], variant: Variant, args: argparse.Namespace,
          scratch: Path) -> Result:  # fmt: skip
    """One run of the enrich job over the whole raw stream into fresh topics: lines/s and its batches."""
    ingest, merchants, customers, lines = raw
    name = unique("enrich").replace(".", "-")
    events, dlq = f"events.payments.{name}", f"dlq.enrich.{name}"
    for topic in (events, dlq):
        create_topic(cluster, topic, args.partitions)
    command, cwd, env = python_module(
        "spark_jobs.enrich", "--bootstrap", cluster.bootstrap_servers, "--checkpoint", str(scratch / name),
        "--query", name, "--input", ingest, "--output", events, "--dlq", dlq, "--merchants", merchants,
        "--customers", customers, "--mode", variant.mode, "--max-offsets-per-trigger", str(args.batch),
        code=variant.code,
    )  # fmt: skip
    job = JobProcess(command, cwd=cwd, env=env, start_marker=", mode ")
    seconds = job.run_to_end(variant.name)
    written = sum(len(records) for topic in (events, dlq) for records in by_partition(cluster, topic).values())
    if written != lines:
        raise SystemExit(f"{variant.name}: {written} events and dead letters for {lines} raw lines")
    batch_s, producers = batch_costs(job.log)
    return Result(0, variant.name, lines, seconds, job.memory.peak, batches=len(job.batches), batch_s=batch_s,
                  new_producers=producers)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=20_000, help="payments in the raw stream (lines are more)")
    parser.add_argument("--batch", type=int, default=10_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--compare-code", type=Path, help="another checkout: its exactly-once as a third variant")
    args = parser.parse_args()
    variants = [Variant(EOS, EOS), Variant(ALOS, ALOS)]
    if args.compare_code:
        variants.insert(1, Variant(f"{EOS}@{args.compare_code.name}", EOS, args.compare_code.resolve()))
    names = {v.name: v for v in variants}
    results: list[Result] = []
    with bench_stack("enrich") as (cluster, _, scratch):
        raw = land_raw_stream(cluster, args.payments, args.partitions)
        for n, name in alternating(list(names), args.rounds):
            result = dataclasses.replace(drain(cluster, raw, names[name], args, scratch), round=n)
            results.append(result)
            print(
                f"enrich, round {n}, {name}: {result.rate:.0f} raw lines/s ({result.seconds:.1f} s, peak PSS "
                f"{result.peak_rss / MB:.0f} MB, {result.batch_s or 0:.2f} s/batch)",
                file=sys.stderr,
                flush=True,
            )
    report(f"enrich alone, maximum load ({raw[3]} raw lines, batches of {args.batch})", results, variants, False)


if __name__ == "__main__":
    main()
