"""Recovery after kill -9: how long until the infer job commits again, and until Connect runs again.

Starts an embedded stack of its own in a temporary home (it kills and starts the Connect worker,
so it never uses a cluster named by the environment; ``--broker-port``/``--connect-port`` pin its
ports) and measures, per round:

* **job**: the infer job runs continuously (its documented default trigger) under ``--rate`` payments/s.
  After it has committed ``--warm-batches`` batches, the whole process group is SIGKILLed at a
  moment inside a batch, and the job is started again at once, the way a supervisor would (same command,
  same checkpoint; the killed process is reaped afterwards). Measured: kill → the first new decision a
  read_committed consumer receives, broken down by the restarted job's own stderr lines (stamped on
  arrival): process start → session and model up → first batch committed → visible. Nothing of the
  script's own waits is in that path: the read_committed ends a "new" decision must pass are read
  ``ENDS_AFTER_S`` after the kill *while the new job is already starting* (a commit the coordinator had
  been asked for before the kill completes in that time; the new job cannot commit before its JVM is up,
  and a round where its first batch came before the ends were read says so). The first batch's line
  says how long its write took and how many producers it had to create (``init_transactions``
  fences the zombie and aborts its open transaction). At the end the load stops, the job drains,
  and every produced payment must have exactly one decision (lost and duplicated are counted).
  ``--transactional-writer`` picks the job's writer; ``--baseline-code DIR`` restarts it from another
  checkout (a ``git archive`` of the commit before) in odd rounds and from this one in even rounds, so
  before and after meet the same load on a shared machine (medians per checkout).
* **connect**: the worker runs ``--connectors`` FileStreamSource connectors and the outbox sink;
  its JVM is SIGKILLed and started again as the stack starts it (``LocalStack.start``). Measured:
  kill → REST up → every connector and task RUNNING, broken down by the worker's own log (JVM
  start, REST server, group joined, the assignment and the delay it carries, tasks started).
  ``--connect-settings old`` runs the worker with its earlier settings
  (``scheduled.rebalance.max.delay.ms=5000``, Kafka's 10 s ``session.timeout.ms``, plugins found by
  reflection as well as by manifest, ``plugin.discovery=hybrid_warn``); ``both`` alternates old and
  new in every round.

Tables only; nothing here asserts anything about time. The job part ends with the target row: kill -9 →
first visible decision <= 10 s (the median of the rounds).

Usage: python -m benchmarks.recovery [--rounds 3] [--only job|connect] [--rate 100]
       [--connect-settings both|new|old] [--transactional-writer worker|executor] [--code DIR]
       [--baseline-code DIR]
       [--broker-port P --connect-port P]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil

from benchmarks.harness import JobProcess, alternating, median, print_table, python_module
from benchmarks.targets import Target, print_targets
from ikkai.contract.kafka import KafkaContext

KILL_TO_VISIBLE = Target("kill -9 -> first visible decision", 10, at_most=True, unit="s")
ENDS_AFTER_S = 1.0  # after the kill, off the measured path: the zombie's commit already asked for completes

# ---------------------------------------------------------------- the job's milestones (pure)

# (phase, the first stderr line of the restarted job that ends it); a phase whose line never came
# is None. Spark logs at WARN, so the job's own lines are the milestones: "model ..." once the
# interpreter, the JVM, the SparkSession, the topic check and the model are up; "batch N committed"
# once the query started, planned the batch Spark had not committed, forked its Python workers,
# fenced the zombie's producers (init_transactions) and committed every partition's transaction.
JOB_MILESTONES: tuple[tuple[str, str], ...] = (
    ("session and model", ": model "),
    ("batch committed", ": batch "),
)
BATCH_LINE = re.compile(r": batch (\d+) committed (\d+) records, slowest partition ([\d.]+) s of ([\d.]+) s")
NEW_PRODUCERS = re.compile(r"\((\d+) new producers?\)")


@dataclass(frozen=True)
class FirstBatch:
    """The restarted job's first committed batch, from its progress line."""

    batch_id: int
    records: int
    slowest_partition_s: float
    call_s: float
    new_producers: int


def first_batch(lines: Sequence[str]) -> FirstBatch | None:
    for line in lines:
        found = BATCH_LINE.search(line)
        if found:
            producers = NEW_PRODUCERS.search(line)
            return FirstBatch(
                int(found[1]), int(found[2]), float(found[3]), float(found[4]), int(producers[1]) if producers else 0
            )
    return None


