"""The model's transitions for the acts that change the topics, and the judge after them (pure, no Kafka).

A recreated input: the deleted topic's decisions stay, none can come later, each new event needs one.
Added partitions: the act runs what the refusal prints, read flag by flag, whichever flags it prints.
"""

from __future__ import annotations

import dataclasses

from tests.explore.operator_acts import fix_command
from tests.explore.operator_model import recreated, settled
from tests.explore.output_checker import Expected, Outputs, violations
from tests.explore.test_output_checker import decision, requests

RECREATED = (
    "ikkai: error: _ikkai.commits.ikkai.a.1f: query a.1f, partition 0: input topic 'events.x' was deleted and "
    "recreated (the marker's topic id Qm9vAAAAAAAAAAAAAAAAAA, now Zm9vAAAAAAAAAAAAAAAAAA): offsets committed on the "
    "old topic mean nothing on the new one: to decide every record of the new topic once, start with "
    "--input-recreated Zm9vAAAAAAAAAAAAAAAAAA and a fresh --checkpoint (docs/exactly-once.md, 'What an operator may "
    "change, and how': topic recreation)"
)
GROWN = (
    "ikkai: error: _ikkai.commits.ikkai.a.1f: query a.1f committed with 2 partitions, the topics now have 3: run the "
    "job as a new query that continues this one: --query a.1f-p3 --after-query a.1f --start-offsets 0:12,1:8 and a "
    "fresh --checkpoint (no drain is shown, so these are the lowest offsets any output partition committed: nothing "
    "is skipped, and records from there up to the highest (0:14,1:8) are written again) (docs/exactly-once.md, "
    "'What an operator may change, and how': partitions)"
)


def made(*events: str) -> tuple[dict[str, object], ...]:
    return tuple(decision(e) for e in events)


def outputs(events: dict[str, tuple[int, int]], decided: tuple[str, ...]) -> Outputs:
    decisions = made(*decided)
    return Outputs(events=events, decisions=decisions, requests=tuple(r for d in decisions for r in requests(d)))


def test_a_recreation_fix_is_read_as_its_flag_and_a_fresh_checkpoint() -> None:
    fix = fix_command(RECREATED)
    assert fix.flags == ("--input-recreated", "Zm9vAAAAAAAAAAAAAAAAAA")
    assert fix.fresh_checkpoint and fix.value("--query") == ""


def test_a_growth_fix_is_read_flag_by_flag_with_or_without_start_offsets() -> None:
    fix = fix_command(GROWN)
    assert fix.flags == ("--query", "a.1f-p3", "--after-query", "a.1f", "--start-offsets", "0:12,1:8")
    assert fix.fresh_checkpoint and fix.value("--query") == "a.1f-p3"
    without = fix_command(GROWN.replace(" --start-offsets 0:12,1:8", "").replace("--checkpoint (no", "--checkpoint ("))
    assert without.flags == ("--query", "a.1f-p3", "--after-query", "a.1f")
    assert not fix_command("ikkai: error: x: y: run it again").flags


def test_after_a_recreation_the_old_decisions_stay_and_the_new_events_need_one_each() -> None:
    old = outputs({"e1": (0, 0), "e2": (1, 0), "e3": (0, 1)}, ("e1", "e2"))  # e3 produced, never decided
    must, earlier = recreated(old, frozenset({"e1"}), frozenset())
    assert must == {"e1", "e2"} and earlier == {"e1", "e2", "e3"}  # e2 was decided by a run later killed: it stays

    new = outputs({"n1": (0, 0), "n2": (1, 0)}, ("e1", "e2", "n1", "n2"))
    must = settled(new, frozenset(), must, earlier)
    assert must == {"e1", "e2", "n1", "n2"}  # not e3: its topic is gone
    assert violations(new, Expected(must, frozenset(), earlier)) == []


def test_after_a_recreation_the_judge_still_fails() -> None:
    must, earlier = frozenset({"e1", "e2", "n1", "n2"}), frozenset({"e1", "e2", "e3"})
    found = violations(outputs({"n1": (0, 0), "n2": (1, 0)}, ("e1", "e2", "n1")), Expected(must, frozenset(), earlier))
    assert found == ["1 of 4 events that must be decided have no live decision: n2"]
    late = outputs({"n1": (0, 0), "n2": (1, 0)}, ("e1", "e2", "e3", "n1", "n2"))
    assert violations(late, Expected(must, frozenset(), earlier)) == [
        "1 events decided after their input topic was deleted: e3"
    ]
    lost = outputs({"n1": (0, 0), "n2": (1, 0)}, ("e2", "n1", "n2"))
    assert violations(lost, Expected(must, frozenset(), earlier)) == [
        "1 of 4 events that must be decided have no live decision: e1"
    ]
    twice = dataclasses.replace(lost, decisions=(*lost.decisions, decision("e2", "v2")))
    assert any("decided more than once" in line for line in violations(twice, Expected(must, frozenset(), earlier)))
    phantom = outputs({"n1": (0, 0)}, ("x9",))
    assert violations(phantom, Expected(frozenset(), frozenset(), earlier)) == [
        "1 live decisions of events never produced: x9"
    ]
