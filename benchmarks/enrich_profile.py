"""Where the enrich job's CPU goes at steady state, by stage: its processes sampled by py-spy, JVM and Python apart.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL) and lands the seeded raw stream of ``enrich_steady.py`` (valid payments, status updates,
retries, late and malformed lines). The enrich job runs exactly-once (``--continuous --progress``); after its
first ``--warmup-batches`` batches, every Python process of its tree (the driver, PySpark's daemon and the Python
workers it forks) is sampled by py-spy for ``--seconds`` at ``--rate`` per second, while ``/proc`` counts the CPU
of each process of the tree over the same window: the JVM's share and Python's. py-spy records running threads
only, so its samples are CPU time. A sample is charged to the innermost frame of ikkai's own code on its stack
(``STAGES``: parse, the event-time gate, the as-of join, Avro, the transactional write, ...); one without such a
frame is Spark's own Python (the worker's Arrow and pandas conversion in and out, the driver's py4j).

py-spy is the profiler this needs, not a dependency of ikkai: ``.venv/bin/pip install py-spy`` (or name the
binary with ``--py-spy``).

The JVM's side is recorded by Java Flight Recorder (``jcmd <pid> JFR.start``, the JDK's own; ``--no-jfr`` skips it)
over the same window and its execution samples are charged the same way, to the first frame from the leaf in a
known part (``JVM_STAGES``: the Kafka consumer, Arrow, the Python runners, the state store, shuffle and cache, ...).

Usage: .venv/bin/python -m benchmarks.enrich_profile [--payments 150000] [--seconds 60] [--rate 50]
       [--warmup-batches 3] [--batch N] [--partitions 2] [--py-spy PATH] [--no-jfr] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.enrich_infer import land_raw_stream
from benchmarks.harness import (
    JobProcess,
    bench_stack,
    print_table,
    proc_stats,
    process_tree,
    python_module,
)
from benchmarks.steady_state import phase_summary
from spark_jobs.progress import parse_progress
from stack.kit.topic_io import create_topic, unique

# (stage, path fragment of the frame's file, function names or None for any): the first that matches the innermost
# frame of ikkai's code on a stack names the sample's stage.
STAGES: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("event-time gate: state to/from JSON", "spark_jobs/enrich/dedupe.py", ("to_json", "from_json")),
    ("event-time gate: decide and evict", "spark_jobs/enrich/dedupe.py", None),
    ("parse and validate", "spark_jobs/enrich/parse.py", None),
    ("parse and validate", "spark_jobs/enrich/reasons.py", None),
    ("Avro encoding (events, dead letters)", "spark_jobs/enrich/records.py",
     ("encode_events", "event_columns", "event_record", "encode_dead_letters", "dead_letter_record", "dlq_key")),
    ("classify: the per-partition loop", "spark_jobs/enrich/records.py", None),
    ("as-of join of master data", "spark_jobs/enrich/asof.py", None),
    ("transforms", "/transforms/", None),
    ("Avro encoding (events, dead letters)", "spark_jobs/avro_batch.py", None),
    ("Avro encoding (events, dead letters)", "ikkai/contract/", None),
    ("transactional write (produce, markers, commit)", "spark_jobs/sink/", None),
    ("the job shell (the batch function, foreachBatch's glue)", "spark_jobs/", None),
)  # fmt: skip
# The JVM's side, from Java Flight Recorder's execution samples of the driver JVM (in local mode the executors run
# in it too): the first frame from the leaf whose class starts with a prefix names the sample's stage.
JVM_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Kafka clients (the source's consumer)", ("org.apache.kafka.",)),
    ("Arrow (the JVM's side of the Python exchange)", ("org.apache.arrow.",)),
    ("Python runners: feeding and reading the workers", ("org.apache.spark.api.python.",
                                                         "org.apache.spark.sql.execution.python.")),
    ("state store (the event-time gate's state)", ("org.apache.spark.sql.execution.streaming.state.",)),
    ("shuffle, cache and block storage", ("org.apache.spark.shuffle.", "org.apache.spark.storage.",
                                          "org.apache.spark.util.collection.",
                                          "org.apache.spark.sql.execution.columnar.")),
    ("compression", ("java.util.zip.", "net.jpountz.", "com.github.luben.zstd.", "org.xerial.snappy.")),
    ("serialization", ("org.apache.spark.serializer.", "com.esotericsoftware.", "java.io.ObjectOutputStream",
                       "java.io.ObjectInputStream")),
    ("checkpoint and log files (Hadoop FS)", ("org.apache.hadoop.",)),
    ("query planning and micro-batch control", ("org.apache.spark.sql.execution.streaming.",
                                                "org.apache.spark.sql.catalyst.analysis.",
                                                "org.apache.spark.sql.catalyst.optimizer.",
                                                "org.apache.spark.sql.catalyst.rules.")),
    ("Spark SQL operators (generated code, rows)", ("org.apache.spark.sql.", "org.apache.spark.unsafe.")),
    ("scheduler, RPC and network", ("org.apache.spark.scheduler.", "org.apache.spark.rpc.", "org.apache.spark.network.",
                                    "io.netty.", "sun.nio.", "java.net.", "py4j.")),
    ("Spark core (tasks, RDDs)", ("org.apache.spark.",)),
)  # fmt: skip
OTHER_JVM = "other JVM code (JDK, Scala library)"
OTHER_OURS = "other ikkai code"
SPARK_WORKER = "Spark's Python worker (Arrow/pandas in and out)"
SPARK_DRIVER = "driver: py4j and pyspark"
WAITING = "waiting (a blocking read or a lock)"
OURS = ("/spark_jobs/", "/ikkai/", "/transforms/")
# Leaf functions of a thread that waits in a system call, which py-spy still samples as running: the driver waiting
# for the JVM's answer on py4j's socket, PySpark's daemon in its select loop (``manager``), a worker waiting for its
# next task (``read_int``). Their samples are no CPU.
BLOCKING = (
    "recv_into", "recv", "readinto", "read", "readline", "select", "poll", "wait", "acquire", "accept", "sleep",
    "manager", "read_int", "read_long", "_do_get_init_message", "CallbackServer.run", "FinalizerWorker.run",
)  # fmt: skip
NOT_A_STAGE = ("spark_jobs/python_daemon.py",)  # the daemon's wrapper is below every worker's stack
DRIVER, WORKERS = "driver", "workers"


def stage_of(frames: Sequence[str], driver: bool) -> str:
    """The stage of one sampled stack (frames outermost first, each ``function (path:line)``). Pure."""
    leaf = frames[-1].partition(" (")[0] if frames else ""
    if leaf in BLOCKING or leaf.rsplit(".", 1)[-1] in BLOCKING:  # a method's leaf is named Class.method
        return WAITING
    for frame in reversed(frames):
        function, _, where = frame.partition(" (")
        path = where.rsplit(":", 1)[0]
        if not any(part in path for part in OURS) or any(part in path for part in NOT_A_STAGE):
            continue
        for stage, fragment, functions in STAGES:
            if fragment in path and (functions is None or function in functions):
                return stage
        return OTHER_OURS
    return SPARK_DRIVER if driver else SPARK_WORKER


def samples_by_stage(lines: Iterable[str], driver_pid: int) -> Counter[tuple[str, str]]:
    """py-spy's raw output (``process P:"cmd";...;frame;frame count`` per line) counted by (role, stage): the
    driver's process or the Python workers'. Pure."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        processes = [p for p in parts if p.startswith("process ")]
        frames = [p for p in parts if not p.startswith("process ")]
        sampled = processes[-1].split(":", 1)[0].removeprefix("process ") if processes else ""
        driver = sampled == str(driver_pid)
        counts[(DRIVER if driver else WORKERS, stage_of(frames, driver))] += int(count)
    return counts