def milestones(
    stamped: Sequence[tuple[float, str]], marks: Sequence[tuple[str, str]], since: float
) -> dict[str, float | None]:
    """Seconds from ``since`` to the first line (at or after ``since``) holding each mark, in order:
    a mark is looked for only after the previous one was found."""
    found: dict[str, float | None] = {}
    position = 0
    for phase, mark in marks:
        found[phase] = None
        for index in range(position, len(stamped)):
            at, line = stamped[index]
            if at >= since and mark in line:
                found[phase] = at - since
                position = index
                break
    return found


def phases(points: Mapping[str, float | None], start: str = "start") -> dict[str, float | None]:
    """Milestones (seconds since one origin, in order) as durations: each one minus the previous found one."""
    durations: dict[str, float | None] = {}
    previous = 0.0
    for name, at in points.items():
        if at is None:
            durations[name] = None
            continue
        durations[name] = at - previous
        previous = at
    return durations


# ---------------------------------------------------------------- Connect's milestones (pure)

CONNECT_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
CONNECT_MILESTONES: tuple[tuple[str, str], ...] = (
    ("jvm up", "Kafka Connect worker initializing"),
    ("plugins found", "Added plugin '"),
    ("rest up", "REST server listening at"),
    ("group joined", "Successfully joined group with generation"),
    ("first assignment", "got assignment: Assignment"),
    ("tasks assigned", "Finished starting connectors and tasks"),
)
ASSIGNMENT_DELAY = re.compile(r"got assignment: Assignment\{.*?delay=(\d+)\}")


def connect_log_times(lines: Sequence[str]) -> list[tuple[float, str]]:
    """(epoch seconds, line) for every line of Connect's log that starts with its ``[%d]`` timestamp
    (log4j's default ``yyyy-MM-dd HH:mm:ss,SSS``, local time); continuation lines are skipped."""
    stamped = []
    for line in lines:
        found = CONNECT_LOG_TIME.match(line)
        if found:
            at = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the log's local time
            stamped.append((at, line))
    return stamped


def assignment_delays(stamped: Sequence[tuple[float, str]], since: float) -> list[int]:
    """The ``delay`` (ms) of every assignment the worker got after ``since``: the scheduled rebalance it waits out."""
    return [int(found[1]) for at, line in stamped if at >= since and (found := ASSIGNMENT_DELAY.search(line))]


# ---------------------------------------------------------------- the stack and the load


@contextmanager
def own_stack(args: argparse.Namespace, home: Path) -> Iterator[object]:
    from ikkai.settings import jars_dir
    from stack.local_stack import LocalStack
    from stack.shape import StackOptions

    stack = LocalStack(
        home / "stack",
        jars_dir(),
        StackOptions(broker_port=args.broker_port, connect_port=args.connect_port),
        progress=sys.stderr,
    )
    try:
        stack.up()
        yield stack
    finally:
        stack.down(purge=True)


class Load:
    """``rate`` payments/s onto ``topic`` from a thread, keyed by payment_id on the key's partition."""

    def __init__(self, cluster: KafkaContext, topic: str, partitions: int, rate: float, seed: int, count: int) -> None:
        from confluent_kafka import Producer

        from demo.payments_simulation import payment_records, simulate
        from ikkai.contract.codec import default_codec
        from ikkai.contract.partitioning import kafka_partition

        self.sent: list[str] = []
        self._payments = iter(payment_records(simulate(seed, payments=count).payments))
        self._codec, self._partition, self._partitions = default_codec(), kafka_partition, partitions
        self._producer = Producer(cluster.producer_config(**{"linger.ms": 5}))
        self._topic, self._rate = topic, rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            payment = next(self._payments, None)
            if payment is None:
                print(f"the load ran out after {len(self.sent):,} payments", file=sys.stderr)
                return
            key = str(payment["payment_id"]).encode()
            value = self._codec.encode("payment_event", payment, version=1)
            self._producer.produce(self._topic, value=value, key=key, partition=self._partition(key, self._partitions))
            self.sent.append(str(payment["event_id"]))
            self._producer.poll(0)
            pause = started + len(self.sent) / self._rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self._producer.flush(60) == 0


