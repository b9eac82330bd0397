"""How the infer job's throughput changes with input partitions and with batch size, in both modes.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL). For 1, 2 and 4 partitions (batches of ``--batch``), then for several batch
sizes (maxOffsetsPerTrigger, 2 partitions), it drains the same pre-filled payments once per
mode, exactly-once and at-least-once alternating, each into fresh output topics.

A transaction has a fixed cost per batch and partition (begin, the marker, commit; a producer
and init_transactions only when a worker has none yet), so smaller batches pay it more often:
the last table fits seconds = a + b * batches per mode and shows the extra seconds per batch
of exactly-once. (The infer job's trigger is either "available now" — what is measured here,
with the batch size as the knob — or a fixed 1 s interval with --continuous, whose batches are
as large as what arrived in that second: see infer_throughput.py's fixed load.)

Usage: .venv/bin/python -m benchmarks.infer_scaling [--events 40000] [--batch 10000]
       [--partitions 1,2,4] [--batches 2000,5000,20000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness import alternating, bench_stack, median, print_table
from benchmarks.infer_throughput import ALOS, EOS, MB, Result, Variant, max_load
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import (
    create_topic,
    produce_payments,
    unique,
)

VARIANTS = {EOS: Variant(EOS, EOS), ALOS: Variant(ALOS, ALOS)}


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a + b x``: (a, b)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    b = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return mean_y - b * mean_x, b


def measure(
    cluster: KafkaContext, scratch: Path, events: int, partitions: int, batch: int, rounds: int
) -> dict[str, list[Result]]:
    topic = create_topic(cluster, unique("events.payments"), partitions)
    produce_payments(cluster, topic, payment_records(simulate(3, payments=events).payments), partitions)
    results: dict[str, list[Result]] = {EOS: [], ALOS: []}
    for _, mode in alternating([EOS, ALOS], rounds):
        result = max_load(cluster, topic, VARIANTS[mode], scratch, events=events, batch=batch, partitions=partitions)
        results[mode].append(result)
        print(f"{partitions} partitions, batch {batch}, {mode}: {result.rate:.0f} records/s", file=sys.stderr)
    return results


def row(label: object, batch: int, results: dict[str, list[Result]]) -> list[object]:
    eos, alos = (median([r.rate for r in results[m]]) or 0.0 for m in (EOS, ALOS))
    ratios = [e.rate / a.rate for e, a in zip(results[EOS], results[ALOS], strict=True)]
    batches = results[EOS][0].batches
    peak = max(r.peak_rss for rs in results.values() for r in rs) / MB
    return [label, batch, batches, eos, alos, median(ratios), peak]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=10_000, help="maxOffsetsPerTrigger for the partitions table")
    parser.add_argument("--partitions", default="1,2,4")
    parser.add_argument("--batches", default="2000,5000,20000", help="maxOffsetsPerTrigger values, 2 partitions")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    headers = ["", "BATCH", "BATCHES", "EOS REC/S", "ALOS REC/S", "EOS/ALOS", "PEAK PSS MB"]
    with bench_stack("scaling") as (cluster, _, scratch):
        by_partitions = []
        for partitions in (int(p) for p in args.partitions.split(",")):
            results = measure(cluster, scratch, args.events, partitions, args.batch, args.rounds)
            by_partitions.append(row(f"{partitions} partitions", args.batch, results))
        print_table(f"infer by input partitions ({args.events} events, local[2])", headers, by_partitions)
        by_batch, seconds = [], {EOS: [], ALOS: []}  # type: ignore[var-annotated]
        for batch in (int(b) for b in args.batches.split(",")):
            results = measure(cluster, scratch, args.events, 2, batch, args.rounds)
            by_batch.append(row("2 partitions", batch, results))
            for mode in (EOS, ALOS):
                seconds[mode] += [(r.batches, r.seconds) for r in results[mode]]
        print_table(f"infer by batch size ({args.events} events)", headers, by_batch)
        fits = {mode: fit_line([b for b, _ in pts], [s for _, s in pts]) for mode, pts in seconds.items()}
        print_table(
            "seconds = a + b * batches (least squares over the batch-size runs)",
            ["MODE", "A (S)", "B (S PER BATCH)"],
            [[mode, a, b] for mode, (a, b) in fits.items()]
            + [["exactly-once extra per batch", None, fits[EOS][1] - fits[ALOS][1]]],
        )


if __name__ == "__main__":
    main()
