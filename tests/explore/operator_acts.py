"""The explorer's hands: the infer job started as an operator starts it (``ikkai jobs run infer``), and its outcome.

Each act is a real process on the real stack (``demo.infer_process.InferProcess``), or a change an
operator makes to the topics (``recreate_input``, ``grow``). An act ends
in one of four outcomes, read from the process alone: it ``ran`` (exit 0, or a continuous query
that drained the input and was then stopped), it was ``refused`` (a non-zero exit with the CLI's
one-line ``ikkai: error:``), it was ``killed`` (the SIGKILL the act asked for), or it ``failed``
in some other way (a traceback, a timeout: never allowed). Every wait is a condition polled
against a deadline. A refusal's fix is followed as the operator reads it: ``fix_command`` takes
the flags it names from its line, whatever they are.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from demo.infer_process import InferProcess, InferTopics
from ikkai.contract.kafka import KafkaContext
from spark_jobs.progress import parse_progress
from stack.kit.topic_io import create_topic, grow_topics, produce_payments, unique

PARTITIONS = 2
RUN_DEADLINE_S = 900.0  # one job process from start to exit: Spark starts slowly on a loaded 2-core machine
ERROR_PREFIX = "ikkai: error:"
RAN, REFUSED, KILLED, FAILED = "ran", "refused", "killed", "failed"


@dataclass(frozen=True)
class Pipeline:
    """One exploration's own topics: an input, the live outputs and the shadow ones, all with ``PARTITIONS``."""

    cluster: KafkaContext
    topics: InferTopics
    folder: Path

    @classmethod
    def create(cls, cluster: KafkaContext, folder: Path) -> Pipeline:
        name = unique("explore")
        topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
        for topic in (*vars(topics).values(), f"{topics.decisions}.shadow", f"{topics.dlq}.shadow"):
            create_topic(cluster, topic, PARTITIONS)
        folder.mkdir(parents=True, exist_ok=True)
        return cls(cluster, topics, folder)

    @property
    def shadow_decisions(self) -> str:
        return f"{self.topics.decisions}.shadow"

    @property
    def layout(self) -> tuple[str, ...]:
        """Every topic the live and the shadow query read or write (the commits topics are the job's own)."""
        return (*vars(self.topics).values(), self.shadow_decisions, f"{self.topics.dlq}.shadow")

    def produce(self, events: list[dict[str, object]], partitions: int = PARTITIONS) -> None:
        produce_payments(self.cluster, self.topics.input, events, partitions)

    def recreate_input(self, partitions: int) -> None:
        """The input deleted and created again under its name (a new topic id, offsets from 0)."""
        admin = AdminClient(self.cluster.client_config())
        admin.delete_topics([self.topics.input], operation_timeout=60)[self.topics.input].result(90)
        end = time.monotonic() + 90
        while True:  # the deletion completes in the background: "already exists" (marked for deletion) until then
            try:
                created = admin.create_topics([NewTopic(self.topics.input, partitions)], operation_timeout=60)
                created[self.topics.input].result(90)
                break
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > end:
                    raise
                time.sleep(0.5)  # the poll's period: the condition is the creation succeeding
        create_topic(self.cluster, self.topics.input, partitions)  # waits until every partition has a leader

    def grow(self, partitions: int) -> None:
        """Every topic of the layout grown to ``partitions`` (Kafka adds partitions, it never removes them)."""
        grow_topics(self.cluster, self.layout, partitions)

    def start(self, query: str, checkpoint: Path, *flags: str) -> InferProcess:
        return InferProcess(self.cluster, self.topics, checkpoint, query, *flags)


@dataclass(frozen=True)
class Outcome:
    kind: str  # RAN, REFUSED, KILLED or FAILED
    command: str  # the act's flags, for the journal
    detail: str = ""  # the refusal's line (bounded), or the log's tail
    line: str = ""  # a refusal's whole line, its fix included (the CLI bounds it)

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