def jvm_stage_of(classes: Sequence[str]) -> str:
    """The stage of one JFR execution sample, its frames' class names leaf first. Pure."""
    for name in classes:
        for stage, prefixes in JVM_STAGES:
            if name.startswith(prefixes):
                return stage
    return OTHER_JVM


def jvm_samples_by_stage(recording: dict[str, Any]) -> Counter[str]:
    """``jfr print --json --events jdk.ExecutionSample`` counted by stage. Pure."""
    counts: Counter[str] = Counter()
    for event in recording.get("recording", {}).get("events", []):
        frames = (event.get("values", {}).get("stackTrace") or {}).get("frames") or []
        counts[jvm_stage_of([str(f["method"]["type"]["name"]).replace("/", ".") for f in frames])] += 1
    return counts


def cpu_by_kind(root: int) -> dict[int, tuple[str, float]]:
    """(``java``, ``driver`` (``root`` itself) or ``workers``, CPU seconds so far) of every live process of
    ``root``'s tree."""
    stats = proc_stats()
    result = {}
    for pid in process_tree(root, stats):
        stat = stats.get(pid)
        if stat is None:
            continue
        result[pid] = ("java" if stat.name == "java" else DRIVER if pid == root else WORKERS, stat.own_cpu_s)
    return result


def cpu_delta(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per kind between two readings, over the processes alive at the second (new ones from 0). Pure."""
    delta: dict[str, float] = {"java": 0.0, DRIVER: 0.0, WORKERS: 0.0}
    for pid, (kind, cpu) in after.items():
        delta[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return delta


def stage_rows(counts: Counter[tuple[str, str]], cpu: dict[str, float], lines: int) -> list[list[object]]:
    """Per (role, stage): samples, share of the role's running samples, and CPU s per 1,000 lines: each role's
    measured CPU shared out over its running samples (waiting ones get none). Pure."""
    rows: list[list[object]] = []
    for role in (WORKERS, DRIVER):
        mine = {stage: n for (r, stage), n in counts.items() if r == role}
        running = sum(n for stage, n in mine.items() if stage != WAITING)
        per_sample = cpu[role] / running if running else 0.0
        for stage, n in sorted(mine.items(), key=lambda item: -item[1]):
            waiting = stage == WAITING
            rows.append([role, stage, n, "" if waiting else f"{n / running:.1%}",
                         0.0 if waiting else round(1000 * n * per_sample / max(lines, 1), 3)])  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=150_000, help="payments in the raw stream (lines are more)")
    parser.add_argument("--seconds", type=float, default=60, help="seconds sampled after the warm-up")
    parser.add_argument("--rate", type=int, default=50, help="py-spy's samples per second per process")
    parser.add_argument("--warmup-batches", type=int, default=3)
    parser.add_argument("--batch", type=int, help="maxOffsetsPerTrigger [default: the job's own]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")))
    parser.add_argument("--keep-samples", type=Path, help="copy py-spy's raw samples (collapsed stacks) here")
    parser.add_argument("--no-jfr", action="store_true", help="no Java Flight Recorder recording of the JVM's side")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20,000 payments, 15 s")
    args = parser.parse_args()
    if args.quick:
        args.payments, args.seconds, args.batch = 20_000, 15, args.batch or 2_000
    if not Path(args.py_spy).exists():
        raise SystemExit(f"no py-spy at {args.py_spy}: `.venv/bin/pip install py-spy`, or name it with --py-spy")
    started = time.monotonic()
    with bench_stack("enrich-profile") as (cluster, _, scratch):
        ingest, merchants, customers, lines = land_raw_stream(cluster, args.payments, args.partitions)
        print(f"{lines:,} raw lines landed in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        name = unique("profile")
        events, dlq = (create_topic(cluster, f"{kind}.{name}", args.partitions) for kind in ("events", "dlq"))
        command, cwd, env = python_module(
            "spark_jobs.enrich", "--progress", "--continuous", "--bootstrap", cluster.bootstrap_servers,
            "--checkpoint", str(scratch / "enrich"), "--query", f"enrich-{name}", "--input", ingest, "--output", events,
            "--dlq", dlq, "--merchants", merchants, "--customers", customers,
            *(["--max-offsets-per-trigger", str(args.batch)] if args.batch else []),
        )  # fmt: skip
        job = JobProcess(command, cwd=cwd, env=env, start_marker=", mode ")
        raw_samples, recording = scratch / "py-spy.txt", scratch / "enrich.jfr"
        try:
            job.wait_started()
            while len(parse_progress(job.stamped)) < args.warmup_batches:
                if job.process.poll() is not None:
                    raise SystemExit(f"the job exited during its warm-up:\n{job.tail()}")
                time.sleep(0.1)
            before = cpu_by_kind(job.process.pid)
            window_start, cpu_before = time.monotonic(), before
            jvm = next((pid for pid, (kind, _) in before.items() if kind == "java"), None)
            if jvm is not None and not args.no_jfr:  # the driver JVM (in local mode the executors' too)
                subprocess.run(
                    ["jcmd", str(jvm), "JFR.start", "name=ikkai-profile", "settings=profile",
                     f"duration={int(args.seconds)}s", f"filename={recording}"],
                    check=True, stdout=subprocess.DEVNULL, timeout=60,
                )  # fmt: skip
            subprocess.run(
                [args.py_spy, "record", "--pid", str(job.process.pid), "--subprocesses", "--format", "raw",
                 "--full-filenames", "--rate", str(args.rate), "--duration", str(int(args.seconds)),
                 "--output", str(raw_samples)],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=args.seconds + 120,
            )  # fmt: skip
            window_end, cpu = time.monotonic(), cpu_delta(cpu_before, cpu_by_kind(job.process.pid))
            jvm_counts = jvm_profile(recording) if jvm is not None and not args.no_jfr else Counter()
        finally:
            job.stop()
        if args.keep_samples:
            shutil.copyfile(raw_samples, args.keep_samples)
        progress = [p for t, p in parse_progress(job.stamped) if window_start <= t <= window_end]
        report(samples_by_stage(raw_samples.read_text().splitlines(), job.process.pid), jvm_counts, cpu, progress,
               window_end - window_start, args)  # fmt: skip
    print(f"\n{time.monotonic() - started:.0f} s in all")


def jvm_profile(recording: Path, wait_s: float = 60) -> Counter[str]:
    """The JFR recording's execution samples by stage, once the JVM has written it (at the end of its duration)."""
    give_up_at = time.monotonic() + wait_s
    while not recording.exists() or time.time() - recording.stat().st_mtime < 2:  # written, and not still growing
        if time.monotonic() > give_up_at:
            print(f"no JFR recording at {recording} after {wait_s:.0f} s: the JVM's side is left out", file=sys.stderr)
            return Counter()
        time.sleep(0.5)
    printed = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample", str(recording)],
                             check=True, capture_output=True, text=True, timeout=300)  # fmt: skip
    return jvm_samples_by_stage(json.loads(printed.stdout))


