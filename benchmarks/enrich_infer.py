"""The enrich and infer jobs together, exactly-once against at-least-once, A B A B in one run.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL), publishes master data and lands a seeded raw stream (``raw_payments.mixed_stream``:
valid payments, status updates, retries, late and malformed lines) in an ``ingest.payments``
topic once. Each round and mode then runs both jobs at the same time as their own processes into
fresh topics: enrich drains the raw lines to the end (``ingest.payments`` → ``events.payments`` +
``dlq.enrich``), infer runs continuously on what enrich commits (``events.payments`` →
``decisions.fraud`` + ``outbox.requests``). The clock runs from the first job's start-up line
(its Spark is up) until a read_committed consumer has seen one decision per event enrich wrote.
Both jobs share the machine's 2 cores, as they would on one host.

Usage: .venv/bin/python -m benchmarks.enrich_infer [--payments 20000] [--batch 5000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.harness import JobProcess, alternating, bench_stack, median, print_table, python_module
from benchmarks.infer_throughput import ALOS, EOS, MB, DecisionWatch
from demo.payments_simulation import generate_profiles
from demo.raw_payments import MixedStream, mixed_stream, produce_lines
from ikkai.contract.kafka import KafkaContext
from spark_jobs.enrich.master_data import publish_profiles
from stack.kit.topic_io import (
    by_partition,
    create_topic,
    unique,
)

SEED = 11


def land_raw_stream(
    cluster: KafkaContext, payments: int, partitions: int, stream: MixedStream | None = None
) -> tuple[str, str, str, int]:
    """(ingest topic, merchants topic, customers topic, raw lines): master data first, then the lines.

    ``stream`` is the seeded stream of ``payments`` payments when the caller made it already.
    """
    stream = stream or mixed_stream(SEED, payments=payments, partitions=partitions)
    name = unique("bench")
    merchants_topic, customers_topic = f"masterdata.merchants.{name}", f"masterdata.customers.{name}"
    merchants, customers = generate_profiles(stream.world, SEED)
    publish_profiles(cluster, merchants, customers, merchants_topic=merchants_topic,
                     customers_topic=customers_topic, transactional_id=unique("bench.masterdata"))  # fmt: skip
    ingest = create_topic(cluster, f"ingest.payments.{name}", partitions)
    return ingest, merchants_topic, customers_topic, produce_lines(cluster, ingest, stream.lines)


def one_round(
    cluster: KafkaContext, raw: tuple[str, str, str, int], mode: str, args: argparse.Namespace, scratch: Path
) -> list[object]:
    ingest, merchants, customers, lines = raw
    name = unique("pipe").replace(".", "-")
    events, dlq_enrich = f"events.payments.{name}", f"dlq.enrich.{name}"
    decisions, outbox, dlq_infer = f"decisions.{name}", f"outbox.{name}", f"dlq.infer.{name}"
    for topic in (events, dlq_enrich, decisions, outbox, dlq_infer):
        create_topic(cluster, topic, args.partitions)
    batch = ["--max-offsets-per-trigger", str(args.batch), "--mode", mode, "--bootstrap", cluster.bootstrap_servers]
    enrich_command, cwd, env = python_module(
        "spark_jobs.enrich", "--checkpoint", str(scratch / f"enrich-{name}"), "--query", f"enrich-{name}",
        "--input", ingest, "--output", events, "--dlq", dlq_enrich, "--merchants", merchants,
        "--customers", customers, *batch,
    )  # fmt: skip
    infer_command, _, _ = python_module(
        "spark_jobs.infer", "--checkpoint", str(scratch / f"infer-{name}"), "--query", f"infer-{name}",
        "--input", events, "--decisions", decisions, "--outbox", outbox, "--dlq", dlq_infer, "--continuous", *batch,
    )  # fmt: skip
    watch = DecisionWatch(cluster, decisions)
    enrich = JobProcess(enrich_command, cwd=cwd, env=env, start_marker=", mode ")
    infer = JobProcess(infer_command, cwd=cwd, env=env)
    try:
        enrich.wait_started()
        infer.wait_started()
        assert enrich.started is not None and infer.started is not None
        if enrich.wait() != 0:
            raise SystemExit(f"enrich ({mode}) failed:\n{enrich.tail()}")
        written = sum(len(records) for records in by_partition(cluster, events).values())
        give_up_at = time.monotonic() + 600
        while watch.count < written:
            if infer.process.poll() is not None or time.monotonic() > give_up_at:
                raise SystemExit(f"infer ({mode}): {watch.count} of {written} decisions:\n{infer.tail()}")
            time.sleep(0.1)
        assert watch.last is not None
        seconds = watch.last - (time.time() - (time.monotonic() - min(enrich.started, infer.started)))
    finally:
        infer.stop()
        watch.close()
    return [mode, lines, written, watch.count, seconds, lines / seconds, (enrich.memory.peak + infer.memory.peak) / MB]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=20_000, help="payments in the raw stream (lines are more)")
    parser.add_argument("--batch", type=int, default=5_000, help="maxOffsetsPerTrigger of both jobs")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    rows: list[list[object]] = []
    with bench_stack("enrich-infer") as (cluster, _, scratch):
        raw = land_raw_stream(cluster, args.payments, args.partitions)
        for n, mode in alternating([EOS, ALOS], args.rounds):
            rows.append([n, *one_round(cluster, raw, mode, args, scratch)])
            print(f"enrich+infer round {n}, {mode}: {rows[-1][6]:.0f} raw lines/s", file=sys.stderr, flush=True)
    headers = ["ROUND", "MODE", "RAW LINES", "EVENTS", "DECISIONS", "SECONDS", "LINES/S", "PEAK PSS MB (SUM)"]
    print_table(f"enrich + infer together (batches of {args.batch})", headers, rows)
    rates = {(r[0], r[1]): float(str(r[6])) for r in rows}
    ratios = [rates[(n, EOS)] / rates[(n, ALOS)] for n in range(1, args.rounds + 1)]
    print_table(
        "enrich + infer: ratios per round",
        ["", *(f"ROUND {n}" for n in range(1, args.rounds + 1)), "MEDIAN"],
        [[f"{EOS} / {ALOS}", *ratios, median(ratios)]],
    )


if __name__ == "__main__":
    main()
