"""The infer job in exactly-once mode against Spark's own (at-least-once) sink, A B A B in one run.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL) and measures, for each round and mode, into fresh output topics:

* **maximum load**: the job drains a pre-filled ``events.payments`` topic (``--events``, batches of
  ``--batch`` = maxOffsetsPerTrigger). Records/s from the job's "model ..." line (Spark is up,
  the query is about to start) to the process's exit: JVM start-up excluded, query start and
  shutdown included, the same for both modes.
* **fixed offered load**: the job runs continuously (its default `--trigger-interval`) while this script produces
  ``--rate`` payments/s for ``--seconds``. Latency of each payment = from the moment it was
  produced to the moment a read_committed consumer received its decision (wall clock, one
  process); p50 and p99 over all payments of the round, after a warm-up.

Peak memory is the resident set of the job's whole process tree (driver, JVM, Python workers),
sampled every 0.25 s. The EOS/ALOS ratio is per round (same load on the machine, minutes apart);
quote the median.

Usage: .venv/bin/python -m benchmarks.infer_throughput [--events 60000] [--batch 20000] [--rounds 3]
       [--rate 500] [--seconds 30] [--partitions 2] [--only max|fixed] [--compare-code DIR]

``--compare-code DIR`` adds a third variant: exactly-once with the code of another checkout
(e.g. ``git worktree add /tmp/before <commit>``), to measure a sink change side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import (
    JobProcess,
    alternating,
    bench_stack,
    median,
    percentile,
    print_table,
    python_module,
)
from demo.infer_process import InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from stack.kit.topic_io import by_partition, create_topic, produce_payments, unique

EOS, ALOS = "exactly-once", "at-least-once"
MB = 1024 * 1024


_WHOLE_BATCH = re.compile(r" of ([0-9.]+) s| written in ([0-9.]+) s")
_NEW_PRODUCERS = re.compile(r"\((\d+) new producers?\)")


def batch_costs(log: list[str]) -> tuple[float | None, float | None]:
    """(median seconds per batch, new producers per batch) from a job's "batch N ..." lines.

    The seconds are what the job's writer reports for its whole foreachBatch call (checks, model,
    write, commit); code that does not report it gives None.
    """
    lines = [line for line in log if ": batch " in line]
    seconds = [float(m.group(1) or m.group(2)) for line in lines if (m := _WHOLE_BATCH.search(line))]
    fresh = [int(m.group(1)) if (m := _NEW_PRODUCERS.search(line)) else 0 for line in lines]
    producers = sum(fresh) / len(lines) if lines and "committed" in lines[0] else None
    return median(seconds), producers


def decide_per_core(events: int = 20_000) -> float:
    """Payments/s of ``fraud_decisions.decide`` in this plain Python process (one core), chunks of 10,000."""
    import pandas as pd

    from spark_jobs.infer.fraud_decisions import Topics, decide
    from spark_jobs.model.fraud_model import FraudModel, load_snapshots

    codec = default_codec()
    payments = payment_records(simulate(5, payments=events).payments)
    rows = pd.DataFrame({
        "key": [str(p["payment_id"]).encode() for p in payments],
        "value": [codec.encode("payment_event", p, version=1) for p in payments],
        "topic": "events.payments", "partition": 0, "offset": range(events),
    })  # fmt: skip
    model, snapshots = FraudModel.load(), load_snapshots()
    started = time.perf_counter()
    for i in range(0, events, 10_000):
        decide(rows.iloc[i : i + 10_000], model, snapshots, codec, Topics())
    return events / (time.perf_counter() - started)


@dataclass(frozen=True)
class Variant:
    name: str
    mode: str
    code: Path | None = None  # another checkout's code, or this one


@dataclass(frozen=True)
class Result:
    round: int
    variant: str
    events: int
    seconds: float
    peak_rss: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    batches: int = 0
    batch_s: float | None = None  # median seconds of a batch's write (foreachBatch), from the job's progress lines
    new_producers: float | None = None  # new producers per batch (exactly-once), from the same lines

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def fresh_outputs(cluster: KafkaContext, input_topic: str, partitions: int) -> InferTopics:
    name = unique("bench")
    topics = InferTopics(input_topic, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, partitions)
    return topics


def start_infer(
    cluster: KafkaContext, topics: InferTopics, checkpoint: Path, variant: Variant, *extra: str
) -> JobProcess:
    args = [
        "--bootstrap", cluster.bootstrap_servers, "--checkpoint", str(checkpoint), "--query", checkpoint.name,
        "--input", topics.input, "--decisions", topics.decisions, "--outbox", topics.outbox, "--dlq", topics.dlq,
        "--mode", variant.mode, *extra,
    ]  # fmt: skip
    command, cwd, env = python_module("spark_jobs.infer", *args, code=variant.code)
    return JobProcess(command, cwd=cwd, env=env)


def max_load(
    cluster: KafkaContext,
    input_topic: str,
    variant: Variant,
    scratch: Path,
    *,
    events: int,
    batch: int,
    partitions: int,
) -> Result:
    """Drain ``input_topic`` (``events`` payments) into fresh outputs; records/s and the job's batches."""
    topics = fresh_outputs(cluster, input_topic, partitions)
    job = start_infer(
        cluster, topics, scratch / unique("max").replace(".", "-"), variant, "--max-offsets-per-trigger", str(batch)
    )
    seconds = job.run_to_end(variant.name)
    decisions = sum(len(records) for records in by_partition(cluster, topics.decisions).values())
    if decisions < events:
        raise SystemExit(f"{variant.name}: {decisions} decisions for {events} events")
    batch_s, producers = batch_costs(job.log)
    return Result(
        0, variant.name, events, seconds, job.memory.peak, batches=len(job.batches), batch_s=batch_s,
        new_producers=producers,
    )  # fmt: skip


