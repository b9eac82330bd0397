"""The explorer's hands: the infer job started as an operator starts it (``ikkai jobs run infer``), and its outcome.

Each act is a real process on the real stack (``demo.infer_process.InferProcess``). An act ends
in one of four outcomes, read from the process alone: it ``ran`` (exit 0, or a continuous query
that drained the input and was then stopped), it was ``refused`` (a non-zero exit with the CLI's
one-line ``ikkai: error:``), it was ``killed`` (the SIGKILL the act asked for), or it ``failed``
in some other way (a traceback, a timeout: never allowed). Every wait is a condition polled
against a deadline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from demo.infer_process import InferProcess, InferTopics
from demo.pipeline_io import create_topic, produce_payments, unique
from spark_jobs.progress import parse_progress

PARTITIONS = 2
RUN_DEADLINE_S = 900.0  # one job process from start to exit: Spark starts slowly on a loaded 2-core machine
ERROR_PREFIX = "ikkai: error:"
RAN, REFUSED, KILLED, FAILED = "ran", "refused", "killed", "failed"


@dataclass(frozen=True)
class Pipeline:
    """One exploration's own topics: an input, the live outputs and the shadow ones, all with ``PARTITIONS``."""

    bootstrap: str
    topics: InferTopics
    folder: Path

    @classmethod
    def create(cls, bootstrap: str, folder: Path) -> Pipeline:
        name = unique("explore")
        topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
        for topic in (*vars(topics).values(), f"{topics.decisions}.shadow", f"{topics.dlq}.shadow"):
            create_topic(bootstrap, topic, PARTITIONS)
        folder.mkdir(parents=True, exist_ok=True)
        return cls(bootstrap, topics, folder)

    @property
    def shadow_decisions(self) -> str:
        return f"{self.topics.decisions}.shadow"

    def produce(self, events: list[dict[str, object]]) -> None:
        produce_payments(self.bootstrap, self.topics.input, events, PARTITIONS)

    def start(self, query: str, checkpoint: Path, *flags: str) -> InferProcess:
        return InferProcess(self.bootstrap, self.topics, checkpoint, query, *flags)


@dataclass(frozen=True)
class Outcome:
    kind: str  # RAN, REFUSED, KILLED or FAILED
    command: str  # the act's flags, for the journal
    detail: str = ""  # the refusal's line, or the log's tail

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
        return Outcome(REFUSED, command, errors[-1][:400])
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
