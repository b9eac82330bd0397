"""Chaos for the infer job: kill -9 it at random moments, many times, and check exactly-once held.

Starts an embedded stack in a temporary home (or uses the cluster named by the environment),
fills ``events.payments``, runs the job once without crashes (the reference), then again into
fresh topics while SIGKILLing the whole job process group at random moments ``--kills`` times,
restarting it each time, and finally compares what read_committed consumers see: one decision
per event, decisions and outbox records byte-identical to the reference. Exit code 1 if not.

With ``--brokers 3 --broker-kills N`` the stack has three brokers (replication factor 3,
min.insync.replicas 2) and, alternating with the job kills, N times the broker leading one of
the job's output partitions, or the transaction coordinator of one of its transactional ids
(``ikkai.<query>.<p>``), is SIGKILLed mid-stream and started again while the job runs on.

Usage: .venv/bin/python -m benchmarks.infer_chaos [--kills 30] [--events 2000] [--seed N]
                                                  [--brokers 3 --broker-kills 10]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import external_endpoints, jars_dir
from stack.kit.chaos import ChaosStack
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique
from stack.shape import StackOptions

PARTITIONS = 2
APP = "ikkai"  # the infer job's default --app: its transactional ids are <app>.<query>.<p>
JOB, BROKER = "job", "broker"


def schedule(job_kills: int, broker_kills: int) -> list[str]:
    """The kills in order, alternating job and broker kills while both remain."""
    order: list[str] = []
    while job_kills or broker_kills:
        for kind, left in ((JOB, job_kills), (BROKER, broker_kills)):
            if left:
                order.append(kind)
        job_kills, broker_kills = max(job_kills - 1, 0), max(broker_kills - 1, 0)
    return order


def broker_victim(stack: ChaosStack, topics: InferTopics, query: str, rng: random.Random) -> tuple[str, str]:
    """A broker that matters to the job now: an output partition's leader, or a transaction coordinator."""
    partition = rng.randrange(PARTITIONS)
    if rng.random() < 0.5:
        topic = rng.choice((topics.decisions, topics.outbox))
        return stack.leader_of(topic, partition), f"leader of {topic}/{partition}"
    transactional_id = f"{APP}.{query}.{partition}"
    return stack.coordinator_of(transactional_id), f"transaction coordinator of {transactional_id}"


def fresh_outputs(cluster: KafkaContext, input_topic: str) -> InferTopics:
    name = unique("chaos")
    topics = InferTopics(input_topic, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)
    return topics


