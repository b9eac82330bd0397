"""When the demo stops following: drained, idle, or at once when a chaos action did not recover."""

from __future__ import annotations

import dataclasses

from demo.chaos import ACTIONS, KILL_INFER, RESTART_WORKER
from demo.facts import ChaosEvent
from demo.follow import STABLE_POLLS, Look, Stop, stop_following
from demo.invariants import chaos_done
from demo.report import build_report, report_text
from tests.demo.test_report import clean_facts

TAKEN = "connect port 127.0.0.1:37187 is already in use: another process holds it"
INFER_BACK = ChaosEvent(KILL_INFER, 10.0, "decided 30/100", 12.0)
WORKER_LOST = ChaosEvent(RESTART_WORKER, 10.5, "decided 30/100", None, TAKEN)
IDLE_TIMEOUT_S = 300.0


def look(*chaos: ChaosEvent, stable: int = 0, idle: float = 0.0, running: frozenset[str] = frozenset()) -> Look:
    return Look(stable_polls=stable, idle_seconds=idle, running=running, chaos=chaos)


def stop(seen: Look, planned: tuple[str, ...] = ACTIONS) -> Stop | None:
    return stop_following(seen, planned=planned, idle_timeout_s=IDLE_TIMEOUT_S)


def test_a_chaos_action_that_did_not_recover_stops_following_at_once_naming_it() -> None:
    verdict = stop(look(INFER_BACK, WORKER_LOST, idle=2.0))  # two seconds after the last progress
    assert verdict is not None and not verdict.drained
    assert RESTART_WORKER in verdict.reason and "37187 is already in use" in verdict.reason


def test_a_failure_waits_for_the_other_action_still_under_way_then_stops() -> None:
    assert stop(look(WORKER_LOST, idle=2.0, running=frozenset({KILL_INFER}))) is None
    assert stop(look(WORKER_LOST, INFER_BACK, idle=3.0)) is not None


def test_following_goes_on_while_chaos_is_under_way_or_things_move() -> None:
    assert stop(look(running=frozenset(ACTIONS), idle=IDLE_TIMEOUT_S + 1)) is None
    assert stop(look(INFER_BACK, idle=IDLE_TIMEOUT_S - 1)) is None
    assert stop(look(INFER_BACK, stable=STABLE_POLLS)) is None, "drained, but the worker restart is still to come"


def test_drained_after_every_planned_action_or_idle_for_too_long() -> None:
    recovered = dataclasses.replace(WORKER_LOST, recovered_seconds=14.0, failure=None)
    drained = stop(look(INFER_BACK, recovered, stable=STABLE_POLLS))
    assert drained is not None and drained.drained
    assert stop(look(stable=STABLE_POLLS), planned=()) is not None
    idle = stop(look(INFER_BACK, recovered, idle=IDLE_TIMEOUT_S + 1))
    assert idle is not None and not idle.drained and "no stage moved for 300s" in idle.reason


def test_the_report_fails_the_chaos_invariant_naming_the_worker_and_why() -> None:
    facts = dataclasses.replace(clean_facts(), chaos=[INFER_BACK, WORKER_LOST])
    invariant = chaos_done(facts)
    assert not invariant.ok
    assert invariant.detail == f"not done or not recovered: {RESTART_WORKER} ({TAKEN})"
    report = build_report(facts)
    assert not report["passed"]
    assert f"back in never: {TAKEN}" in report_text(report)