def report(
    counts: Counter[tuple[str, str]], jvm_counts: Counter[str], cpu: dict[str, float],
    progress: Sequence[dict[str, object]], seconds: float, args: argparse.Namespace,
) -> None:  # fmt: skip
    read = sum(int(str(p.get("numInputRows", 0))) for p in progress)
    total_cpu = sum(cpu.values())
    shares = ", ".join(f"{kind} {cpu[kind]:.1f} s ({cpu[kind] / max(total_cpu, 1e-9):.0%})" for kind in cpu)
    print(f"\nwindow: {seconds:.1f} s, {len(progress)} batches, {read:,} raw lines ({read / seconds:,.0f} lines/s); "
          f"CPU {total_cpu:.1f} s = {1000 * total_cpu / max(read, 1):.2f} s per 1,000 lines: {shares}")  # fmt: skip
    for role in (WORKERS, DRIVER):
        running = sum(n for (r, stage), n in counts.items() if r == role and stage != WAITING)
        print(f"{role}: {running / args.rate:.1f} s of running samples against {cpu[role]:.1f} s of CPU (/proc)")
    print_table(
        f"Python CPU by stage (py-spy, {args.rate}/s per process; each role's /proc CPU shared over its samples)",
        ("role", "stage", "samples", "share", "CPU s per 1,000 lines"),
        stage_rows(counts, cpu, read),
    )
    jvm_samples = sum(jvm_counts.values())
    if jvm_samples:
        print_table(
            "JVM CPU by stage (Java Flight Recorder execution samples of the driver JVM; the JVM's /proc CPU shared "
            "over them, GC and JIT threads included)",
            ("stage", "samples", "share", "CPU s per 1,000 lines"),
            [[stage, n, f"{n / jvm_samples:.1%}", round(1000 * cpu["java"] * n / jvm_samples / max(read, 1), 3)]
             for stage, n in jvm_counts.most_common()],
        )  # fmt: skip
    phases = phase_summary([dict(p) for p in progress]) if progress else []
    print_table(
        "Spark's phases per batch (StreamingQueryProgress.durationMs)",
        ("phase", "batches", "median ms", "p99 ms", "share"),
        [(r.phase, r.batches, r.median_ms, r.p99_ms, f"{r.share:.0%}" if r.share is not None else "") for r in phases],
    )


if __name__ == "__main__":
    main()