class CommittedWatch:
    """A read_committed consumer of the decisions topic: when each (partition, offset) arrived."""

    def __init__(self, cluster: KafkaContext, topic: str) -> None:
        from confluent_kafka import Consumer

        from stack.kit.topic_io import unique

        self.arrivals: list[tuple[float, int, int]] = []  # (monotonic, partition, offset)
        self.topic = topic
        self._consumer = Consumer(cluster.consumer_config(unique("bench.recovery"), **{
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 10,
        }))  # fmt: skip
        self._consumer.subscribe([topic])
        self._ends = Consumer(cluster.consumer_config(unique("bench.recovery.ends")))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.05)
            if message is not None and message.error() is None:
                self.arrivals.append((time.monotonic(), int(message.partition() or 0), int(message.offset() or 0)))

    def stable_ends(self, partitions: int) -> dict[int, int]:
        """The read_committed end (the last stable offset) of every partition, from the broker now."""
        from confluent_kafka import TopicPartition

        return {
            p: self._ends.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)
        }

    def first_beyond(self, ends: Mapping[int, int], timeout: float) -> float | None:
        """Monotonic arrival of the first record at or beyond ``ends`` (a new commit), waiting up to ``timeout``."""
        give_up_at = time.monotonic() + timeout
        while time.monotonic() < give_up_at:
            for at, partition, offset in list(self.arrivals):
                if offset >= ends.get(partition, 0):
                    return at
            time.sleep(0.05)
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()
        self._ends.close()


# ---------------------------------------------------------------- job recovery


@dataclass
class JobRound:
    round: int
    recovery_s: float | None
    points: dict[str, float | None]
    batch: FirstBatch | None
    code: str = "this"  # which checkout the restarted job ran: "this", or "baseline" (--baseline-code)
    ends_read_s: float | None = None  # kill → the read_committed ends were read
    ends_read_late: bool = False  # the restarted job committed a batch before they were read: not measured


def ends_read_late(stamped: Sequence[tuple[float, str]], ends_read: float) -> bool:
    """True when a batch line of the restarted job arrived before the ends were read: its decisions may be
    inside the ends, and the first one "beyond" them would be a later batch's."""
    return any(at <= ends_read and BATCH_LINE.search(line) for at, line in stamped)


def start_job(
    cluster: KafkaContext, topics: object, checkpoint: Path, options: Sequence[str] = (), code: Path | None = None
) -> JobProcess:
    args = [
        "--bootstrap", cluster.bootstrap_servers, "--checkpoint", str(checkpoint), "--query", checkpoint.name,
        "--input", topics.input, "--decisions", topics.decisions, "--outbox", topics.outbox,  # type: ignore[attr-defined]
        "--dlq", topics.dlq, "--continuous", *options,  # type: ignore[attr-defined]
    ]  # fmt: skip
    command, cwd, env = python_module("spark_jobs.infer", *args, code=code)
    return JobProcess(command, cwd=cwd, env=env)


def kill_job(job: JobProcess) -> None:
    """SIGKILL to the job's whole process group (driver, JVM, Python daemon's parent); ``job.wait`` reaps it."""
    os.killpg(job.process.pid, signal.SIGKILL)


def wait_batches(job: JobProcess, count: int, timeout: float = 600) -> None:
    give_up_at = time.monotonic() + timeout
    while len(job.batches) < count:
        if job.process.poll() is not None or time.monotonic() > give_up_at:
            raise SystemExit(f"the job stopped committing:\n{job.tail()}")
        time.sleep(0.02)


def job_options(args: argparse.Namespace) -> list[str]:
    """The infer job's options the script passes on: the transactional writer (the job's default unless given)."""
    return ["--transactional-writer", args.transactional_writer] if args.transactional_writer else []


