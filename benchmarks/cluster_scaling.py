"""Infer and enrich on 1 and 2 Spark executors, the outbox sink on 1 and 2 Connect workers, A B A B in one run.

Starts one embedded stack in a temporary home with a Spark standalone master, 2 Spark workers (1 core each) and 2
Kafka Connect workers in one group (``StackOptions(spark_workers=2, connect_workers=2)``), stopped at the end
whatever happens (SIGTERM included). Then, per round, alternating:

* **infer**: ``ikkai jobs run infer --master spark://…`` drains the same pre-filled ``events.payments`` topic
  (``--events``, batches of ``--infer-batch``) into fresh output topics, its application given 1 and then 2
  executors of one core each (``spark.cores.max`` = ``spark.executor.instances`` = N, ``spark.executor.cores=1``,
  in a ``spark-defaults.conf`` read through ``SPARK_CONF_DIR``, as the demo and the cluster tests do). The
  driver waits until all N executors have registered (``spark.scheduler.minRegisteredResourcesRatio=1``), so the
  clock, which starts at the job's "model ..." line, never runs while an executor is still launching.
* **enrich**: the same for the enrich job over one landed raw stream (``--payments``, batches of
  ``--enrich-batch``); every raw line must come out once, as an event or a dead letter.
* **outbox sink**: the ``outbox-sink`` bundle delivers the same number of requests (``--requests``, 3 partitions)
  to the reference receiver with ``tasks.max`` 1 (one task: one Connect worker) and 2 (a task on each of the
  group's two workers: the placement is read from the Connect REST status while it runs and shown); one
  uncounted warm-up drain first (the workers' JIT), and the receiver's 8-connection ceiling in every round.

What is reported per run: events (raw lines, requests) per second over the whole run (from Spark up to the job's
exit: query start, every batch and shutdown), per second after the first batch (batches 2..N: the part that a
second executor could make faster; the first pays for Python workers and producers on every executor), and the
CPU seconds per 1,000 of the job's processes wherever they run (driver, spark-submit's JVM, executors, their
Python workers; sampled from /proc every 0.5 s, each process's own user + system time, so a process shorter than
that is missed) or, for the sink, of both Connect workers' JVMs. The broker's CPU is in neither.

On a 2-core machine every executor, the driver, the broker and Connect share the same 2 cores: the ratios 2/1
measure what a second executor or worker costs there, not what it gains on a cluster. Ratios are per round; quote
the medians.

Usage: .venv/bin/python -m benchmarks.cluster_scaling [--events 20000] [--infer-batch 5000] [--payments 8000]
       [--enrich-batch 2500] [--requests 6000] [--rounds 2] [--partitions 2] [--only infer,enrich,outbox] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from urllib.parse import urlparse

from benchmarks.enrich_infer import land_raw_stream
from benchmarks.harness import (
    JobProcess,
    alternating,
    median,
    print_table,
    proc_stats,
    process_tree,
)
from benchmarks.infer_throughput import EOS, fresh_outputs
from benchmarks.outbox_throughput import ceiling, sink_rate, start_receiver
from benchmarks.peer_streams import tree_cpu_seconds
from demo.lineup import IKKAI, spark_defaults
from demo.payments_simulation import payment_records, simulate
from deploy.connect_rest import ConnectClient
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import IkkaiError
from ikkai.settings import jars_dir
from stack.kit.topic_io import by_partition, create_topic, produce_payments, unique
from stack.local_stack import LocalStack
from stack.processes import stack_processes
from stack.shape import StackOptions
from stack.spark_cluster import SPARK_MASTER, shared_dir, spark_worker_components

REPO = Path(__file__).resolve().parents[1]

WORKERS = 2  # Spark workers and Connect workers of the stack
SCALES = [1, 2]  # executors of an application; Connect workers the sink's tasks run on
INFER, ENRICH, OUTBOX = "infer", "enrich", "outbox sink"
CLUSTER_VARS = ("IKKAI_BOOTSTRAP_SERVERS", "IKKAI_CONNECT_URL")
SAMPLE_S = 0.5


class Interrupted(Exception):
    """SIGTERM: unwind through every ``finally`` (the job, the receiver, the stack) instead of dying in place."""


class RunFailed(Exception):
    """One configuration's run failed; the table says how and the benchmark goes on."""


# ---------------------------------------------------------------- results and tables (pure)


