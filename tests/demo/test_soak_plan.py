"""The soak's chaos plan (``ikkai demo --kills ...``): which kill comes when, and when the writer may go on."""

from __future__ import annotations

from typing import Any

import pytest

from demo.chaos import (
    KILL_BROKER,
    KILL_ENRICH,
    KILL_EXECUTOR,
    KILL_INFER,
    KILL_SPARK_WORKER,
    RESTART_WORKER,
    ChaosPlan,
    SoakPlan,
    broker_target,
    caught_up,
    disturbs,
    executor_target,
    kind_of,
    number_of,
    parse_kills,
    spark_worker_target,
)
from demo.progress import StageProgress
from demo.report import chaos_lines
from ikkai.contract.topics import DECISIONS_FRAUD as DECISIONS
from ikkai.contract.topics import DLQ_ENRICH, DLQ_INFER
from ikkai.contract.topics import EVENTS_PAYMENTS as EVENTS
from ikkai.contract.topics import INGEST_PAYMENTS as INGEST


def stages(decided: int) -> dict[str, StageProgress]:
    return {
        "ingested": StageProgress("ingested", 100, 100),
        "enriched": StageProgress("enriched", 100, 100),
        "decided": StageProgress("decided", decided, 100),
        "delivered": StageProgress("delivered", 0, None),
    }


SOAK = SoakPlan({KILL_INFER: 6, KILL_ENRICH: 2, KILL_BROKER: 1, RESTART_WORKER: 1})


def test_parse_kills_reads_kinds_and_counts_and_names_what_is_wrong() -> None:
    assert parse_kills("infer=30, enrich=10,broker=5,worker=5") == {
        KILL_INFER: 30,
        KILL_ENRICH: 10,
        KILL_BROKER: 5,
        RESTART_WORKER: 5,
    }
    assert parse_kills("") == {} and parse_kills("infer=0") == {}
    for bad in ("infer", "spark=3", "infer=-1", "infer=x"):
        with pytest.raises(ValueError, match="kind one of infer, enrich, broker, worker"):
            parse_kills(bad)


def test_every_kill_is_numbered_per_kind_and_each_kind_is_spread_over_the_run() -> None:
    actions = SOAK.actions
    assert len(actions) == 10 and len(set(actions)) == 10
    assert [a for a in actions if kind_of(a) == KILL_INFER] == [f"{KILL_INFER} {i}/6" for i in range(1, 7)]
    assert kind_of(f"{RESTART_WORKER} 1/1") == RESTART_WORKER and kind_of(KILL_INFER) == KILL_INFER
    assert [number_of(a) for a in actions if kind_of(a) == KILL_INFER] == list(range(6)) and number_of(KILL_INFER) == 0
    # the two enrich kills fall in different halves of the run, not back to back
    first, second = (i for i, a in enumerate(actions) if kind_of(a) == KILL_ENRICH)
    assert first < len(actions) / 2 <= second


def test_nothing_before_decisions_flow_then_in_order_two_at_a_time_never_two_of_a_kind() -> None:
    assert SOAK.due(stages(0), set()) == []
    first = SOAK.due(stages(10), set())
    assert 1 <= len(first) <= 2 and first == list(SOAK.actions[: len(first)])
    assert len({kind_of(a) for a in first}) == len(first)
    started = set(SOAK.actions[:3])
    running = {SOAK.actions[2]}
    nxt = SOAK.due(stages(10), started, running)
    assert all(kind_of(a) != kind_of(SOAK.actions[2]) for a in nxt) and len(nxt) <= 1
    assert SOAK.due(stages(100), set(SOAK.actions)) == []  # everything fired
    two_busy = {SOAK.actions[0], f"{RESTART_WORKER} 1/1"} if kind_of(SOAK.actions[0]) != RESTART_WORKER else set()
    assert SOAK.due(stages(10), two_busy, two_busy) == []


def test_the_writer_goes_on_in_step_with_the_kills() -> None:
    assert SOAK.may_write(0.0, flowing=False, started=set(), finished=set())
    assert not SOAK.may_write(0.3, flowing=False, started=set(), finished=set())  # decisions first
    assert SOAK.may_write(0.25, flowing=True, started=set(), finished=set())  # a sliver beyond the first part
    assert not SOAK.may_write(0.6, flowing=True, started=set(SOAK.actions[:2]), finished=set())
    assert SOAK.may_write(0.6, flowing=True, started=set(SOAK.actions[:5]), finished=set())
    assert SOAK.may_write(0.99, flowing=True, started=set(SOAK.actions), finished=set())


def test_the_default_plan_keeps_its_gates() -> None:
    plan = ChaosPlan()
    assert plan.may_write(0.1, flowing=False, started=set(), finished=set())
    assert not plan.may_write(0.6, flowing=False, started=set(), finished=set())
    assert plan.may_write(0.6, flowing=True, started=set(), finished=set())
    assert not plan.may_write(0.9, flowing=True, started={RESTART_WORKER}, finished=set())
    assert plan.may_write(0.9, flowing=True, started={RESTART_WORKER}, finished={RESTART_WORKER})