def job_rounds(cluster: KafkaContext, args: argparse.Namespace, scratch: Path, rng: random.Random) -> list[JobRound]:
    from benchmarks.infer_throughput import fresh_outputs
    from ikkai.contract.codec import default_codec
    from stack.kit.topic_io import by_partition, create_topic, flat, unique

    topic = create_topic(cluster, unique("events.payments.recovery"), args.partitions)
    topics = fresh_outputs(cluster, topic, args.partitions)
    checkpoint = scratch / unique("recovery").replace(".", "-")
    watch = CommittedWatch(cluster, topics.decisions)
    # enough for 8 minutes a round (a loaded machine's start-ups included); the job runs on without load after
    count = int(args.rate * 480 * (args.rounds + 1))
    load = Load(cluster, topic, args.partitions, args.rate, rng.randrange(1 << 30), count)
    results = []
    options = job_options(args)
    job = start_job(cluster, topics, checkpoint, options, args.code)
    try:
        for round_ in range(1, args.rounds + 1):
            wait_batches(job, args.warm_batches)
            seen = len(job.batches)
            wait_batches(job, seen + 1)  # a batch just ended: the next one is planned within the trigger interval
            time.sleep(rng.uniform(0.1, 1.0))  # somewhere inside the next batch
            killed = time.monotonic()
            kill_job(job)
            dead, restarted = job, time.monotonic()
            baseline = args.baseline_code is not None and round_ % 2 == 1  # odd rounds, when asked
            job = start_job(cluster, topics, checkpoint, options, args.baseline_code if baseline else args.code)
            pause = killed + ENDS_AFTER_S - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # off the measured path: the new job is starting meanwhile
            ends = watch.stable_ends(args.partitions)
            ends_read = time.monotonic()
            dead.wait(60)  # reaped while the new one starts
            visible = watch.first_beyond(ends, timeout=600)
            # The decision is visible when its transaction commits, in the task; the batch's line comes after.
            wait_batches(job, 1, timeout=120)
            points: dict[str, float | None] = {"restart": restarted - killed}
            points |= {
                phase: None if at is None else restarted - killed + at
                for phase, at in milestones(job.stamped, JOB_MILESTONES, restarted).items()
            }
            points["visible"] = None if visible is None else visible - killed
            lines = [line for _, line in job.stamped]
            late = ends_read_late(job.stamped, ends_read)
            results.append(JobRound(round_, None if late else points["visible"], points, first_batch(lines),
                                    "baseline" if baseline else "this", ends_read - killed, late))  # fmt: skip
            print(f"job round {round_}: {points}", file=sys.stderr)
            for at, line in job.stamped[:400]:  # the restarted job's own lines up to its first batch, for the reader
                print(f"  +{at - killed:7.2f} s {line.rstrip()[:200]}", file=sys.stderr)
                if ": batch " in line:
                    break
        load.stop()
        produced = set(load.sent)
        drained_at = time.monotonic() + 300
        while time.monotonic() < drained_at:
            decided = Counter(
                str(default_codec().decode("fraud_decision", v)["event_id"])
                for _, v in flat(by_partition(cluster, topics.decisions))
                if v is not None
            )
            if produced <= decided.keys():
                break
            time.sleep(2)
    finally:
        load.stop()
        job.stop()
        watch.close()
    lost = len(produced - decided.keys())
    duplicated = sum(n - 1 for n in decided.values() if n > 1)
    print(f"\npayments produced {len(produced):,}, decided {len(decided):,}, lost {lost}, duplicated {duplicated}")
    return results


def report_jobs(results: Sequence[JobRound]) -> None:
    names = ["restart", *(phase for phase, _ in JOB_MILESTONES), "visible"]
    rows: list[list[object]] = []
    for result in results:
        durations = phases(result.points)
        batch = result.batch
        rows.append([
            f"{result.round} {result.code}{' (ends read late)' if result.ends_read_late else ''}",
            result.recovery_s, *(durations[name] for name in names),
            batch.records if batch else None, batch.call_s if batch else None,
            batch.slowest_partition_s if batch else None,
            batch.new_producers if batch else None, result.ends_read_s,
        ])  # fmt: skip
    for code in sorted({result.code for result in results}):
        mine = [row for row, result in zip(rows, results, strict=False) if result.code == code]
        columns = list(zip(*mine, strict=True))
        rows.append([f"median {code}", *(median([v for v in c if isinstance(v, float | int)]) for c in columns[1:])])
    print_table(
        "infer job: kill -9 → first new decision visible (read_committed); each phase in seconds after the previous",
        ["ROUND", "KILL→VISIBLE S", "KILL→START", "→SESSION+MODEL", "→BATCH COMMITTED", "→VISIBLE",
         "1ST BATCH RECORDS", "1ST BATCH S", "SLOWEST PART S", "NEW PRODUCERS", "ENDS READ S"],
        rows,
    )  # fmt: skip
    print_targets("infer job: target (median of the rounds)", recovery_targets(results))


def recovery_targets(results: Sequence[JobRound]) -> list[tuple[Target, float | None, str]]:
    """kill -9 → first visible decision, the median of this checkout's rounds that measured it."""
    mine = [r.recovery_s for r in results if r.code == "this" and r.recovery_s is not None]
    return [(KILL_TO_VISIBLE, median(mine), f"median of {len(mine)} round(s), read_committed consumer")]


