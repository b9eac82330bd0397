"""A running pipeline, both sides in one run: ikkai's infer job against the Kafka Streams peer at steady state.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL). Per round, each variant runs as ONE continuous job on a fresh input topic:

* ``ikkai exactly-once``: the infer job (``--continuous``, its default trigger and batch bound) with the
  ``TransactionalBatchWriter``; started with ``--progress``, which prints every batch's
  ``StreamingQueryProgress`` (``durationMs`` by phase) on stderr (``spark_jobs.progress``);
* ``ikkai transactions off``: the same job and writer with ``--benchmark-without-transactions`` (its producers
  have no ``transactional.id``; NOT exactly-once): the like-for-like baseline of what the transactions cost;
* ``peer exactly_once_v2``: the Kafka Streams peer of ``peer_streams.py`` (Kafka Streams' defaults,
  ``--threads`` stream threads);
* by ``--variants``, also ``ikkai at-least-once (Spark's sink)`` (``--mode at-least-once``: another write path,
  back through the JVM) and the trials named in ``TRIALS``.

What one run does, in order:

0. **the broker warmed first**, once before round 1: ``--broker-warmup`` payments produced in transactions
   and read by a read_committed consumer, so round 1 does not pay the broker's own warm-up (its JIT, its
   page cache); the broker's CPU and JIT compilations are given for each window too.
1. **rounds in rotation**: the variants' order turns by one place per round (``harness.rotated``: A B C,
   B C A, C A B), so over three rounds each variant runs once first, second and third.
2. **backlog**: the input is pre-filled with ``--backlog`` payments (a simulated set of ``--distinct``
   payments repeated; the same records for every variant), then the job starts; a feeder thread keeps
   the job's lag (produced - decided) near ``--backlog`` until the measurement ends.
3. **warm-up**, excluded and reported apart, the same rule for both sides (``steady_method.WarmUp``): at
   least ``--warmup-events`` decisions, and the JIT of the job's JVMs settled: fewer than
   ``--jit-threshold`` compilations over the last ``--jit-quiet`` seconds (``jit_activity``: the Spark
   driver's JVM, the peer's JVM). A warm-up that has not settled after ``--warmup-cap`` seconds ends
   there, and the table says so. ikkai's window then starts at the decisions of its next batch.
4. **maximum load**: from the end of the warm-up until ``--events`` decisions more have reached a
   read_committed consumer, or ``--seconds`` have passed and a batch of its own arrived. Events/s = decisions /
   seconds; CPU = user + system of the job's process tree over the same interval, per 1,000 events; the JIT
   compilations inside the window; and the same for each **half** of the window (a window still warming
   is faster and cheaper in its second half). Then the feeder stops and the backlog drains.
5. **fixed loads**: 200/s, 2,000/s and 50% of this run's own maximum, ``--load-seconds`` each, with
   payments of their own keys. Latency = the produce call's wall clock → the wall clock at which the
   read_committed consumer of the decisions topic received the decision; p50/p99/max over every payment.

Peak memory is the proportional set size (PSS) of the job's process tree, sampled every 0.25 s. Ratios of
throughput and CPU are per round (the same load on the machine, minutes apart), with their median and
spread; p99s, which move from run to run, are given per round and compared by their medians, with the
range. The targets table gives infer's targets against those medians: met, not met, or not measured. They
count from an idle machine only: the load average before and after is printed with them.

Usage: .venv/bin/python -m benchmarks.steady_state [--events 400000] [--seconds 60] [--rounds 3] [--quick]
       [--warmup-events 300000] [--jit-quiet 10] [--jit-threshold 50] [--warmup-cap 300]
       [--broker-warmup 300000] [--load-seconds 20] [--partitions 2] [--threads 2] [--batch N] [--variants ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks.harness import JobProcess, bench_stack, python_module, rotated
from benchmarks.steady_method import (
    Sample,
    WarmUp,
    last_rise,
    recent_compilations,
    warm_up_end,
    warmed_up,
    window_start,
)
from benchmarks.steady_tables import (
    ALL_VARIANTS,
    IKKAI_ALOS,
    IKKAI_BACK_TO_BACK,
    IKKAI_DATA_SOURCE,
    IKKAI_EOS,
    IKKAI_TXN_OFF,
    IKKAI_WORKER_PRODUCERS,
    PEER_EOS,
    SAMPLE_S,
    VARIANTS,
    BrokerWarmUp,
    Run,
    growth,
    latency_summary,
    measured_batches,
    new_producers,
    report,
)
from benchmarks.steady_tables import LOAD_LABELS as LOAD_LABELS  # enrich_steady's fixed loads are these
from benchmarks.steady_tables import Load as Load
from benchmarks.steady_tables import phase_summary as phase_summary
from ikkai.contract.kafka import KafkaContext
from spark_jobs.progress import parse_progress

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


def produce_waiting(producer: Any, topic: str, key: bytes, value: bytes, partition: int) -> None:
    """One record; a full local queue is served first, never an error."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


