"""When the demo stops following the pipeline. Pure.

Following ends when everything is delivered (every chaos action done), when nothing moved for
the idle timeout, or, at once, when a chaos action did not recover: a worker that cannot come
back stalls ingestion for good, and waiting out the idle timeout would only delay the report
that says so. Actions still being carried out are waited for, so each gets its own verdict.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from demo.facts import ChaosEvent

STABLE_POLLS = 3  # drained = all stages complete for this many polls in a row


@dataclass(frozen=True)
class Look:
    """What one poll of the follow loop saw."""

    stable_polls: int  # polls in a row with every stage complete, every line written and no chaos running
    idle_seconds: float  # since a stage last moved
    running: Collection[str]  # chaos actions still being carried out
    chaos: Sequence[ChaosEvent]  # chaos actions carried out, recovered or not


@dataclass(frozen=True)
class Stop:
    drained: bool
    reason: str


def not_recovered(events: Sequence[ChaosEvent]) -> list[ChaosEvent]:
    return [e for e in events if e.recovered_seconds is None]


def stop_following(look: Look, *, planned: Collection[str], idle_timeout_s: float) -> Stop | None:
    """Why to stop following now, or None to poll again."""
    failed = not_recovered(look.chaos)
    if failed and not look.running:
        named = "; ".join(e.action + (f" ({e.failure})" if e.failure else "") for e in failed)
        return Stop(False, f"chaos did not recover: {named}; stopped following, reporting what there is")
    if look.stable_polls >= STABLE_POLLS and set(planned) <= {e.action for e in look.chaos}:
        return Stop(True, "everything delivered")
    if not look.running and look.idle_seconds > idle_timeout_s:
        return Stop(False, f"no stage moved for {idle_timeout_s:.0f}s; reporting what there is")
    return None
