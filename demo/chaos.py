"""When the demo breaks things: SIGKILL a job, an executor, a Spark or Connect worker, a broker; start it again. Pure.

Each action fires once, when the stage it hurts is mid-flight: the infer job is killed after it
decided some but not all events, the worker right after it once the first receipts came back (the
outbox sink has requests in flight); both recover at the same time. The raw lines are written
so that this holds: half at once, the next part once decisions flow, the last part only after
the worker restart (so the restarted worker's source task must resume the file where the
killed one committed). A stage that finished between two looks still gets its action, so a
requested chaos action is never silently skipped.

``SoakPlan`` is the long form (``ikkai demo --kills infer=30,enrich=10,broker=5,worker=5``):
many kills of each kind, spread evenly through the run, at most two recoveries at a time and
never two that disturb the same thing (``disturbs``: two of one kind, or two that hurt one Spark
job); the raw lines are written in step with the kills, so that each lands while data flows.
On a Spark standalone cluster (``--spark-workers 2``) two more kinds hit what only a cluster has:
``executor`` kills one executor JVM of a live job, in turn infer's and enrich's
(``executor_target``); ``spark-worker`` kills a Spark worker with its executors and starts it
again, in turn each worker (``spark_worker_target``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from demo.progress import StageProgress
from ikkai.contract.topics import (
    DECISIONS_FRAUD,
    DLQ_ENRICH,
    DLQ_INFER,
    EVENTS_PAYMENTS,
    INGEST_PAYMENTS,
    OUTBOX_REQUESTS,
)
from stack.spark_cluster import spark_worker_components

KILL_INFER = "kill -9 infer"
KILL_ENRICH = "kill -9 enrich"
KILL_BROKER = "kill -9 broker"
RESTART_WORKER = "restart connect worker"
KILL_EXECUTOR = "kill -9 executor"
KILL_SPARK_WORKER = "kill -9 spark worker"
ACTIONS = (KILL_INFER, RESTART_WORKER)
KINDS = {
    "infer": KILL_INFER, "enrich": KILL_ENRICH, "broker": KILL_BROKER, "worker": RESTART_WORKER,
    "executor": KILL_EXECUTOR, "spark-worker": KILL_SPARK_WORKER,
}  # fmt: skip
CLUSTER_KINDS = frozenset({KILL_EXECUTOR, KILL_SPARK_WORKER})  # a Spark standalone cluster of two workers or more
LIVE_JOBS = ("infer", "enrich")  # the Spark jobs the demo runs continuously, as their queries are named
_NUMBERED = re.compile(r" [0-9]+/[0-9]+$")


def kind_of(action: str) -> str:
    """The kind of a (numbered) action: 'kill -9 infer 3/30' → 'kill -9 infer'."""
    return _NUMBERED.sub("", action)


def number_of(action: str) -> int:
    """Which of its kind an action is, from 0: 'kill -9 infer 3/30' → 2; an unnumbered action → 0."""
    numbered = _NUMBERED.search(action)
    return int(numbered.group().split("/")[0]) - 1 if numbered else 0


def executor_target(number: int) -> str:
    """Whose executor the ``number``-th executor kill takes (from 0): infer's, then enrich's, in turn."""
    return LIVE_JOBS[number % len(LIVE_JOBS)]


def spark_worker_target(number: int, workers: int) -> str:
    """The Spark worker the ``number``-th worker kill takes (from 0): each of the ``workers`` in turn."""
    return spark_worker_components(workers)[number % workers]


def disturbs(action: str) -> frozenset[str]:
    """What an action puts out of order until it recovered: its kind, and the live Spark jobs it hurts.

    Two actions under way at once never share anything, so each recovery is the recovery from one
    fault: an executor kill waits while its job's driver is being killed, and a Spark worker kill,
    whose executors may be either job's, waits for every job kill.
    """
    kind = kind_of(action)
    jobs = {
        KILL_INFER: ("infer",),
        KILL_ENRICH: ("enrich",),
        KILL_EXECUTOR: (executor_target(number_of(action)),),
        KILL_SPARK_WORKER: LIVE_JOBS,
    }.get(kind, ())
    return frozenset({kind, *jobs})


def parse_kills(text: str) -> dict[str, int]:
    """'infer=30,enrich=10' → {KILL_INFER: 30, KILL_ENRICH: 10}; ValueError naming what is wrong."""
    kills: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, count = item.partition("=")
        if name.strip() not in KINDS or not count.strip().isdigit():
            raise ValueError(f"{item!r}: want <kind>=<count> with kind one of {', '.join(KINDS)}")
        kills[KINDS[name.strip()]] = int(count)
    return {kind: n for kind, n in kills.items() if n}


@dataclass(frozen=True)
class ChaosPlan:
    kill_infer_at: float = 0.3  # fraction of the expected decisions written

    @property
    def actions(self) -> tuple[str, ...]:
        return ACTIONS

    def due(
        self, stages: Mapping[str, StageProgress], started: Collection[str], running: Collection[str] = ()
    ) -> list[str]:
        """The actions to start now. The worker follows the infer job at once, once receipts flow:
        both are down together and recover in parallel, each mid-stream."""
        decided = stages["decided"]
        delivered = stages["delivered"]
        due = []
        if KILL_INFER not in started and decided.done > 0 and decided.fraction >= self.kill_infer_at:
            due.append(KILL_INFER)
        in_flight = delivered.done > 0 or not delivered.total  # receipts flow, or nothing was asked yet
        if RESTART_WORKER not in started and (KILL_INFER in started or due) and in_flight:
            due.append(RESTART_WORKER)
        return due

    def may_write(self, written: float, flowing: bool, started: Collection[str], finished: Collection[str]) -> bool:
        """Whether the writer, having written this share of the lines, may write the next part."""
        gate = gate_before(written, chaos=True)
        return gate is None or (flowing if gate == DECISIONS_FLOWING else gate in finished)


@dataclass(frozen=True)
class SoakPlan:
    """Many kills: ``kills`` maps an action kind (KILL_INFER, ...) to how many times it happens."""

    kills: Mapping[str, int]
    at_once: int = 2  # recoveries under way at the same time at most
    first_part: float = 0.2  # of the lines, written before the first kill

    @property
    def actions(self) -> tuple[str, ...]:
        """Every kill, numbered per kind ('kill -9 infer 3/30'), each kind spread evenly over the run."""
        spread = [
            ((i + 0.5) / n, order, f"{kind} {i + 1}/{n}")
            for order, (kind, n) in enumerate(self.kills.items())
            for i in range(n)
        ]
        return tuple(action for _, _, action in sorted(spread))

    def due(
        self, stages: Mapping[str, StageProgress], started: Collection[str], running: Collection[str] = ()
    ) -> list[str]:
        """The next actions in order, once decisions flow: ``at_once`` at most, none while an action that
        disturbs what it disturbs (``disturbs``) is still recovering."""
        if not stages["decided"].done:
            return []
        due: list[str] = []
        for action in (a for a in self.actions if a not in started):
            under_way = [*running, *due]
            busy = set().union(*(disturbs(a) for a in under_way))
            if len(under_way) >= self.at_once or disturbs(action) & busy:
                break
            due.append(action)
        return due

    def may_write(self, written: float, flowing: bool, started: Collection[str], finished: Collection[str]) -> bool:
        """The first part at once; then each further share of the lines once that share of the kills started."""
        if written < self.first_part:
            return True
        needed = math.floor(len(self.actions) * (written - self.first_part) / (1 - self.first_part))
        return flowing and len(started) >= needed


DECISIONS_FLOWING = "decisions flowing"
FIRST_PART, SECOND_PART = 0.5, 0.8  # shares of the raw lines written before each gate


def gate_before(written: float, chaos: bool) -> str | None:
    """What the writer waits for before writing more, having written this share of the lines."""
    if written >= SECOND_PART and chaos:
        return RESTART_WORKER
    if written >= FIRST_PART:
        return DECISIONS_FLOWING
    return None


def describe(stages: Mapping[str, StageProgress]) -> str:
    """Where the pipeline was, for the report: 'decided 812/2000, delivered 40/101'."""
    return ", ".join(f"{s.stage} {s.done}/{'?' if s.total is None else s.total}" for s in stages.values())


def broker_target(number: int, partitions: int) -> tuple[str, str, int]:
    """What the ``number``-th broker kill aims at: (role, topic or transactional id, partition).

    In turn the leader of a decision, the coordinator of the infer job's transactions, the leader
    of an outbox request, the coordinator of the enrich job's and the leader of an event, so that
    five kills hit each once; the partition alternates.
    """
    role, name = (
        ("leader", DECISIONS_FRAUD),
        ("coordinator", "ikkai.infer"),
        ("leader", OUTBOX_REQUESTS),
        ("coordinator", "ikkai.enrich"),
        ("leader", EVENTS_PAYMENTS),
    )[number % 5]
    partition = number % partitions
    return role, (f"{name}.{partition}" if role == "coordinator" else name), partition


def caught_up(job: str, counts: Mapping[str, int]) -> bool:
    """Whether the job (``infer`` or ``enrich``) has an outcome for every input record committed so far.

    A job killed when it had caught up commits no batch after its restart until more input comes;
    and in a soak more input comes only once the next kills start, the next of this kind waiting
    for this one: so a restarted job that has caught up counts as recovered, not as stalled.
    """
    if job == "infer":
        done, given = counts.get(DECISIONS_FRAUD, 0) + counts.get(DLQ_INFER, 0), counts.get(EVENTS_PAYMENTS, 0)
    else:
        done, given = counts.get(EVENTS_PAYMENTS, 0) + counts.get(DLQ_ENRICH, 0), counts.get(INGEST_PAYMENTS, 0)
    return given > 0 and done >= given