@dataclass(frozen=True)
class Run:
    round: int
    what: str  # INFER, ENRICH or OUTBOX
    scale: int  # executors, or Connect workers the sink's tasks were meant for
    count: int  # events, raw lines or requests
    seconds: float | None = None  # the whole run: Spark up to exit; the sink: first to last request received
    after_first: float | None = None  # per second over batches 2..N
    batches: int = 0
    cpu_s: float | None = None
    placed: str = ""  # where it ran: Spark workers with an executor, Connect workers with a task
    failure: str | None = None

    @property
    def rate(self) -> float | None:
        return self.count / self.seconds if self.seconds and self.failure is None else None

    @property
    def cpu_per_1000(self) -> float | None:
        return self.cpu_s * 1000 / self.count if self.cpu_s is not None and self.failure is None else None


def unit(what: str) -> str:
    return "Connect worker(s)" if what == OUTBOX else "executor(s)"


def run_rows(runs: Sequence[Run]) -> list[list[object]]:
    return [
        [r.round, r.what, f"{r.scale} {unit(r.what)}", r.count, r.seconds, r.rate, r.after_first, r.batches or None,
         r.cpu_per_1000, r.placed or "-", r.failure or "ok"]
        for r in runs
    ]  # fmt: skip


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summary_rows(runs: Sequence[Run], rounds: int) -> list[list[object]]:
    """Per job and measure: the value at 1 and at 2 (medians over the rounds) and the ratio 2/1 per round."""
    by = {(r.round, r.what, r.scale): r for r in runs}
    rows: list[list[object]] = []
    measures: list[tuple[str, Callable[[Run], float | None]]] = [
        ("per second", lambda r: r.rate),
        ("per second after batch 1", lambda r: r.after_first),
        ("CPU s / 1000", lambda r: r.cpu_per_1000),
    ]
    for what in dict.fromkeys(r.what for r in runs):
        for name, measure in measures:
            if what == OUTBOX and name == "per second after batch 1":
                continue

            def at(
                n: int, scale: int, what: str = what, measure: Callable[[Run], float | None] = measure
            ) -> float | None:
                run = by.get((n, what, scale))
                return measure(run) if run is not None else None

            medians = [median(present(at(n, s) for n in range(1, rounds + 1))) for s in SCALES]
            ratios = [ratio(at(n, 2), at(n, 1)) for n in range(1, rounds + 1)]
            rows.append([f"{what}, {name}", *medians, *ratios, median(present(ratios))])
    return rows


def present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def after_first_batch(batch_times: Sequence[float], count: int, batch: int) -> float | None:
    """Per second over batches 2..N: what is left after the first batch (``batch`` records: maxOffsetsPerTrigger
    splits a trigger across partitions by what each holds) over the time from the first batch's line to the
    last's. None with fewer than two batches."""
    if len(batch_times) < 2 or count <= batch:
        return None
    return (count - batch) / (batch_times[-1] - batch_times[0])


# ---------------------------------------------------------------- CPU of processes wherever they run


class ProcessCpu:
    """User + system CPU seconds spent since it started by ``roots`` and every process ever seen under them.

    Each process's own time (not its reaped children's: an executor's Python workers are counted themselves,
    and the processes a worker reaps are not counted twice), sampled every ``SAMPLE_S``; a process is told
    apart by pid and start time. ``placed`` names the roots (Spark workers) under which a child was seen.
    """

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = dict(roots)
        self.first: dict[tuple[int, float], float] = {}
        self.last: dict[tuple[int, float], float] = {}
        self.busy: set[str] = set()
        self._lock = threading.Lock()
        self.sample()
        self.first = dict(self.last)  # what the long-lived roots had spent before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, name: str, pid: int) -> None:
        with self._lock:
            self.roots[name] = pid

    def sample(self) -> None:
        stats = proc_stats()
        with self._lock:
            roots = dict(self.roots)
        for name, root in roots.items():
            tree = process_tree(root, stats)
            if tree - {root}:
                self.busy.add(name)
            for pid in tree:
                stat = stats.get(pid)
                if stat is not None:
                    self.last[(pid, stat.started)] = stat.own_cpu_s

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        self.sample()
        return sum(spent - self.first.get(key, 0.0) for key, spent in self.last.items())


# ---------------------------------------------------------------- the stack


def refuse_external_cluster() -> None:
    named = [name for name in CLUSTER_VARS if os.environ.get(name)]
    if named:
        raise SystemExit(f"{' and '.join(named)} set: this benchmark starts its own stack with a Spark master and "
                         "two Connect workers; unset them")  # fmt: skip