class Feeder:
    """Produces the input's payments in a loop, keeping ``produced - decided()`` at ``backlog`` until stopped."""

    def __init__(
        self, cluster: KafkaContext, topic: str, data: Input, partitions: int, backlog: int, decided: Callable[[], int]
    ) -> None:
        from confluent_kafka import Producer

        from ikkai.contract.partitioning import kafka_partition

        self.produced = 0
        self._stop = threading.Event()
        producer = Producer(cluster.producer_config(**{"linger.ms": 20}))
        records = [(key, value, kafka_partition(key, partitions)) for key, value in data.encoded]

        def produce(count: int) -> None:
            for _ in range(count):
                produce_waiting(producer, topic, *records[self.produced % len(records)])
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
    """A ``Sample`` every ``SAMPLE_S``: the job's decisions, its tree's CPU and JIT, the broker's CPU and JIT."""

    def __init__(self, job: JobProcess, count: Callable[[], int], broker_pids: Sequence[int] = ()) -> None:
        self.samples: list[Sample] = []
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.wait(SAMPLE_S):
                self.samples.append(sample(job.process.pid, count(), broker_pids))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def latest(self) -> Sample:
        while not self.samples:
            time.sleep(0.05)
        return self.samples[-1]

    def since(self, at: float) -> list[Sample]:
        return [s for s in self.samples if s.at >= at]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def sample(root: int, decided: int, broker_pids: Sequence[int] = ()) -> Sample:
    """One ``Sample`` of the job rooted at ``root`` (and of the broker's processes), read in one pass of /proc."""
    from benchmarks.harness import proc_stats, process_tree
    from benchmarks.jit_activity import compilations

    stats = proc_stats()
    tree = [pid for pid in process_tree(root, stats) if pid in stats]
    cpu = sum(stats[pid].own_cpu_s + stats[pid].children_cpu_s for pid in tree)
    jvms = [pid for pid in tree if stats[pid].name == "java"]
    brokers = [pid for pid in broker_pids if pid in stats]
    broker_cpu = sum(stats[pid].own_cpu_s for pid in brokers) if brokers else None
    broker_jit = compilations(brokers) if brokers else None
    return Sample(time.monotonic(), decided, cpu, compilations(jvms), broker_cpu, broker_jit)


def broker_processes(scratch: Path) -> list[int]:
    """The embedded stack's broker processes (none on an external cluster: its figures are then not known)."""
    from stack import processes

    live = processes.stack_processes(scratch / "stack")
    return [pid for name, pids in live.items() if name.startswith("broker") for pid in pids]


def warm_broker(
    cluster: KafkaContext, data: Input, partitions: int, events: int, brokers: Sequence[int]
) -> BrokerWarmUp:
    """``events`` payments produced in transactions of 5,000, read back by a read_committed consumer."""
    from confluent_kafka import Producer

    from benchmarks.infer_throughput import DecisionWatch
    from ikkai.contract.partitioning import kafka_partition
    from stack.kit.topic_io import create_topic, unique

    topic = create_topic(cluster, unique("events.payments.warm"), partitions)
    watch = DecisionWatch(cluster, topic)
    before = sample(os.getpid(), 0, brokers)
    producer = Producer(cluster.producer_config(
        **{"transactional.id": unique("bench.warm"), "linger.ms": 20}))  # fmt: skip
    producer.init_transactions(60)
    records = [(key, value, kafka_partition(key, partitions)) for key, value in data.encoded]
    try:
        for start in range(0, events, 5_000):
            producer.begin_transaction()
            for i in range(start, min(start + 5_000, events)):
                produce_waiting(producer, topic, *records[i % len(records)])
            producer.commit_transaction(60)
        give_up_at = time.monotonic() + 600
        while watch.count < events and time.monotonic() < give_up_at:
            time.sleep(0.05)
    finally:
        watch.close()
    after = sample(os.getpid(), watch.count, brokers)
    return BrokerWarmUp(watch.count, after.at - before.at, growth(before.broker_cpu_s, after.broker_cpu_s),
                        growth(before.broker_compilations, after.broker_compilations))  # fmt: skip