# ---------------------------------------------------------------- Connect recovery

# The worker's earlier settings, before its restart was made fast (10 s and 3 s are Kafka's defaults).
OLD_CONNECT_SETTINGS = {
    "scheduled.rebalance.max.delay.ms": "5000",
    "session.timeout.ms": "10000",
    "heartbeat.interval.ms": "3000",
    "plugin.discovery": "hybrid_warn",
}


@dataclass
class ConnectRound:
    round: int
    settings: str
    rest_s: float
    running_s: float | None
    points: dict[str, float | None]
    delays: list[int]


@contextmanager
def connect_settings(variant: str) -> Iterator[None]:
    """The worker properties the stack writes, with the old settings for ``old`` (the stack's own function, wrapped)."""
    import stack.config_files as config_files

    namespace = vars(config_files)
    original: Callable[..., dict[str, str]] = namespace["connect_properties"]
    if variant == "old":
        namespace["connect_properties"] = lambda *a, **kw: {**original(*a, **kw), **OLD_CONNECT_SETTINGS}
    try:
        yield
    finally:
        namespace["connect_properties"] = original


def create_connectors(cluster: KafkaContext, connect_url: str, scratch: Path, count: int) -> list[str]:
    from connectors.render import load_bundle, render_bundle
    from deploy.bundle_ops import bundle_folder
    from deploy.connect_rest import ConnectClient
    from stack.kit.topic_io import create_topic, unique

    client = ConnectClient(connect_url)
    for topic in ("outbox.requests", "outbox.receipts", "dlq.outbox"):
        create_topic(cluster, topic)
    sink = render_bundle(
        load_bundle(bundle_folder("outbox-sink")), "dev", [f"kafka.bootstrap_servers={cluster.bootstrap_servers}"]
    )
    configs = {c.name: dict(c.config) for c in sink.connectors}
    plugins = {plugin["class"] for plugin in client.connector_plugins()}
    for name in [name for name, config in configs.items() if config["connector.class"] not in plugins]:
        print(f"{name}: its plugin is not installed (see the stack's start-up warning); a FileStreamSink instead",
              file=sys.stderr)  # fmt: skip
        del configs[name]
        configs["recovery-file-sink"] = {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
            "topics": "outbox.requests", "file": str(scratch / "sink.out"),
        }  # fmt: skip
    for i in range(count):
        drop = scratch / f"drop-{i}.jsonl"
        drop.write_text('{"payment_id": "p-1"}\n')
        configs[f"recovery-file-{i}"] = {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "topic": create_topic(cluster, unique("ingest.recovery")), "file": str(drop),
        }  # fmt: skip
    for name, config in configs.items():
        client.put_connector_config(name, config)
    return list(configs)


def all_running(connect_url: str, names: Sequence[str]) -> bool:
    from deploy.connect_rest import ConnectClient, ConnectRestError

    try:
        expanded = ConnectClient(connect_url).connectors_expanded()
    except ConnectRestError:
        return False
    for name in names:
        status = expanded.get(name, {}).get("status", {})
        tasks = status.get("tasks") or []
        if status.get("connector", {}).get("state") != "RUNNING" or not tasks:
            return False
        if any(task["state"] != "RUNNING" for task in tasks):
            return False
    return True


def wait_all_running(connect_url: str, names: Sequence[str], timeout: float = 300) -> float | None:
    give_up_at = time.monotonic() + timeout
    while time.monotonic() < give_up_at:
        if all_running(connect_url, names):
            return time.monotonic()
        time.sleep(0.1)
    return None


def process_started_at(pid: int) -> float:
    """Epoch seconds at which process ``pid`` started (psutil; to about a second on Linux, whose boot time is whole
    seconds)."""
    return float(psutil.Process(pid).create_time())