def outcome(job: InferProcess, flags: tuple[str, ...], *, stopped_by_us: bool = False) -> Outcome:
    """What ended ``job`` (already exited), judged from its exit code and its stderr only."""
    code = job.process.returncode
    errors = [line.strip() for line in job.log if line.startswith(ERROR_PREFIX)]
    command = " ".join(flags)
    if code == 0 or (stopped_by_us and not errors):
        return Outcome(RAN, command)
    if errors:
        return Outcome(REFUSED, command, errors[-1][:400], errors[-1])
    if any("fault injection: SIGKILL" in line for line in job.log):
        return Outcome(KILLED, command)
    return Outcome(FAILED, command, f"exit {code}: {job.tail(15)[-2000:]}")


def run_to_end(pipeline: Pipeline, query: str, checkpoint: Path, *flags: str) -> Outcome:
    """An availableNow run: the job drains the input and exits (or is refused, or kills itself when told to)."""
    job = pipeline.start(query, checkpoint, *flags)
    try:
        job.wait(RUN_DEADLINE_S)
    finally:
        job.kill()
    return outcome(job, flags)


def rows_read(job: InferProcess) -> int:
    """Input rows the job's micro-batches read so far (its ``--progress`` lines)."""
    return sum(int(p["numInputRows"]) for _, p in parse_progress([(0.0, line) for line in list(job.log)]))


def attached(job: InferProcess) -> bool:
    """Past its start checks: the sink is attached and the query runs (its owner check is behind it)."""
    return any(": the sink is attached as " in line for line in list(job.log))


def wait_until(condition: object, what: str, deadline_s: float = RUN_DEADLINE_S) -> None:
    """Poll ``condition`` (a callable) until it holds; fail naming ``what`` at the deadline."""
    assert callable(condition)
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"waited {deadline_s:.0f} s for {what}"
        time.sleep(0.25)  # the poll's period, not a wait for an outcome


def start_together(
    pipeline: Pipeline, starts: list[tuple[str, Path, tuple[str, ...]]], events: list[dict[str, object]]
) -> list[Outcome]:
    """Two (or more) continuous queries started at once, each past its start checks before any event exists.

    Every query is started, then each is waited for until it is attached or has exited (refused): none can
    have committed anything, since the input gets its events only then. The act ends when each query still
    running has read every event (its progress lines count them) and each other one has exited; the running
    ones are then stopped with SIGKILL between micro-batches (no transaction open).
    """
    continuous = ("--continuous", "--trigger-interval", "500ms", "--progress")
    jobs = [(pipeline.start(query, checkpoint, *flags, *continuous), flags) for query, checkpoint, flags in starts]
    try:
        for job, _ in jobs:
            wait_until(lambda job=job: attached(job) or job.process.poll() is not None, "a query to start")
        pipeline.produce(events)
        for job, _ in jobs:
            wait_until(lambda job=job: job.process.poll() is not None or rows_read(job) >= len(events),
                       "a query to read every event, or exit")  # fmt: skip
        running = [job.process.poll() is None for job, _ in jobs]
    finally:
        for job, _ in jobs:
            job.kill()
    return [outcome(job, flags, stopped_by_us=alive) for (job, flags), alive in zip(jobs, running, strict=True)]


def fresh_checkpoint(pipeline: Pipeline, query: str) -> Path:
    return pipeline.folder / unique(f"checkpoint-{query}")


@dataclass(frozen=True)
class FixCommand:
    """What a refusal tells the operator to run: its ``--flag value`` pairs, and whether on a fresh checkpoint."""

    flags: tuple[str, ...]
    fresh_checkpoint: bool

    def value(self, flag: str) -> str:
        pairs = dict(zip(self.flags[::2], self.flags[1::2], strict=True))
        return pairs.get(flag, "")


FLAG_WITH_VALUE = re.compile(r"(--[a-z][a-z-]*) +([^\s(][^\s]*)")


def fix_command(line: str) -> FixCommand:
    """The command a refusal's line names, read as an operator reads it. Pure.

    Every ``--flag value`` in the line, in order (a value ends at a space, its trailing ``,;:.)`` are
    prose), except ``--checkpoint``, which the line names as "a fresh --checkpoint": the act then
    starts on a new folder. Nothing is assumed about which flags a fix names.
    """
    flags: list[str] = []
    for flag, value in FLAG_WITH_VALUE.findall(line):
        if flag != "--checkpoint" and not value.startswith("-"):
            flags += [flag, value.rstrip(",;:.)")]
    return FixCommand(tuple(flags), "fresh --checkpoint" in line)
