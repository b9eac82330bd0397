"""Records/s of the infer job on this machine: exactly-once sink vs Spark's own (at-least-once) sink.

One side-by-side run: starts an embedded stack in a temporary home (or uses the cluster named
by IKKAI_BOOTSTRAP_SERVERS / IKKAI_CONNECT_URL), fills one ``events.payments`` topic, then runs
the infer job to the end of the input in each mode into fresh output topics. The clock starts
at the job's "model ..." line (Spark is up, the query is about to start) and stops when the
process exits, so JVM start-up is excluded and query start and shutdown are included.

Usage: .venv/bin/python benchmarks/infer_throughput.py [--events 20000] [--batch 5000] [--partitions 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.local_stack import LocalStack  # noqa: E402
from deploy.settings import external_endpoints, jars_dir  # noqa: E402
from spark_jobs.payments_simulation import payment_records, simulate  # noqa: E402
from tests.kafka_helpers import create_topic, unique  # noqa: E402
from tests.spark_jobs.infer_process import InferProcess, InferTopics  # noqa: E402
from tests.spark_jobs.records import by_partition, produce_payments  # noqa: E402


def run(bootstrap: str, input_topic: str, mode: str, batch: int, partitions: int, home: Path) -> tuple[float, int]:
    name = unique("bench")
    topics = InferTopics(input_topic, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(bootstrap, topic, partitions)
    job = InferProcess(bootstrap, topics, home / name, name, "--mode", mode, "--max-offsets-per-trigger", str(batch))
    while not any(" model " in line for line in job.log) and job.process.poll() is None:
        time.sleep(0.05)
    started = time.monotonic()
    code = job.wait()
    seconds = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"{mode} run failed:\n{job.tail()}")
    decisions = sum(len(records) for records in by_partition(bootstrap, topics.decisions).values())
    return seconds, decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=5_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ikkai-bench-") as tmp:
        home = Path(tmp)
        external = external_endpoints()
        stack = None if external else LocalStack(home / "stack", jars_dir(), progress=sys.stderr)
        bootstrap = external.bootstrap_servers if external else stack.up().bootstrap_servers  # type: ignore[union-attr]
        try:
            topic = create_topic(bootstrap, unique("events.payments"), args.partitions)
            produce_payments(
                bootstrap, topic, payment_records(simulate(3, payments=args.events).payments), args.partitions
            )
            print(f"{'MODE':<14} {'EVENTS':>7} {'DECISIONS':>9} {'SECONDS':>8} {'RECORDS/S':>10}")
            for mode in ("exactly-once", "at-least-once"):
                seconds, decisions = run(bootstrap, topic, mode, args.batch, args.partitions, home)
                print(
                    f"{mode:<14} {args.events:>7} {decisions:>9} {seconds:>8.1f} {args.events / seconds:>10.0f}",
                    flush=True,
                )
        finally:
            if stack is not None:
                stack.down()


if __name__ == "__main__":
    main()
