"""A target's verdict: met, not met, or not measured when the run gave no value."""

from __future__ import annotations

from benchmarks.targets import MET, NOT_MEASURED, NOT_MET, Target, target_rows, verdict


def test_a_target_is_met_not_met_or_not_measured() -> None:
    at_most, at_least = Target("p99", 1.5, at_most=True, unit="s"), Target("lines/s", 10_000, at_most=False)
    assert [verdict(at_most, v) for v in (1.5, 1.51, None)] == [MET, NOT_MET, NOT_MEASURED]
    assert [verdict(at_least, v) for v in (10_000, 9_999.0, None)] == [MET, NOT_MET, NOT_MEASURED]
    assert (at_most.limit_text, at_least.limit_text) == ("<= 1.5 s", ">= 10,000")
    assert target_rows([(at_most, 6.2, "median")]) == [["p99", "<= 1.5 s", 6.2, NOT_MET, "median"]]
