"""The JIT settle rule and the jstat output it reads; and the targets' verdicts."""

from __future__ import annotations

from benchmarks.jit_warmup import SettleRule, compilations, jit_settled
from benchmarks.targets import MET, NOT_MEASURED, NOT_MET, Target, target_rows, verdict

RULE = SettleRule(span_s=10.0, max_new=50)


def test_settled_once_the_count_grew_little_over_the_whole_span() -> None:
    compiling = [(0.0, 1_000), (5.0, 3_000), (10.0, 4_500), (15.0, 4_560)]
    assert not jit_settled(compiling, RULE)  # 4,560 - 3,000 over the last 10 s
    quiet = [*compiling, (20.0, 4_590), (25.0, 4_600)]
    assert jit_settled(quiet, RULE)  # 4,600 - 4,560 since 15 s
    assert not jit_settled([*compiling, (20.0, 4_590), (25.0, 4_611)], RULE)  # 51 new


def test_not_settled_before_the_samples_cover_the_span() -> None:
    assert not jit_settled([], RULE)
    assert not jit_settled([(0.0, 4_000), (9.0, 4_000)], RULE)  # quiet, but for 9 s only
    assert jit_settled([(0.0, 4_000), (10.0, 4_000)], RULE)


def test_the_compiled_column_of_jstat() -> None:
    out = (
        "Compiled Failed Invalid   Time   FailedType FailedMethod\n"
        "    6987      1       0    16.16          1 java/util/zip/ZipFile getEntry\n"
    )
    assert compilations(out) == 6987
    assert compilations("Compiled Failed Invalid   Time   FailedType FailedMethod\n") is None
    assert compilations("15637 not found\n") is None


def test_a_target_is_met_not_met_or_not_measured() -> None:
    at_most, at_least = Target("p99", 1.5, at_most=True, unit="s"), Target("lines/s", 10_000, at_most=False)
    assert [verdict(at_most, v) for v in (1.5, 1.51, None)] == [MET, NOT_MET, NOT_MEASURED]
    assert [verdict(at_least, v) for v in (10_000, 9_999.0, None)] == [MET, NOT_MET, NOT_MEASURED]
    assert (at_most.limit_text, at_least.limit_text) == ("<= 1.5 s", ">= 10,000")
    assert target_rows([(at_most, 6.2, "median")]) == [["p99", "<= 1.5 s", 6.2, NOT_MET, "median"]]
