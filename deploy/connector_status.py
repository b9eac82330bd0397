"""Reading Kafka Connect status documents: has a connector reached its target, did it fail, why. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deploy.plan import CONNECT_STATE


def reached(target: str, status: Mapping[str, Any]) -> bool:
    """True when the connector and all its tasks are in Connect's state for ``target``."""
    wanted = CONNECT_STATE[target]
    connector_state = status.get("connector", {}).get("state")
    tasks = status.get("tasks") or []
    if connector_state != wanted:
        return False
    if wanted == "STOPPED":
        return not tasks
    if wanted == "PAUSED":  # a connector paused before its tasks started may have none yet
        return all(t.get("state") == wanted for t in tasks)
    return bool(tasks) and all(t.get("state") == wanted for t in tasks)


def failure(status: Mapping[str, Any]) -> tuple[str, str] | None:
    """(state, trace) of the connector or its first failed task, when something FAILED."""
    connector = status.get("connector", {})
    if connector.get("state") == "FAILED":
        return "FAILED", str(connector.get("trace", ""))
    for task in status.get("tasks") or []:
        if task.get("state") == "FAILED":
            return f"FAILED (task {task.get('id')})", str(task.get("trace", ""))
    return None


def trace_summary(trace: str | None) -> str | None:
    """The first line of a Java trace and, when there is one, its root cause (the last ``Caused by:``)."""
    if not trace or not trace.strip():
        return None
    lines = [line.strip() for line in trace.strip().splitlines()]
    causes = [line for line in lines if line.startswith("Caused by:")]
    return lines[0] + (f" ... {causes[-1]}" if causes else "")
