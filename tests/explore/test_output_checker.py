"""The explorer's judge can fail: hand-made records, each broken in one way, are caught (pure, no Kafka)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.explore.output_checker import Expected, Outputs, violations


def decision(event: str, version: str = "v1", action: str = "hold") -> dict[str, Any]:
    return {"event_id": event, "decision_id": f"{event}@{version}", "action": action, "model_version": version}


def requests(made: dict[str, Any]) -> list[dict[str, Any]]:
    effects = {"hold": ["hold-payment", "notify-customer"], "review": ["review-payment"], "approve": []}
    return [{"decision_id": made["decision_id"], "effect": effect} for effect in effects[made["action"]]]


def clean() -> tuple[Outputs, Expected]:
    made = [decision("e1", action="hold"), decision("e2", action="review"), decision("e3", action="approve")]
    outputs = Outputs(
        events={"e1": (0, 0), "e2": (1, 0), "e3": (0, 1), "e4": (1, 1)},
        decisions=tuple(made), requests=tuple(r for d in made for r in requests(d)),
        shadow=(decision("e1", "v2"), decision("e4", "v2")),
    )  # fmt: skip
    return outputs, Expected(decided=frozenset({"e1", "e2", "e3"}), excluded=frozenset({"e4"}))


def test_clean_outputs_break_no_rule() -> None:
    assert violations(*clean()) == []


def test_a_duplicate_decision_is_caught() -> None:
    outputs, expected = clean()
    again = decision("e2", "v2", "review")  # the same event decided by another query's model: a new decision id
    broken = dataclasses.replace(
        outputs, decisions=(*outputs.decisions, again), requests=(*outputs.requests, *requests(again))
    )
    found = violations(broken, expected)
    assert any(line.startswith("1 events decided more than once (4 live decisions for 3 events): e2") for line in found)
    assert any("side effects asked for more than once: e2/review-payment" in line for line in found)
    assert any("with side effects under two decision ids: e2" in line for line in found)


def test_a_byte_identical_duplicate_is_caught() -> None:
    outputs, expected = clean()
    broken = dataclasses.replace(outputs, decisions=(*outputs.decisions, outputs.decisions[2]))
    assert any("decided more than once" in line for line in violations(broken, expected))


def test_a_lost_decision_and_its_side_effects_are_caught() -> None:
    outputs, expected = clean()
    broken = dataclasses.replace(outputs, decisions=outputs.decisions[1:])
    found = violations(broken, expected)
    assert any(line.startswith("1 of 3 events that must be decided have no live decision: e1") for line in found)
    assert any(line.startswith("2 outbox requests of no live decision") for line in found)


def test_a_decided_event_below_the_start_offsets_is_caught() -> None:
    outputs, expected = clean()
    broken = dataclasses.replace(outputs, decisions=(*outputs.decisions, decision("e4", action="approve")))
    assert violations(broken, expected) == ["1 events below the operator's --start-offsets were decided: e4"]


def test_a_missing_or_repeated_side_effect_is_caught() -> None:
    outputs, expected = clean()
    missing = dataclasses.replace(outputs, requests=outputs.requests[1:])
    assert violations(missing, expected) == ["1 decisions without the outbox requests their action asks for: e1@v1"]
    repeated = dataclasses.replace(outputs, requests=(*outputs.requests, outputs.requests[0]))
    found = violations(repeated, expected)
    assert "1 side effects asked for more than once: e1/hold-payment" in found


def test_a_decision_of_an_event_never_produced_and_a_doubled_shadow_are_caught() -> None:
    outputs, expected = clean()
    phantom = dataclasses.replace(outputs, decisions=(*outputs.decisions, decision("x9", action="approve")))
    assert violations(phantom, expected) == ["1 live decisions of events never produced: x9"]
    doubled = dataclasses.replace(outputs, shadow=(*outputs.shadow, decision("e1", "v2")))
    assert violations(doubled, expected) == ["the shadow topic holds 3 decisions for 2 events"]