class DecisionWatch:
    """A read_committed consumer of the decisions topic noting when each payment's decision arrived."""

    def __init__(self, cluster: KafkaContext, topic: str) -> None:
        from confluent_kafka import Consumer

        self.arrived: dict[bytes, float] = {}
        self.count = 0  # every record, duplicates included
        self.last: float | None = None  # wall clock of the newest record
        self._stop = threading.Event()
        self._consumer = Consumer(cluster.consumer_config(unique("bench.latency"), **{
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 10,
        }))  # fmt: skip
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.1)
            if message is not None and message.error() is None:
                self.count += 1
                self.last = time.time()
                self.arrived.setdefault(message.key() or b"", self.last)

    def wait_for(self, keys: list[bytes], timeout: float) -> bool:
        give_up_at = time.monotonic() + timeout
        while time.monotonic() < give_up_at:
            if all(key in self.arrived for key in keys):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def fixed_load(cluster: KafkaContext, variant: Variant, args: argparse.Namespace, scratch: Path, seed: int) -> Result:
    from confluent_kafka import Producer

    topic = create_topic(cluster, unique("events.payments.fixed"), args.partitions)
    topics = fresh_outputs(cluster, topic, args.partitions)
    warmup, count = 50, int(args.rate * args.seconds)
    payments = payment_records(simulate(seed, payments=warmup + count).payments)
    codec = default_codec()
    encoded = [
        (str(p["payment_id"]).encode(), codec.encode("payment_event", p, version=1)) for p in payments
    ]  # before the clock starts
    watch = DecisionWatch(cluster, topics.decisions)
    job = start_infer(cluster, topics, scratch / unique("fixed").replace(".", "-"), variant, "--continuous")
    producer = Producer(cluster.producer_config(**{"linger.ms": 1}))
    sent: dict[bytes, float] = {}
    try:
        job.wait_started()
        for key, value in encoded[:warmup]:  # the first batches start Python workers and producers
            producer.produce(topic, value=value, key=key, partition=kafka_partition(key, args.partitions))
        producer.flush(30)
        if not watch.wait_for([key for key, _ in encoded[:warmup]], timeout=300):
            raise SystemExit(f"{variant.name}: the warm-up payments got no decisions:\n{job.tail()}")
        started = time.monotonic()
        for i, (key, value) in enumerate(encoded[warmup:]):
            pause = started + i / args.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            sent[key] = time.time()
            producer.produce(topic, value=value, key=key, partition=kafka_partition(key, args.partitions))
            producer.poll(0)
        producer.flush(30)
        if not watch.wait_for(list(sent), timeout=120):
            missing = sum(1 for key in sent if key not in watch.arrived)
            raise SystemExit(f"{variant.name}: {missing} payments without a decision:\n{job.tail()}")
    finally:
        job.stop()
        watch.close()
    latencies = [(watch.arrived[key] - at) * 1000 for key, at in sent.items()]
    first, last = min(sent.values()), max(watch.arrived[key] for key in sent)
    batch_s, producers = batch_costs(job.log)
    return Result(
        0, variant.name, count, last - first, job.memory.peak, percentile(latencies, 50), percentile(latencies, 99),
        len(job.batches), batch_s, producers,
    )  # fmt: skip