def test_five_broker_kills_hit_every_role_once() -> None:
    targets = [broker_target(n, partitions=2) for n in range(5)]
    assert [role for role, _, _ in targets] == ["leader", "coordinator", "leader", "coordinator", "leader"]
    assert targets[1] == ("coordinator", "ikkai.infer.1", 1) and targets[3] == ("coordinator", "ikkai.enrich.1", 1)
    assert {name for role, name, _ in targets if role == "leader"} == {
        "decisions.fraud",
        "outbox.requests",
        "events.payments",
    }


def test_a_soak_is_summed_up_per_kind_and_names_each_failure() -> None:
    def event(action: str, recovered: float | None, failure: str | None = None) -> dict[str, Any]:
        return {"action": action, "at_seconds": 10.0, "progress": "", "recovered_seconds": recovered,
                "failure": failure}  # fmt: skip

    events = [event(f"{KILL_INFER} {i}/3", s) for i, s in ((1, 30.0), (2, 50.0), (3, 40.0))]
    events += [event(f"{KILL_BROKER} 1/2", 12.0), event(f"{KILL_BROKER} 2/2", None, "out of sync")]
    lines = chaos_lines(events)
    assert lines == [
        f"chaos: {KILL_INFER} x3, 3 recovered, back in median 40s, max 50s",
        f"chaos: {KILL_BROKER} x2, 1 recovered, back in median 12s, max 12s",
        f"  {KILL_BROKER} 2/2 at 10s never recovered: out of sync",
    ]
    assert len(chaos_lines(events[:2])) == 2 and "back in 30s" in chaos_lines(events[:2])[0]  # a few: one by one


def test_a_restarted_job_that_has_caught_up_counts_as_recovered() -> None:
    """The first soak: infer killed when it had decided every event waited 300 s for a batch that could not
    come (the writer waited for the next kills, the next infer kill for this one's recovery)."""
    counts = {INGEST: 100, EVENTS: 86, DLQ_ENRICH: 14, DECISIONS: 86}
    assert caught_up("infer", counts) and caught_up("enrich", counts)
    assert not caught_up("infer", {**counts, DECISIONS: 85})
    assert caught_up("infer", {**counts, DECISIONS: 84, DLQ_INFER: 2})
    assert not caught_up("enrich", {**counts, INGEST: 101})
    assert not caught_up("infer", {}) and not caught_up("enrich", {})  # nothing came in yet: nothing proven


def test_the_cluster_kinds_are_read_with_the_others() -> None:
    assert parse_kills("infer=20,enrich=5,executor=10,spark-worker=3,broker=5,worker=5") == {
        KILL_INFER: 20,
        KILL_ENRICH: 5,
        KILL_EXECUTOR: 10,
        KILL_SPARK_WORKER: 3,
        KILL_BROKER: 5,
        RESTART_WORKER: 5,
    }
    with pytest.raises(ValueError, match=r"kind one of .*executor, spark-worker"):
        parse_kills("spark_worker=1")


def test_executor_kills_take_each_jobs_executor_and_worker_kills_each_worker_in_turn() -> None:
    assert [executor_target(n) for n in range(4)] == ["infer", "enrich", "infer", "enrich"]
    assert [spark_worker_target(n, workers=2) for n in range(3)] == [
        "spark-worker-1",
        "spark-worker-2",
        "spark-worker-1",
    ]
    assert spark_worker_target(2, workers=3) == "spark-worker-3"


def test_an_executor_kill_waits_for_a_kill_of_its_jobs_driver_and_not_for_the_other_jobs() -> None:
    plan = SoakPlan({KILL_EXECUTOR: 2, KILL_INFER: 1})  # infer's executor, the infer driver, enrich's executor
    assert plan.actions == (f"{KILL_EXECUTOR} 1/2", f"{KILL_INFER} 1/1", f"{KILL_EXECUTOR} 2/2")
    infer_down = {f"{KILL_INFER} 1/1"}
    assert plan.due(stages(10), infer_down, running=infer_down) == []  # infer's executor: not while infer restarts
    assert plan.due(stages(10), {f"{KILL_EXECUTOR} 1/2", *infer_down}, running=infer_down) == [f"{KILL_EXECUTOR} 2/2"]
    assert disturbs(f"{KILL_EXECUTOR} 1/2") == {KILL_EXECUTOR, "infer"}
    assert disturbs(f"{KILL_EXECUTOR} 2/2") == {KILL_EXECUTOR, "enrich"}


def test_a_spark_worker_kill_shares_its_time_with_no_job_kill_but_with_a_broker_kill() -> None:
    plan = SoakPlan({KILL_SPARK_WORKER: 1, KILL_ENRICH: 1, KILL_BROKER: 1})
    assert plan.due(stages(10), set()) == [f"{KILL_SPARK_WORKER} 1/1"]  # enrich, next in order, waits for it
    enrich_down = {f"{KILL_ENRICH} 1/1"}
    assert plan.due(stages(10), enrich_down, running=enrich_down) == []  # its executor may be enrich's
    worker_down = {f"{KILL_SPARK_WORKER} 1/1"}
    assert plan.due(stages(10), {*worker_down, *enrich_down}, running=worker_down) == [f"{KILL_BROKER} 1/1"]
