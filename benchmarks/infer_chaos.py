"""Chaos for the infer job: kill -9 it at random moments, many times, and check exactly-once held.

Starts an embedded stack in a temporary home (or uses the cluster named by the environment),
fills ``events.payments``, runs the job once without crashes (the reference), then again into
fresh topics while SIGKILLing the whole job process group at random moments ``--kills`` times,
restarting it each time, and finally compares what read_committed consumers see: one decision
per event, decisions and outbox records byte-identical to the reference. Exit code 1 if not.

Usage: .venv/bin/python benchmarks/infer_chaos.py [--kills 30] [--events 2000] [--seed N]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.local_stack import LocalStack  # noqa: E402
from deploy.settings import external_endpoints, jars_dir  # noqa: E402
from spark_jobs.payments_simulation import payment_records, simulate  # noqa: E402
from spark_jobs.serialization import default_codec  # noqa: E402
from tests.kafka_helpers import create_topic, unique  # noqa: E402
from tests.spark_jobs.infer_process import InferProcess, InferTopics  # noqa: E402
from tests.spark_jobs.records import by_partition, flat, produce_payments  # noqa: E402

PARTITIONS = 2


def fresh_outputs(bootstrap: str, input_topic: str) -> InferTopics:
    name = unique("chaos")
    topics = InferTopics(input_topic, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(bootstrap, topic, PARTITIONS)
    return topics


def finish(bootstrap: str, topics: InferTopics, checkpoint: Path, query: str, batch: int) -> None:
    job = InferProcess(bootstrap, topics, checkpoint, query, "--max-offsets-per-trigger", str(batch))
    if job.wait() != 0:
        raise SystemExit(f"the job failed:\n{job.tail()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=25, help="maxOffsetsPerTrigger")
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))  # noqa: S311
    args = parser.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - chaos timing, not cryptography
    print(f"seed {args.seed}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ikkai-chaos-") as tmp:
        home = Path(tmp)
        external = external_endpoints()
        stack = None if external else LocalStack(home / "stack", jars_dir(), progress=sys.stderr)
        bootstrap = external.bootstrap_servers if external else stack.up().bootstrap_servers  # type: ignore[union-attr]
        try:
            payments = payment_records(simulate(args.seed, payments=args.events).payments)
            topic = create_topic(bootstrap, unique("events.payments"), PARTITIONS)
            produce_payments(bootstrap, topic, payments, PARTITIONS)
            reference = fresh_outputs(bootstrap, topic)
            finish(bootstrap, reference, home / "reference", unique("reference"), args.batch * 4)
            topics, query, kills = fresh_outputs(bootstrap, topic), unique("chaos"), 0
            while kills < args.kills:
                job = InferProcess(
                    bootstrap, topics, home / "chaos", query, "--max-offsets-per-trigger", str(args.batch)
                )
                if not job.wait_for_batches(rng.choice((0, 1, 1, 2))):
                    job.wait()
                    break
                time.sleep(rng.uniform(0.0, 2.0))
                job.kill()
                kills += 1
                print(f"kill {kills}", file=sys.stderr)
            finish(bootstrap, topics, home / "chaos", query, args.batch)
            decisions = by_partition(bootstrap, topics.decisions)
            events = Counter(default_codec().decode("fraud_decision", v)["event_id"] for _, v in flat(decisions))
            checks = {
                "one decision per event": sorted(events) == sorted(str(p["event_id"]) for p in payments)
                and set(events.values()) == {1},
                "decisions byte-identical": decisions == by_partition(bootstrap, reference.decisions),
                "outbox byte-identical": by_partition(bootstrap, topics.outbox)
                == by_partition(bootstrap, reference.outbox),
            }
            if not checks["decisions byte-identical"]:
                codec = default_codec()
                expected = by_partition(bootstrap, reference.decisions)
                for partition in sorted(decisions):
                    got = [codec.decode("fraud_decision", v)["input_offset"] for _, v in decisions[partition]]
                    want = [codec.decode("fraud_decision", v)["input_offset"] for _, v in expected[partition]]
                    print(f"partition {partition}: got offsets {got}", file=sys.stderr)
                    print(f"partition {partition}: want offsets {want}", file=sys.stderr)
            for check, ok in checks.items():
                print(f"{check:<26} {'ok' if ok else 'FAILED'}")
            print(f"kills {kills}, seed {args.seed}")
            return 0 if all(checks.values()) else 1
        finally:
            if stack is not None:
                stack.down()


if __name__ == "__main__":
    sys.exit(main())
