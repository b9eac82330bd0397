"""When the demo breaks things: SIGKILL the infer job, SIGKILL and restart the Connect worker. Pure.

Each action fires once, when the stage it hurts is mid-flight: the infer job is killed after it
decided some but not all events, the worker right after it once the first receipts came back (the
outbox sink has requests in flight); both recover at the same time. The raw lines are written
so that this holds: half at once, the next part once decisions flow, the last part only after
the worker restart (so the restarted worker's source task must resume the file where the
killed one committed). A stage that finished between two looks still gets its action, so a
requested chaos action is never silently skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from deploy.demo.progress import StageProgress

KILL_INFER = "kill -9 infer"
RESTART_WORKER = "restart connect worker"
ACTIONS = (KILL_INFER, RESTART_WORKER)


@dataclass(frozen=True)
class ChaosPlan:
    kill_infer_at: float = 0.3  # fraction of the expected decisions written

    def due(self, stages: Mapping[str, StageProgress], started: set[str]) -> list[str]:
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