def connect_round(stack: object, connect_url: str, names: Sequence[str], round_: int, variant: str) -> ConnectRound:
    from stack import processes
    from stack.stack_config import CONNECT

    log = stack.log_file(CONNECT)  # type: ignore[attr-defined]
    if wait_all_running(connect_url, names) is None:
        raise SystemExit(f"the connectors were not RUNNING before the kill (see {log})")
    killed_wall, killed = time.time(), time.monotonic()
    stack.kill(CONNECT)  # type: ignore[attr-defined]
    with connect_settings(variant):
        stack.start(CONNECT)  # type: ignore[attr-defined]  # returns once the REST API lists the plugins
    rest = time.monotonic()
    running = wait_all_running(connect_url, names)
    stamped = connect_log_times(log.read_text(errors="replace").splitlines())
    pids = processes.stack_processes(stack.home).get(CONNECT, [])  # type: ignore[attr-defined]
    points: dict[str, float | None] = {"launched": process_started_at(pids[0]) - killed_wall if pids else None}
    points |= milestones(stamped, CONNECT_MILESTONES, killed_wall)
    for at, line in stamped:  # what the group did, for the reader of the run's stderr
        if at >= killed_wall and any(word in line for word in ("Scanning plugins", "got assignment", "joined group")):
            print(f"  {line[:240]}", file=sys.stderr)
    points["all running"] = None if running is None else running - killed
    result = ConnectRound(round_, variant, rest - killed, points["all running"], points,
                          assignment_delays(stamped, killed_wall))  # fmt: skip
    print(f"connect round {round_} ({variant}): {points}, delays {result.delays}", file=sys.stderr)
    return result


def report_connect(results: Sequence[ConnectRound]) -> None:
    names = ["launched", *(phase for phase, _ in CONNECT_MILESTONES), "all running"]
    rows: list[list[object]] = []
    for result in results:
        durations = phases(result.points)
        rows.append([result.round, result.settings, result.running_s, result.rest_s,
                     *(durations[name] for name in names), ",".join(map(str, result.delays)) or "-"])  # fmt: skip
    for variant in sorted({r.settings for r in results}):
        mine = [r for r in results if r.settings == variant]
        rows.append(["median", variant, median([r.running_s for r in mine if r.running_s is not None]),
                     median([r.rest_s for r in mine]), *([""] * len(names)), ""])  # fmt: skip
    print_table(
        "Connect worker: kill -9 → every connector and task RUNNING; each phase in seconds after the previous",
        ["ROUND", "SETTINGS", "KILL→RUNNING S", "KILL→REST S", "→JVM LAUNCHED", "→JVM UP", "→PLUGINS", "→REST UP",
         "→GROUP JOINED", "→1ST ASSIGNMENT", "→TASKS STARTED", "→ALL RUNNING", "ASSIGNMENT DELAYS MS"],
        rows,
    )  # fmt: skip


def connect_rounds(
    stack: object, cluster: KafkaContext, connect_url: str, args: argparse.Namespace, scratch: Path
) -> None:
    variants = {"both": ["old", "new"], "old": ["old"], "new": ["new"]}[args.connect_settings]
    names = create_connectors(cluster, connect_url, scratch, args.connectors)
    results = [connect_round(stack, connect_url, names, r, v) for r, v in alternating(variants, args.rounds)]
    report_connect(results)


def main() -> None:
    from spark_jobs.sink.config import TRANSACTIONAL_WRITERS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("job", "connect"))
    parser.add_argument("--rate", type=float, default=100, help="payments/s offered to the job")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--warm-batches", type=int, default=3, help="batches the job commits before each kill")
    parser.add_argument(
        "--transactional-writer", choices=TRANSACTIONAL_WRITERS,
        help="the infer job's --transactional-writer [default: the job's own default]",
    )  # fmt: skip
    parser.add_argument(
        "--code", type=Path, help="run the job from this checkout (e.g. `git archive` of a commit) [default: this one]"
    )
    parser.add_argument(
        "--baseline-code", type=Path,
        help="restart the job from this checkout in odd rounds and from --code (or this one) in even ones: "
        "before and after side by side under the same load",
    )  # fmt: skip
    parser.add_argument("--connectors", type=int, default=3, help="FileStreamSource connectors besides the outbox sink")
    parser.add_argument("--connect-settings", choices=("both", "new", "old"), default="both")
    parser.add_argument("--broker-port", type=int)
    parser.add_argument("--connect-port", type=int)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))  # noqa: S311
    args = parser.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - kill timing, not cryptography
    print(f"seed {args.seed}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ikkai-recovery-") as tmp, own_stack(args, Path(tmp)) as stack:
        endpoints = stack.endpoints()  # type: ignore[attr-defined]
        cluster = KafkaContext.recorded(endpoints)  # resolved once, here, and passed down
        if args.only != "connect":
            report_jobs(job_rounds(cluster, args, Path(tmp), rng))
        if args.only != "job":
            connect_rounds(stack, cluster, endpoints.connect_url, args, Path(tmp))


if __name__ == "__main__":
    main()