def report(
    title: str, results: list[Result], variants: list[Variant], latency: bool, ceilings: dict[int, float] | None = None
) -> None:
    headers = ["ROUND", "MODE", "EVENTS", "SECONDS", "RECORDS/S", "PEAK PSS MB"]
    headers += ["P50 MS", "P99 MS"] if latency else []
    headers += ["BATCHES", "S/BATCH", "NEW PRODUCERS/BATCH"]
    rows: list[list[object]] = []
    for r in results:
        row: list[object] = [r.round, r.variant, r.events, r.seconds, r.rate, r.peak_rss / MB]
        row += [r.p50_ms, r.p99_ms] if latency else []
        rows.append([*row, r.batches, r.batch_s, r.new_producers])
    print_table(title, headers, rows)
    by = {(r.round, r.variant): r for r in results}
    rounds = sorted({r.round for r in results})
    ratio_rows: list[list[object]] = []
    for variant in (v for v in variants if v.name != ALOS):
        ratios = [by[(n, variant.name)].rate / by[(n, ALOS)].rate for n in rounds]
        ratio_rows.append([f"{variant.name} / {ALOS}", *ratios, median(ratios)])
        if latency:
            overheads = [
                (by[(n, variant.name)].p99_ms or 0) - (by[(n, ALOS)].p99_ms or 0) for n in rounds
            ]  # p99 overhead, ms
            ratio_rows.append([f"{variant.name} p99 - {ALOS} p99 (ms)", *overheads, median(overheads)])
    for other in (v for v in variants if v.code is not None):  # this code against the other checkout's
        speedups = [by[(n, EOS)].rate / by[(n, other.name)].rate for n in rounds]
        ratio_rows.append([f"{EOS} / {other.name}", *speedups, median(speedups)])
        if latency:
            p99s = [(by[(n, EOS)].p99_ms or 0) - (by[(n, other.name)].p99_ms or 0) for n in rounds]
            ratio_rows.append([f"{EOS} p99 - {other.name} p99 (ms)", *p99s, median(p99s)])
    if ceilings:
        cores = os.cpu_count() or 1
        shares = [by[(n, EOS)].rate / (ceilings[n] * cores) for n in rounds]
        ratio_rows.append(["decide() per core, one process (payments/s)", *(ceilings[n] for n in rounds),
                           median([ceilings[n] for n in rounds])])  # fmt: skip
        ratio_rows.append([f"{EOS} / (per core x {cores} cores)", *shares, median(shares)])
    print_table(f"{title}: ratios per round", ["", *(f"ROUND {n}" for n in rounds), "MEDIAN"], ratio_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=60_000, help="maximum load: pre-filled payments")
    parser.add_argument("--batch", type=int, default=20_000, help="maximum load: maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=500, help="fixed load: payments/s offered")
    parser.add_argument("--seconds", type=float, default=30, help="fixed load: how long")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--only", choices=("max", "fixed"))
    parser.add_argument("--compare-code", type=Path, help="another checkout: its exactly-once as a third variant")
    args = parser.parse_args()
    variants = [Variant(EOS, EOS), Variant(ALOS, ALOS)]
    if args.compare_code:
        variants.insert(1, Variant(f"{EOS}@{args.compare_code.name}", EOS, args.compare_code.resolve()))
    names = {v.name: v for v in variants}
    with bench_stack("pipeline") as (cluster, _, scratch):
        if args.only != "fixed":
            topic = create_topic(cluster, unique("events.payments"), args.partitions)
            produce_payments(
                cluster, topic, payment_records(simulate(3, payments=args.events).payments), args.partitions
            )
            results = []
            ceilings: dict[int, float] = {}
            for n, name in alternating(list(names), args.rounds):
                if n not in ceilings:  # the per-core ceiling in the same round, under the same load
                    ceilings[n] = decide_per_core()
                result = max_load(
                    cluster, topic, names[name], scratch, events=args.events, batch=args.batch,
                    partitions=args.partitions,
                )  # fmt: skip
                results.append(dataclasses.replace(result, round=n))
                print(f"max load, round {n}, {name}: {result.rate:.0f} records/s", file=sys.stderr, flush=True)
            title = f"infer, maximum load ({args.events} events, batches of {args.batch})"
            report(title, results, variants, False, ceilings)
        if args.only != "max":
            results = []
            for n, name in alternating(list(names), args.rounds):
                r = fixed_load(cluster, names[name], args, scratch, seed=100 + n)
                results.append(dataclasses.replace(r, round=n))
                print(f"fixed load, round {n}, {name}: p99 {r.p99_ms:.0f} ms", file=sys.stderr, flush=True)
            report(f"infer, fixed load ({args.rate:.0f} payments/s for {args.seconds:.0f} s)", results, variants, True)


if __name__ == "__main__":
    main()
