"""When the demo breaks things: SIGKILL the infer job, restart the Connect worker. Pure.

Each action fires once, when the stage it hurts is demonstrably mid-flight: the infer job is
killed after it has decided some but not all events, the worker restarted after the first
receipts came back (so the outbox sink has requests in flight) and while decisions are still
being made. If a run is too fast or too small to catch a stage mid-flight, the action fires at
the end of that stage anyway, so a requested chaos action is never silently skipped.
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
    restart_worker_at: float = 0.55  # fraction of the expected decisions written, with receipts flowing

    def due(self, stages: Mapping[str, StageProgress], done: set[str]) -> list[str]:
        """The actions to take now, in order (at most one: the next waits for this one's recovery)."""
        decided = stages["decided"]
        delivered = stages["delivered"]
        if KILL_INFER not in done:
            return [KILL_INFER] if decided.done > 0 and (decided.fraction >= self.kill_infer_at) else []
        if RESTART_WORKER not in done and delivered.done > 0 and decided.fraction >= self.restart_worker_at:
            return [RESTART_WORKER]
        return []


def describe(stages: Mapping[str, StageProgress]) -> str:
    """Where the pipeline was, for the report: 'decided 812/2000, delivered 40/101'."""
    return ", ".join(f"{s.stage} {s.done}/{'?' if s.total is None else s.total}" for s in stages.values())
