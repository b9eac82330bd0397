"""ikkai's infer job against a Kafka Streams peer doing the same work, in the same rounds, the order rotated.

The peer (``benchmarks/peers/kafka-streams/``, Java 17, Kafka Streams 4.3.1 from Maven Central)
decodes ``events.payments``, joins the same customer feature snapshots as of the event time, scores
with the same logistic regression and writes the same decisions and outbox requests. It is a
yardstick only: nothing in ikkai imports it. Built once with ``mvn -B -q package`` into a cache
folder named by the hash of its sources.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL), then:

* **check**: the peer drains a pre-filled topic once; its decision and outbox values are compared
  byte for byte with what ``fraud_decisions.decide`` returns for the same Kafka records (topic,
  partition, offset, key, value), and its output partitions with the input partitions.
* **maximum load**, per round and variant (ikkai exactly-once, peer exactly_once_v2, peer
  at_least_once), into fresh output topics: the job drains ``--events`` pre-filled payments.
  Records/s from the job's start line to the moment a read_committed consumer has every decision
  ("caught up"). Start lines: ikkai's "model ..." (Spark is up, the query about to start: query
  start included), the peer's "running" (Kafka Streams has its partitions, about to fetch). JVM
  start-up is excluded for both; neither's shutdown is counted.
* **fixed load**: the job runs continuously (ikkai: its documented default `--trigger-interval`; the peer: Kafka
  Streams' defaults, commit.interval.ms 100 ms with exactly_once_v2) while this script produces
  ``--rate`` payments/s for ``--seconds``; latency per payment = produced → a read_committed
  consumer has its decision; p50/p99 after a warm-up of 50 payments.

Each row also gives the CPU time the job's process tree spent per 1,000 events in the measured
interval (user + system, from /proc): on a shared machine it moves far less than the wall-clock rate.

Usage: .venv/bin/python -m benchmarks.peer_streams [--events 40000] [--batch 20000] [--rounds 3]
       [--rate 200] [--seconds 30] [--partitions 2] [--only check|max|fixed] [--threads 2]
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    JobProcess,
    bench_stack,
    java,
    median,
    percentile,
    print_table,
    proc_stats,
    process_tree,
    rotated,
)
from benchmarks.infer_throughput import EOS, DecisionWatch, Variant, fresh_outputs, start_infer
from demo.infer_process import InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec, schemas_dir
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from stack.kit.topic_io import by_partition, create_topic, produce_payments, unique

REPO = Path(__file__).resolve().parents[1]

PEER = REPO / "benchmarks" / "peers" / "kafka-streams"
IKKAI_EOS = "ikkai exactly-once"
PEER_EOS = "peer exactly_once_v2"
PEER_ALOS = "peer at_least_once"
VARIANTS = (IKKAI_EOS, PEER_EOS, PEER_ALOS)
MB = 1024 * 1024
WALL = time.time() - time.monotonic()  # JobProcess marks monotonic times; the consumer notes wall clock


# ---------------------------------------------------------------- the peer: build and run


def source_digest(root: Path = PEER) -> str:
    """sha-256 over the peer's pom.xml and sources (path and bytes): the build cache's key."""
    digest = hashlib.sha256()
    for path in sorted([root / "pom.xml", *(root / "src").rglob("*")]):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_peer() -> Path:
    """The peer's build folder (jar + deps/), built with ``mvn -B -q package`` unless cached."""
    build = Path(tempfile.gettempdir()) / f"ikkai-peer-kafka-streams-{source_digest()}"
    jar = build / "ikkai-peer-kafka-streams-0.1.0.jar"
    if not jar.is_file():
        print(f"building the peer into {build} ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            ["mvn", "-B", "-q", "package", f"-Dpeer.build.dir={build}"], cwd=PEER, capture_output=True, text=True
        )
        if done.returncode != 0 or not jar.is_file():
            raise SystemExit(f"mvn package of the peer failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return build


def start_peer(
    build: Path,
    cluster: KafkaContext,
    topics: InferTopics,
    guarantee: str,
    scratch: Path,
    *,
    threads: int,
    math: str = "libm",
) -> JobProcess:
    from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH

    app_id = unique("peer").replace(".", "-")
    command = [
        java(), "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "--add-modules", "jdk.incubator.foreign", "--enable-native-access=ALL-UNNAMED",  # exp, log1p from the C library
        "-cp", f"{build / 'ikkai-peer-kafka-streams-0.1.0.jar'}:{build / 'deps'}/*", "dev.ikkai.peer.PeerApp",
        "--bootstrap", cluster.bootstrap_servers, "--application-id", app_id, "--input", topics.input,
        "--decisions", topics.decisions, "--outbox", topics.outbox, "--dlq", topics.dlq,
        "--model", str(MODEL_PATH), "--features", str(FEATURES_PATH), "--schemas", str(schemas_dir()),
        "--guarantee", guarantee, "--threads", str(threads), "--math", math, "--state-dir", str(scratch / app_id),
    ]  # fmt: skip
    return JobProcess(command, start_marker="peer: running")


# ---------------------------------------------------------------- the check: same bytes as decide()


def source_rows(cluster: KafkaContext, topic: str) -> Any:
    """Every record of ``topic`` as ``decide`` gets it from Spark: key, value, topic, partition, offset."""
    import pandas as pd
    from confluent_kafka import Consumer

    consumer = Consumer(cluster.consumer_config(unique("bench.check"), **{
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": True,
    }))  # fmt: skip
    consumer.subscribe([topic])
    parts = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    rows: list[tuple[Any, ...]] = []
    done: set[int] = set()
    try:
        while len(done) < parts:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                done.add(int(message.partition()))  # type: ignore[arg-type]
                continue
            done.discard(int(message.partition()))  # type: ignore[arg-type]
            rows.append((message.key(), message.value(), message.topic(), message.partition(), message.offset()))
    finally:
        consumer.close()
    return pd.DataFrame(rows, columns=["key", "value", "topic", "partition", "offset"])


@dataclass(frozen=True)
class Check:
    what: str
    events: int
    decisions_same: int
    outbox_expected: int
    outbox_same: int
    partitions_kept: bool
    examples: tuple[str, ...]


def compare_outputs(
    expected: Any, decisions: dict[int, list[tuple[bytes | None, bytes | None]]],
    outbox: dict[int, list[tuple[bytes | None, bytes | None]]], what: str,
) -> Check:  # fmt: skip
    """The peer's decisions/outbox per partition against ``decide``'s rows (pure, given the records)."""
    codec = default_codec()
    want_decisions = {  # (input partition, input offset) -> decision value
        (int(r.input_partition), int(r.input_offset)): bytes(r.value)
        for r in expected.itertuples(index=False)
        if r.topic == "decisions"
    }
    want_outbox: dict[str, list[bytes]] = {}  # decision_id -> its requests in seq order
    for r in expected.sort_values(["input_partition", "input_offset", "seq"]).itertuples(index=False):
        if r.topic == "outbox":
            want_outbox.setdefault(codec.decode("outbox_request", bytes(r.value))["decision_id"], []).append(
                bytes(r.value)
            )
    same, kept, examples = 0, True, list[str]()
    for partition, records in decisions.items():
        offsets = []
        for _, value in records:
            assert value is not None
            got = codec.decode("fraud_decision", value)
            where = (got["input_partition"], got["input_offset"])
            offsets.append(got["input_offset"])
            kept &= got["input_partition"] == partition
            if want_decisions.get(where) == value:
                same += 1
            elif len(examples) < 3:
                examples.append(_difference(got, codec.decode("fraud_decision", want_decisions[where])))
        kept &= offsets == sorted(offsets)
    got_outbox: dict[str, list[bytes]] = {}
    for records in outbox.values():
        for _, value in records:
            assert value is not None
            got_outbox.setdefault(codec.decode("outbox_request", value)["decision_id"], []).append(value)
    outbox_same = sum(
        1 for d, values in want_outbox.items() for i, v in enumerate(values) if got_outbox.get(d, [])[i : i + 1] == [v]
    )
    return Check(
        what, len(want_decisions), same, sum(len(v) for v in want_outbox.values()), outbox_same, kept, tuple(examples)
    )


def _difference(got: dict[str, Any], want: dict[str, Any]) -> str:
    fields = [
        f"{name}: peer {got[name]!r} ikkai {want[name]!r}"
        for name in want
        if got.get(name) != want[name] and name != "features"
    ]
    fields += [
        f"features.{k}: peer {got['features'][k]!r} ikkai {v!r}"
        for k, v in want["features"].items()
        if got["features"].get(k) != v
    ]
    return f"{want['payment_id']}: " + "; ".join(fields)


def check(
    cluster: KafkaContext, build: Path, topic: str, partitions: int, events: int, scratch: Path, threads: int
) -> None:
    from spark_jobs.infer.fraud_decisions import Topics, decide
    from spark_jobs.model.fraud_model import FraudModel, load_snapshots

    rows = source_rows(cluster, topic)
    expected = decide(rows, FraudModel.load(), load_snapshots(), default_codec(), Topics("decisions", "outbox", "dlq"))
    results = []
    for math in ("libm", "java"):
        topics = fresh_outputs(cluster, topic, partitions)
        watch = DecisionWatch(cluster, topics.decisions)
        job = start_peer(build, cluster, topics, "exactly_once_v2", scratch, threads=threads, math=math)
        try:
            job.wait_started()
            if not _caught_up(watch, events, job, timeout=600):
                raise SystemExit(f"check: the peer did not decide {events} events:\n{job.tail()}")
        finally:
            job.stop()
            watch.close()
        what = "peer, exp/log1p from the C library" if math == "libm" else "peer, Java's Math.exp/log1p"
        results.append(
            compare_outputs(
                expected, by_partition(cluster, topics.decisions), by_partition(cluster, topics.outbox), what
            )
        )
    print_table(
        f"check: the peer's values against fraud_decisions.decide ({len(rows)} events, {partitions} partitions)",
        ["WHAT", "DECISIONS", "BYTE-IDENTICAL", "MATCH", "OUTBOX REQUESTS", "BYTE-IDENTICAL",
         "PARTITION AND ORDER KEPT"],
        [
            [c.what, c.events, c.decisions_same, f"{100 * c.decisions_same / max(c.events, 1):.2f}%",
             c.outbox_expected, c.outbox_same, "yes" if c.partitions_kept else "no"]
            for c in results
        ],
    )  # fmt: skip
    for c in results:
        for example in c.examples:
            print(f"  {c.what}: {example}")


# ---------------------------------------------------------------- measurements


@dataclass(frozen=True)
class Result:
    round: int
    variant: str
    events: int
    seconds: float
    peak_rss: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu_s: float = 0.0  # CPU time of the job's process tree in the measured interval

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    @property
    def cpu_ms_per_1000(self) -> float:
        return self.cpu_s * 1_000_000 / self.events


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of process ``root`` and every live descendant, with the children each has reaped.

    By parent links, not by process group: PySpark's daemon puts itself and its Python workers in a
    group of their own. On a shared machine wall-clock rates move with everybody's load; the CPU a
    job spends per event moves far less, so the tables give both.
    """
    stats = proc_stats()
    tree = process_tree(root, stats)
    return sum(stats[pid].own_cpu_s + stats[pid].children_cpu_s for pid in tree if pid in stats)


Starter = Callable[[InferTopics, Path], JobProcess]


def starters(build: Path, cluster: KafkaContext, threads: int, ikkai_extra: tuple[str, ...]) -> dict[str, Starter]:
    def ikkai(topics: InferTopics, scratch: Path) -> JobProcess:
        return start_infer(cluster, topics, scratch / unique("ck").replace(".", "-"), Variant(EOS, EOS), *ikkai_extra)

    def peer(guarantee: str) -> Starter:
        return lambda topics, scratch: start_peer(build, cluster, topics, guarantee, scratch, threads=threads)

    return {IKKAI_EOS: ikkai, PEER_EOS: peer("exactly_once_v2"), PEER_ALOS: peer("at_least_once")}


def _caught_up(watch: DecisionWatch, events: int, job: JobProcess, timeout: float) -> bool:
    give_up_at = time.monotonic() + timeout
    while watch.count < events:
        if time.monotonic() > give_up_at or (job.process.poll() is not None and job.process.returncode != 0):
            return False
        time.sleep(0.02)
    return True


def max_load(
    cluster: KafkaContext, topic: str, start: Starter, name: str, scratch: Path, events: int, partitions: int
) -> Result:
    topics = fresh_outputs(cluster, topic, partitions)
    watch = DecisionWatch(cluster, topics.decisions)
    job = start(topics, scratch)
    try:
        job.wait_started()
        cpu_at_start = tree_cpu_seconds(job.process.pid)
        if not _caught_up(watch, events, job, timeout=900):
            raise SystemExit(f"{name}: {watch.count} of {events} decisions:\n{job.tail()}")
        cpu = tree_cpu_seconds(job.process.pid) - cpu_at_start
        assert job.started is not None and watch.last is not None
        seconds = watch.last - (job.started + WALL)
        if job.process.poll() is None and name == IKKAI_EOS:
            job.wait(300)  # availableNow: it stops by itself
    finally:
        job.stop()
        watch.close()
    if watch.count != events:
        raise SystemExit(f"{name}: {watch.count} decisions for {events} events (read_committed)")
    return Result(0, name, events, seconds, job.memory.peak, cpu_s=cpu)


def fixed_load(
    cluster: KafkaContext,
    start: Starter,
    name: str,
    scratch: Path,
    *,
    rate: float,
    seconds: float,
    partitions: int,
    seed: int,
) -> Result:
    """infer_throughput.fixed_load for any job: the same warm-up, producer and read_committed watch."""
    from confluent_kafka import Producer

    topic = create_topic(cluster, unique("events.payments.fixed"), partitions)
    topics = fresh_outputs(cluster, topic, partitions)
    warmup, count = 50, int(rate * seconds)
    codec = default_codec()
    encoded = [
        (str(p["payment_id"]).encode(), codec.encode("payment_event", p, version=1))
        for p in payment_records(simulate(seed, payments=warmup + count).payments)
    ]
    watch = DecisionWatch(cluster, topics.decisions)
    job = start(topics, scratch)
    producer = Producer(cluster.producer_config(**{"linger.ms": 1}))
    sent: dict[bytes, float] = {}
    try:
        job.wait_started()
        for key, value in encoded[:warmup]:
            producer.produce(topic, value=value, key=key, partition=kafka_partition(key, partitions))
        producer.flush(30)
        if not watch.wait_for([key for key, _ in encoded[:warmup]], timeout=300):
            raise SystemExit(f"{name}: the warm-up payments got no decisions:\n{job.tail()}")
        began = time.monotonic()
        cpu_at_start = tree_cpu_seconds(job.process.pid)
        for i, (key, value) in enumerate(encoded[warmup:]):
            pause = began + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            sent[key] = time.time()
            producer.produce(topic, value=value, key=key, partition=kafka_partition(key, partitions))
            producer.poll(0)
        producer.flush(30)
        if not watch.wait_for(list(sent), timeout=300):
            missing = sum(1 for key in sent if key not in watch.arrived)
            raise SystemExit(f"{name}: {missing} payments without a decision:\n{job.tail()}")
        cpu = tree_cpu_seconds(job.process.pid) - cpu_at_start
    finally:
        job.stop()
        watch.close()
    latencies = [(watch.arrived[key] - at) * 1000 for key, at in sent.items()]
    first, last = min(sent.values()), max(watch.arrived[key] for key in sent)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return Result(0, name, count, last - first, job.memory.peak, p50, p99, cpu)


def report(title: str, results: list[Result], latency: bool) -> None:
    headers = ["ROUND", "WHAT", "EVENTS", "SECONDS", "RECORDS/S", "CPU MS / 1000 EVENTS", "PEAK PSS MB"]
    headers += ["P50 MS", "P99 MS"] if latency else []
    print_table(
        title, headers,
        [[r.round, r.variant, r.events, r.seconds, r.rate, r.cpu_ms_per_1000, r.peak_rss / MB,
          *([r.p50_ms, r.p99_ms] if latency else [])]
         for r in results],
    )  # fmt: skip
    by = {(r.round, r.variant): r for r in results}
    rounds = sorted({r.round for r in results})
    rows: list[list[object]] = []

    def ratio_row(label: str, values: list[float]) -> None:
        rows.append([label, *values, median(values)])

    ratio_row(f"{IKKAI_EOS} / {PEER_EOS}", [by[(n, IKKAI_EOS)].rate / by[(n, PEER_EOS)].rate for n in rounds])
    ratio_row(f"{PEER_EOS} / {PEER_ALOS}", [by[(n, PEER_EOS)].rate / by[(n, PEER_ALOS)].rate for n in rounds])
    cpu = {(n, v): by[(n, v)].cpu_ms_per_1000 for n in rounds for v in VARIANTS}
    ratio_row(f"CPU per event: {IKKAI_EOS} / {PEER_EOS}", [cpu[(n, IKKAI_EOS)] / cpu[(n, PEER_EOS)] for n in rounds])
    ratio_row(f"CPU per event: {PEER_EOS} / {PEER_ALOS}", [cpu[(n, PEER_EOS)] / cpu[(n, PEER_ALOS)] for n in rounds])
    if latency:
        p99 = {(n, v): by[(n, v)].p99_ms or 0.0 for n in rounds for v in VARIANTS}
        ratio_row(f"{IKKAI_EOS} p99 - {PEER_EOS} p99 (ms)", [p99[(n, IKKAI_EOS)] - p99[(n, PEER_EOS)] for n in rounds])
        ratio_row(f"{PEER_EOS} p99 - {PEER_ALOS} p99 (ms)", [p99[(n, PEER_EOS)] - p99[(n, PEER_ALOS)] for n in rounds])
    print_table(f"{title}: ratios per round", ["", *(f"ROUND {n}" for n in rounds), "MEDIAN"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=40_000, help="maximum load (and check): pre-filled payments")
    parser.add_argument("--batch", type=int, default=20_000, help="ikkai at maximum load: maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200, help="fixed load: payments/s offered")
    parser.add_argument("--seconds", type=float, default=30, help="fixed load: how long")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="the peer's num.stream.threads (ikkai: local[2])")
    parser.add_argument("--only", choices=("check", "max", "fixed"))
    args = parser.parse_args()
    build = build_peer()
    with bench_stack("peer") as (cluster, _, scratch):
        topic = create_topic(cluster, unique("events.payments"), args.partitions)
        produce_payments(cluster, topic, payment_records(simulate(3, payments=args.events).payments), args.partitions)
        if args.only in (None, "check"):
            check(cluster, build, topic, args.partitions, args.events, scratch, args.threads)
        if args.only in (None, "max"):
            start = starters(build, cluster, args.threads, ("--max-offsets-per-trigger", str(args.batch)))
            results = []
            for n, name in rotated(VARIANTS, args.rounds):
                r = max_load(cluster, topic, start[name], name, scratch, args.events, args.partitions)
                results.append(Result(n, name, r.events, r.seconds, r.peak_rss, cpu_s=r.cpu_s))
                print(f"max load, round {n}, {name}: {r.rate:.0f} records/s", file=sys.stderr, flush=True)
            report(f"ikkai infer vs Kafka Streams, maximum load ({args.events} events)", results, latency=False)
        if args.only in (None, "fixed"):
            start = starters(build, cluster, args.threads, ("--continuous",))
            results = []
            for n, name in rotated(VARIANTS, args.rounds):
                r = fixed_load(
                    cluster, start[name], name, scratch, rate=args.rate, seconds=args.seconds,
                    partitions=args.partitions, seed=100 + n,
                )  # fmt: skip
                results.append(Result(n, name, r.events, r.seconds, r.peak_rss, r.p50_ms, r.p99_ms, r.cpu_s))
                print(f"fixed load, round {n}, {name}: p99 {r.p99_ms:.0f} ms", file=sys.stderr, flush=True)
            report(
                f"ikkai infer vs Kafka Streams, fixed load ({args.rate:.0f} payments/s for {args.seconds:.0f} s)",
                results, latency=True,
            )  # fmt: skip


if __name__ == "__main__":
    main()