def finish(cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, batch: int, tries: int = 1) -> int:
    """Run the job until it has caught up; up to ``tries`` times (a broker's death may stop it). Its deaths."""
    for died in range(tries):
        job = InferProcess(cluster, topics, checkpoint, query, "--max-offsets-per-trigger", str(batch))
        if job.wait() == 0:
            return died
        print(f"the job died ({died + 1} of {tries} tries):\n{job.tail()}", file=sys.stderr)
    raise SystemExit(f"the job failed {tries} time(s) in a row")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30, help="SIGKILLs of the job")
    parser.add_argument("--brokers", type=int, default=1, help="brokers of the stack this run starts")
    parser.add_argument("--broker-kills", type=int, default=0, help="SIGKILLs of a broker the job needs (--brokers 3)")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=25, help="maxOffsetsPerTrigger")
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))  # noqa: S311
    args = parser.parse_args()
    external = external_endpoints()
    if args.broker_kills and (args.brokers < 3 or external):
        parser.error("--broker-kills needs --brokers 3 or more, on a stack of its own (IKKAI_BOOTSTRAP_SERVERS unset)")
    if args.brokers != 1 and external:
        parser.error("--brokers starts a stack of its own: unset IKKAI_BOOTSTRAP_SERVERS and IKKAI_CONNECT_URL")
    rng = random.Random(args.seed)  # noqa: S311 - chaos timing, not cryptography
    print(f"seed {args.seed}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ikkai-chaos-") as tmp:
        home = Path(tmp)
        stack = (
            None
            if external
            else ChaosStack(home / "stack", jars_dir(), StackOptions(brokers=args.brokers), progress=sys.stderr)
        )
        endpoints = external or stack.up()  # type: ignore[union-attr]
        cluster = KafkaContext.recorded(endpoints)
        try:
            payments = payment_records(simulate(args.seed, payments=args.events).payments)
            topic = create_topic(cluster, unique("events.payments"), PARTITIONS)
            produce_payments(cluster, topic, payments, PARTITIONS)
            reference = fresh_outputs(cluster, topic)
            finish(cluster, reference, home / "reference", unique("reference"), args.batch * 4)
            topics, query = fresh_outputs(cluster, topic), unique("chaos")
            done = Counter[str]()
            job: InferProcess | None = None
            for kind in schedule(args.kills, args.broker_kills):
                if job is None:
                    job = InferProcess(
                        cluster, topics, home / "chaos", query, "--max-offsets-per-trigger", str(args.batch)
                    )
                if not job.wait_for_batches(rng.choice((0, 1, 1, 2))):
                    if job.wait() == 0:
                        job = None
                        break  # caught up: nothing left to kill it in
                    done["job died"] += 1  # after a broker's death, say: started again at the next kill
                    print(f"the job died:\n{job.tail(5)}", file=sys.stderr)
                    job = None
                    continue
                time.sleep(rng.uniform(0.0, 2.0))
                if kind == JOB:
                    job.kill()
                    job = None
                    done["job kills"] += 1
                    print(f"job kill {done['job kills']}", file=sys.stderr)
                else:
                    assert stack is not None
                    victim, role = broker_victim(stack, topics, query, rng)
                    stack.kill(victim)
                    done["broker kills"] += 1
                    print(f"broker kill {done['broker kills']}: {victim}, {role}", file=sys.stderr)
                    stack.start(victim)  # the job runs on meanwhile
                    stack.wait_in_sync()  # before the next kill: two replicas in sync, or producing stops
            if job is not None and job.wait() != 0:
                done["job died"] += 1
            done["job died"] += finish(cluster, topics, home / "chaos", query, args.batch, tries=3)
            decisions = by_partition(cluster, topics.decisions)
            events = Counter(default_codec().decode("fraud_decision", v or b"")["event_id"] for _, v in flat(decisions))
            event_ids = {str(p["event_id"]) for p in payments}
            print(f"duplicates {sum(n - 1 for n in events.values())}, missing {len(event_ids - set(events))}")
            checks = {
                "one decision per event": sorted(events) == sorted(str(p["event_id"]) for p in payments)
                and set(events.values()) == {1},
                "decisions byte-identical": decisions == by_partition(cluster, reference.decisions),
                "outbox byte-identical": by_partition(cluster, topics.outbox)
                == by_partition(cluster, reference.outbox),
            }
            if not checks["decisions byte-identical"]:
                codec = default_codec()
                expected = by_partition(cluster, reference.decisions)
                for partition in sorted(decisions):
                    got = [codec.decode("fraud_decision", v or b"")["input_offset"] for _, v in decisions[partition]]
                    want = [codec.decode("fraud_decision", v or b"")["input_offset"] for _, v in expected[partition]]
                    print(f"partition {partition}: got offsets {got}", file=sys.stderr)
                    print(f"partition {partition}: want offsets {want}", file=sys.stderr)
            for check, ok in checks.items():
                print(f"{check:<26} {'ok' if ok else 'FAILED'}")
            print(f"{', '.join(f'{k} {n}' for k, n in sorted(done.items())) or 'no kills'}, seed {args.seed}")
            return 0 if all(checks.values()) else 1
        finally:
            if stack is not None:
                stack.down()


if __name__ == "__main__":
    sys.exit(main())