def interrupt_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second one must not cut the stack's stop short
        raise Interrupted(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


@contextmanager
def cluster_stack(prefix: str) -> Iterator[tuple[LocalStack, Path]]:
    """(the running stack, a scratch folder): ``WORKERS`` Spark and Connect workers in a temporary home; every
    process of it, executors included, stopped on the way out."""
    with tempfile.TemporaryDirectory(prefix=f"ikkai-{prefix}-") as tmp:
        home = Path(tmp)
        stack = LocalStack(
            home / "stack",
            jars_dir(),
            StackOptions(spark_workers=WORKERS, connect_workers=WORKERS),
            progress=sys.stderr,
        )
        try:
            stack.up()
            yield stack, home
        finally:
            stack.down()


def spark_conf_dirs(scratch: Path) -> dict[int, Path]:
    """Per executor count, a ``SPARK_CONF_DIR`` whose spark-defaults.conf gives the application that many executors
    of one core; the driver waits until all have registered (up to 120 s) before it runs anything."""
    dirs = {}
    for executors in SCALES:
        folder = scratch / f"spark-conf-{executors}"
        folder.mkdir()
        (folder / "spark-defaults.conf").write_text(spark_defaults({
            "spark.cores.max": str(executors),
            "spark.executor.instances": str(executors),
            "spark.executor.cores": "1",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        }))  # fmt: skip
        dirs[executors] = folder
    return dirs


def spark_roots(stack: LocalStack) -> dict[str, int]:
    """The Spark master's and workers' pids: executors are the workers' children."""
    running = stack_processes(stack.home)
    names = [SPARK_MASTER, *spark_worker_components(WORKERS)]
    return {name: running[name][0] for name in names if running.get(name)}


def wait_executors_gone(stack: LocalStack, timeout: float = 60) -> None:
    """Until no worker has a child left (the last application's executors ended), so the next run starts with
    every core free and its CPU is not the last one's."""
    give_up_at = time.monotonic() + timeout
    workers = {k: v for k, v in spark_roots(stack).items() if k != SPARK_MASTER}
    while any(process_tree(pid) - {pid} for pid in workers.values()) and time.monotonic() < give_up_at:
        time.sleep(0.2)


# ---------------------------------------------------------------- the jobs on the cluster


@dataclass
class JobRun:
    """One job's command on the cluster, what it should write, and how to read its batches."""

    name: str  # the query
    args: list[str]
    start_marker: str
    count: int
    batch: int
    check: Callable[[], str | None]  # after the exit: None, or why the output is wrong


def job_env(stack: LocalStack, conf_dir: Path) -> dict[str, str]:
    return {"IKKAI_HOME": str(stack.home), "IKKAI_JARS_DIR": str(jars_dir()), "SPARK_CONF_DIR": str(conf_dir)}


def run_on_cluster(stack: LocalStack, job_name: str, run: JobRun, conf_dir: Path, timeout: float) -> Run:
    """``ikkai jobs run <job> --master spark://…`` to the end; a failure is returned, not raised."""
    master = stack.spark_master_url()
    assert master is not None
    cpu = ProcessCpu(spark_roots(stack))
    command = [str(IKKAI), "jobs", "run", job_name, "--master", master, *run.args]
    job = JobProcess(command, cwd=REPO, env=job_env(stack, conf_dir), start_marker=run.start_marker, merge_stdout=True)
    cpu.add("job", job.process.pid)
    failure: str | None = None
    seconds: float | None = None
    try:
        job.wait_started(timeout=300)
        assert job.started is not None
        code = job.wait(timeout)
        seconds = time.monotonic() - job.started
        failure = f"exit {code}: {last_error(job.log)}" if code != 0 else run.check()
    except subprocess.TimeoutExpired:
        failure = f"still running after {timeout:.0f} s"
    except SystemExit as exc:  # wait_started: the job exited or never started
        failure = f"did not start: {last_error(job.log) or exc}"
    finally:
        job.stop()
        wait_executors_gone(stack)
        cpu_s = cpu.stop()
    if failure is not None:
        print(f"{job_name} failed ({failure}); its last lines:\n{job.tail(40)}", file=sys.stderr, flush=True)
    batch_times = [at for at, line in job.stamped if line.startswith(f"{run.name}: batch ") and " committed " in line]
    workers = sorted(name for name in cpu.busy if name.startswith("spark-worker"))
    return Run(0, job_name, 0, run.count, seconds, after_first_batch(batch_times, run.count, run.batch),
               len(batch_times), cpu_s, ", ".join(workers), failure)  # fmt: skip


def last_error(log: Sequence[str]) -> str:
    """The job's last line that says what went wrong, shortened for a table cell."""
    for line in reversed(log):
        if any(word in line for word in ("Error", "error:", "Exception", "refus")):
            return line.strip()[:160]
    return (log[-1].strip() if log else "")[:160]


def infer_runs(stack: LocalStack, args: argparse.Namespace) -> Callable[[], JobRun]:
    """The pre-filled input, once; each call gives a run into fresh output topics."""
    cluster = stack.kafka_cluster()
    topic = create_topic(cluster, unique("events.payments"), args.partitions)
    produce_payments(cluster, topic, payment_records(simulate(3, payments=args.events).payments), args.partitions)

    def one() -> JobRun:
        topics = fresh_outputs(cluster, topic, args.partitions)
        name = unique("infer").replace(".", "-")

        def check() -> str | None:
            decisions = sum(len(records) for records in by_partition(cluster, topics.decisions).values())
            return None if decisions >= args.events else f"{decisions} decisions for {args.events} events"

        return JobRun(name, [
            "--bootstrap", cluster.bootstrap_servers, "--checkpoint", str(shared_dir(stack.home) / name),
            "--query", name,
            "--input", topics.input, "--decisions", topics.decisions, "--outbox", topics.outbox, "--dlq", topics.dlq,
            "--mode", EOS, "--max-offsets-per-trigger", str(args.infer_batch),
        ], f"{name}: model ", args.events, args.infer_batch, check)  # fmt: skip

    return one


def enrich_runs(stack: LocalStack, args: argparse.Namespace) -> Callable[[], JobRun]:
    cluster = stack.kafka_cluster()
    ingest, merchants, customers, lines = land_raw_stream(cluster, args.payments, args.partitions)

    def one() -> JobRun:
        name = unique("enrich").replace(".", "-")
        events, dlq = f"events.payments.{name}", f"dlq.enrich.{name}"
        for topic in (events, dlq):
            create_topic(cluster, topic, args.partitions)

        def check() -> str | None:
            written = sum(len(records) for t in (events, dlq) for records in by_partition(cluster, t).values())
            return None if written == lines else f"{written} events and dead letters for {lines} raw lines"

        return JobRun(name, [
            "--bootstrap", cluster.bootstrap_servers, "--checkpoint", str(shared_dir(stack.home) / name),
            "--query", name,
            "--input", ingest, "--output", events, "--dlq", dlq, "--merchants", merchants, "--customers", customers,
            "--mode", EOS, "--max-offsets-per-trigger", str(args.enrich_batch),
        ], ", lateness ", lines, args.enrich_batch, check)  # fmt: skip

    return one


def measure_job(
    stack: LocalStack, job_name: str, runs: Callable[[], JobRun], conf: dict[int, Path], args: argparse.Namespace
) -> list[Run]:
    results = []
    for n, label in alternating([str(s) for s in SCALES], args.rounds):
        executors = int(label)
        result = run_on_cluster(stack, job_name, runs(), conf[executors], args.job_timeout)
        result = dataclasses.replace(result, round=n, scale=executors)
        results.append(result)
        rate = f"{result.rate:,.0f}/s" if result.rate else f"FAILED: {result.failure}"
        print(f"{job_name}, round {n}, {executors} executor(s): {rate} on {result.placed or '-'}", file=sys.stderr,
              flush=True)  # fmt: skip
    return results


# ---------------------------------------------------------------- the outbox sink on the Connect group


class TaskPlacement:
    """Which Connect workers ran the benchmark's sink tasks, from the REST status, polled while it runs."""

    def __init__(self, client: ConnectClient, names: dict[str, str]) -> None:
        self.client = client
        self.names = names  # worker_id (host:port) -> the stack's component name
        self.workers: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                expanded = self.client.connectors_expanded()
            except IkkaiError:  # the REST client's errors (ConnectRestError and the rest)
                continue  # a rebalance: ask again
            for name, about in expanded.items():
                if name.startswith("bench-outbox-"):
                    tasks = about.get("status", {}).get("tasks", [])
                    self.workers.update(str(t.get("worker_id", "?")) for t in tasks)

    def stop(self) -> str:
        self._stop.set()
        self._thread.join(5)
        return ", ".join(sorted(self.names.get(w, w) for w in self.workers))


def connect_pids(stack: LocalStack) -> list[int]:
    running = stack_processes(stack.home)
    return [pid for name in stack.connect_workers for pid in running.get(name, [])]


def measure_sink(
    stack: LocalStack, scratch: Path, args: argparse.Namespace
) -> tuple[list[Run], list[tuple[int, float]]]:
    """(sink runs, (round, requests/s) of the receiver's 8-connection ceiling)."""
    endpoints = stack.endpoints()
    assert endpoints is not None
    cluster, connect_url = KafkaContext.recorded(endpoints), endpoints.connect_url
    names = {urlparse(url).netloc: name for url, name in zip(stack.connect_urls(), stack.connect_workers, strict=True)}
    receiver, url = start_receiver(scratch / "receiver.sqlite")
    runs: list[Run] = []
    ceilings: list[tuple[int, float]] = []
    try:
        for _ in range(args.warmup):
            sink_rate(cluster, connect_url, url, args.requests, SCALES[-1])
        for n, label in alternating([str(s) for s in SCALES], args.rounds):
            workers = int(label)
            if workers == SCALES[0]:  # the receiver alone, in the same round
                ceilings.append((n, ceiling(url, args.requests, 8)))
            pids = connect_pids(stack)
            cpu_before = sum(tree_cpu_seconds(pid) for pid in pids)
            placement = TaskPlacement(ConnectClient(connect_url), names)
            try:
                rate, _ = sink_rate(cluster, connect_url, url, args.requests, workers)
                failure = None
            except SystemExit as exc:  # sink_rate's "only N of M delivered"
                rate, failure = 0.0, str(exc)
            placed = placement.stop()
            cpu_s = sum(tree_cpu_seconds(pid) for pid in pids) - cpu_before
            seconds = args.requests / rate if rate else None
            runs.append(Run(n, OUTBOX, workers, args.requests, seconds, None, 0, cpu_s, placed, failure))
            print(f"outbox sink, round {n}, tasks.max={workers}: {rate:,.0f}/s, tasks on {placed}", file=sys.stderr,
                  flush=True)  # fmt: skip
    finally:
        receiver.terminate()
        receiver.wait(10)
    return runs, ceilings


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="infer: pre-filled payments")
    parser.add_argument("--infer-batch", type=int, default=5_000, help="infer: maxOffsetsPerTrigger")
    parser.add_argument("--payments", type=int, default=8_000, help="enrich: payments in the raw stream (lines: more)")
    parser.add_argument("--enrich-batch", type=int, default=2_500, help="enrich: maxOffsetsPerTrigger")
    parser.add_argument("--requests", type=int, default=6_000, help="outbox sink: requests per drain")
    parser.add_argument("--warmup", type=int, default=1, help="outbox sink: uncounted drains before the first round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of 1 and 2 (at least 2 to quote a median)")
    parser.add_argument("--partitions", type=int, default=2, help="input and output partitions of the jobs")
    parser.add_argument("--job-timeout", type=float, default=600, help="seconds a job may run before it is failed")
    parser.add_argument("--only", default="infer,enrich,outbox", help="comma-separated: infer, enrich, outbox")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small inputs, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.infer_batch, args.payments, args.enrich_batch = 2_000, 1_000, 800, 500
        args.requests, args.rounds = 500, 1
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    only = {part.strip() for part in args.only.split(",")}
    refuse_external_cluster()
    interrupt_on_sigterm()
    runs: list[Run] = []
    ceilings: list[tuple[int, float]] = []
    started = time.monotonic()
    try:
        with cluster_stack("cluster-scaling") as (stack, scratch):
            conf = spark_conf_dirs(scratch)
            if INFER in only:
                runs += measure_job(stack, INFER, infer_runs(stack, args), conf, args)
            if ENRICH in only:
                runs += measure_job(stack, ENRICH, enrich_runs(stack, args), conf, args)
            if "outbox" in only:
                sink, ceilings = measure_sink(stack, scratch, args)
                runs += sink
    except Interrupted as exc:
        print(f"interrupted ({exc}): the stack was stopped; the runs so far follow", file=sys.stderr)
    elapsed = time.monotonic() - started
    print_table(
        f"cluster scaling by round (one stack: {WORKERS} Spark workers of 1 core, {WORKERS} Connect workers; "
        f"{os.cpu_count()} cores; {elapsed / 60:.1f} min in all)",
        ["ROUND", "WHAT", "ON", "COUNT", "SECONDS", "PER SECOND", "PER SECOND AFTER BATCH 1", "BATCHES",
         "CPU S / 1000", "RAN ON", "OUTCOME"],
        run_rows(runs),
    )  # fmt: skip
    if ceilings:
        print_table(
            "the reference receiver's ceiling (load generator, 8 connections), by round",
            ["ROUND", "REQUESTS", "PER SECOND"],
            [[n, args.requests, rate] for n, rate in ceilings],
        )
    print_table(
        f"medians over {args.rounds} round(s), and 2/1 per round",
        ["", "AT 1", "AT 2", *(f"2/1 ROUND {n}" for n in range(1, args.rounds + 1)), "2/1 MEDIAN"],
        summary_rows(runs, args.rounds),
    )


if __name__ == "__main__":
    main()