Starter = Callable[[Any, Path], JobProcess]


def starters(build: Path, cluster: KafkaContext, args: argparse.Namespace) -> dict[str, Starter]:
    from benchmarks.peer_streams import start_peer
    from stack.kit.topic_io import unique

    extra = ["--max-offsets-per-trigger", str(args.batch)] if args.batch else []

    def ikkai(mode: str, *more: str) -> Starter:
        def start(topics: Any, scratch: Path) -> JobProcess:
            checkpoint = scratch / unique("ck").replace(".", "-")
            command, cwd, env = python_module(
                "spark_jobs.infer", "--progress", "--bootstrap", cluster.bootstrap_servers,
                "--checkpoint", str(checkpoint), "--query", checkpoint.name, "--input", topics.input,
                "--decisions", topics.decisions, "--outbox", topics.outbox, "--dlq", topics.dlq, "--mode", mode,
                "--continuous", *extra, *more,
            )  # fmt: skip
            return JobProcess(command, cwd=cwd, env=env)

        return start

    def peer(topics: Any, scratch: Path) -> JobProcess:
        return start_peer(build, cluster, topics, "exactly_once_v2", scratch, threads=args.threads)

    return {IKKAI_EOS: ikkai("exactly-once"), IKKAI_TXN_OFF: ikkai("exactly-once", "--benchmark-without-transactions"),
            PEER_EOS: peer, IKKAI_ALOS: ikkai("at-least-once"),
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


def warm_up(job: JobProcess, sampler: Sampler, rule: WarmUp, variant: str) -> tuple[Sample, str, int | None, int]:
    """The sample the window starts at, how the warm-up ended (``steady_method.warm_up_end``), the job's JIT
    compilations over its last ``rule.quiet_s`` seconds, and how many progress lines are the warm-up's.

    The peer's window starts where its warm-up ends; ikkai's at the decisions of the first batch whose
    progress line came after it (its decisions arrive a batch at a time).
    """
    assert job.started is not None
    started = job.started
    capped = [False]

    def done() -> bool:
        if warmed_up(sampler.since(started), rule):
            return True
        capped[0] = time.monotonic() - started >= rule.cap_s
        return capped[0]

    _wait(done, job, rule.cap_s + 600, f"{variant} warm-up")
    ended = time.monotonic()
    warm = sampler.since(started)
    how, recent = warm_up_end(warm, rule, capped[0]), recent_compilations(warm, rule.quiet_s)
    if variant == PEER_EOS:
        return sampler.latest(), how, recent, 0
    _wait(lambda: any(at > ended for at, _ in parse_progress(job.stamped)), job, 600, f"{variant} warm-up's last batch")
    progress = parse_progress(job.stamped)
    through = next(i for i, (at, _) in enumerate(progress) if at > ended)
    decided = sum(int(p.get("numInputRows", 0)) for _, p in progress[: through + 1])  # one decision per payment
    _wait(lambda: window_start(sampler.samples, decided) is not None, job, 600, f"{variant} warm-up decisions")
    first = window_start(sampler.samples, decided)
    assert first is not None
    return first, how, recent, through + 1


def one_run(
    cluster: KafkaContext, variant: str, start: Starter, data: Input, scratch: Path, args: argparse.Namespace, n: int,
    position: int, brokers: Sequence[int],
) -> Run:  # fmt: skip
    from benchmarks.infer_throughput import DecisionWatch, fresh_outputs
    from stack.kit.topic_io import create_topic, unique

    topic = create_topic(cluster, unique("events.payments.steady"), args.partitions)
    topics = fresh_outputs(cluster, topic, args.partitions)
    watch = DecisionWatch(cluster, topics.decisions)
    feeder = Feeder(cluster, topic, data, args.partitions, args.backlog, lambda: watch.count)
    job = start(topics, scratch)
    run = Run(n, variant, position)
    sampler = Sampler(job, lambda: watch.count, brokers)
    rule = WarmUp(args.warmup_events, args.jit_quiet, args.jit_threshold, args.warmup_cap)
    try:
        job.wait_started()
        feeder.start()
        assert job.started is not None
        first, run.warmup_end, run.warmup_recent_jit, warm_batches = warm_up(job, sampler, rule, variant)
        run.warmup_s, run.warmup_events = first.at - job.started, first.decided

        def window_done() -> bool:
            latest = sampler.latest()
            more = latest.decided - first.decided  # a window ends on time only after a batch of its own arrived
            return bool(more >= args.events or (more > 0 and latest.at - first.at >= args.seconds))

        _wait(window_done, job, args.seconds + 600, f"{variant} maximum load")
        window = sampler.since(first.at)
        window = window[: window.index(last_rise(window)) + 1]
        run.measured(window)
        end = window[-1].at
        run.progress = measured_batches([p for _, p in parse_progress(job.stamped)[warm_batches:]], run.events)
        run.new_producers = new_producers(job.stamped, first.at, end + SAMPLE_S)
        print(f"round {n}, {variant}: {run.rate:,.0f} events/s after {run.warmup_s:.1f} s of warm-up"
              f" ({run.warmup_end})", file=sys.stderr, flush=True)  # fmt: skip
        total = feeder.stop()
        _wait(lambda: watch.count >= total, job, 1800, f"{variant} draining the backlog")
        for label, rate in zip(LOAD_LABELS, (200.0, 2000.0, run.rate / 2), strict=True):
            load_began = time.monotonic()
            run.loads.append(fixed_load(cluster, topic, watch, job, data, label, rate, args, f"r{n}{len(run.loads)}"))
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
    cluster: KafkaContext, topic: str, watch: Any, job: JobProcess, data: FreshRecords, label: str, rate: float,
    args: argparse.Namespace, tag: str,
) -> Load:  # fmt: skip
    from confluent_kafka import Producer

    from ikkai.contract.partitioning import kafka_partition

    records = data.fresh(tag, max(1, int(rate * args.load_seconds)))  # before the clock starts
    producer = Producer(cluster.producer_config(**{"linger.ms": 1}))
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
    parser.add_argument("--seconds", type=float, default=60, help="... or this long (once a batch of its own arrived)")
    parser.add_argument("--rounds", type=int, default=3, help="the order turns each round: 3 puts each variant in "
                        "each place once")  # fmt: skip
    parser.add_argument("--warmup-events", type=int, default=WarmUp.events, help="decisions excluded as warm-up, least")
    parser.add_argument("--jit-quiet", type=float, default=WarmUp.quiet_s, help="seconds the JIT must be quiet for")
    parser.add_argument("--jit-threshold", type=int, default=WarmUp.threshold,
                        help="... quiet: fewer compilations than this in those seconds")  # fmt: skip
    parser.add_argument("--warmup-cap", type=float, default=WarmUp.cap_s, help="a warm-up ends here, reported")
    parser.add_argument("--broker-warmup", type=int, default=300_000, help="payments through the broker before round 1")
    parser.add_argument("--backlog", type=int, help="payments waiting for the job [default: 2 ikkai batches]")
    parser.add_argument("--load-seconds", type=float, default=20, help="each fixed load: how long")
    parser.add_argument("--distinct", type=int, default=10_000, help="simulated payments the backlog repeats")
    parser.add_argument("--batch", type=int, help="ikkai's maxOffsetsPerTrigger [default: the job's own]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="the peer's num.stream.threads (ikkai: local[2])")
    parser.add_argument(
        "--variants", type=lambda text: tuple(v.strip() for v in text.split(",")), default=VARIANTS,
        help=f"comma-separated, of: {', '.join(ALL_VARIANTS)} [default: the first three]",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, small counts, a 40 s warm-up cap")
    args = parser.parse_args()
    unknown = [v for v in args.variants if v not in ALL_VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {list(ALL_VARIANTS)}")
    if args.quick:
        args.rounds, args.events, args.seconds, args.load_seconds = 1, 20_000, 15, 3
        args.distinct, args.warmup_events, args.jit_quiet, args.warmup_cap = 2_000, 10_000, 3, 40
        args.broker_warmup, args.batch = 10_000, args.batch or 5_000
    from benchmarks.peer_streams import build_peer

    build = build_peer()
    started = time.monotonic()
    if args.backlog is None:
        from spark_jobs.options import default_max_offsets_per_trigger

        args.backlog = 2 * (args.batch or default_max_offsets_per_trigger())
    data = Input.simulated(args.distinct)
    load_before = os.getloadavg()[0]
    with bench_stack("steady") as (cluster, _, scratch):
        brokers = broker_processes(scratch)
        broker = warm_broker(cluster, data, args.partitions, args.broker_warmup, brokers)
        start = starters(build, cluster, args)
        order = rotated(args.variants, args.rounds)
        runs = [one_run(cluster, name, start[name], data, scratch, args, n, i % len(args.variants) + 1, brokers)
                for i, (n, name) in enumerate(order)]  # fmt: skip
    report(runs, broker, (load_before, os.getloadavg()[0]))
    print(f"\n{args.rounds} round(s), {args.events:,} events measured per run, {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
