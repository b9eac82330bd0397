"""The steady-state method's pure parts: the JIT counter and its settle rule, the warm-up, the rotation, the halves,
the medians across rounds and the targets' verdicts.

No timing assertions: the numbers here are made up; the script measures, BENCHMARKS.md records.
"""

from __future__ import annotations

import struct

import pytest

from benchmarks.harness import rotated
from benchmarks.jit_activity import MAGIC, TOTAL_COMPILES, compilations_settled, perf_counter
from benchmarks.steady_method import (
    Sample,
    WarmUp,
    halves,
    last_rise,
    ratio_of_medians,
    recent_compilations,
    target_rows,
    warm_up_end,
    warmed_up,
    window_start,
)
from benchmarks.targets import Target


def perf_data(counters: dict[str, int], order: str = "<") -> bytes:
    """A HotSpot performance-data file as the JVM lays it out: a 32-byte prologue, then one entry per counter."""
    entries = b""
    for name, value in counters.items():
        encoded = name.encode() + b"\0"
        name_offset = 20
        data_offset = (name_offset + len(encoded) + 7) // 8 * 8
        length = data_offset + 8
        head = struct.pack(f"{order}iiibbbbi", length, name_offset, 0, ord("J"), 0, 0, 0, data_offset)
        body = head + encoded
        entries += body + b"\0" * (data_offset - len(body)) + struct.pack(f"{order}q", value)
    prologue = MAGIC + bytes([1 if order == "<" else 0, 2, 0, 1])
    prologue += struct.pack(f"{order}iiqii", 32 + len(entries), 0, 0, 32, len(counters))
    return prologue + entries


@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
def test_the_compilation_count_is_read_from_the_jvms_performance_data(order: str) -> None:
    data = perf_data({"sun.ci.totalTime": 91, TOTAL_COMPILES: 4590, "sun.ci.lastMethod": 7}, order)
    assert perf_counter(data, TOTAL_COMPILES) == 4590
    assert perf_counter(data, "sun.ci.totalTime") == 91
    assert perf_counter(data, "sun.ci.nothing") is None
    assert perf_counter(b"not a perf file" * 4, TOTAL_COMPILES) is None
    assert perf_counter(data[:40], TOTAL_COMPILES) is None  # cut short: no entry read past the end


def test_the_jit_settles_when_compilations_stay_under_the_threshold_over_the_quiet_seconds() -> None:
    # 4,590 compilations in the first 7 s, then a trickle of 2 per second.
    samples: list[tuple[float, int | None]] = [(t / 4, min(t, 28) * 164 + max(0, t - 28) // 2) for t in range(0, 81)]
    assert not compilations_settled(samples[:40], quiet_s=5, threshold=50)  # 10 s in: the burst is within 5 s
    assert compilations_settled(samples, quiet_s=5, threshold=50)  # 20 s in: 10 in the last 5 s
    assert not compilations_settled(samples, quiet_s=5, threshold=10)  # ... not fewer than 10
    assert not compilations_settled(samples[:10], quiet_s=5, threshold=10**6)  # not 5 s of samples yet


def test_an_unknown_compilation_count_never_settles() -> None:
    assert not compilations_settled([(t, None) for t in range(20)], quiet_s=5, threshold=50)
    assert not compilations_settled([], quiet_s=5, threshold=50)


def test_a_warm_up_needs_both_the_events_and_a_settled_jit() -> None:
    rule = WarmUp(events=300_000, quiet_s=10, threshold=50)
    compiling = [Sample(t, t * 10_000, 0.0, 100 * t) for t in range(0, 61)]  # 100 compilations a second
    assert not warmed_up(compiling, rule)
    quiet = [Sample(t, t * 10_000, 0.0, min(t, 20) * 100) for t in range(0, 61)]  # quiet after 20 s
    assert warmed_up(quiet, rule)
    assert not warmed_up(quiet[:29], rule)  # 280,000 events: too few, however quiet
    assert not warmed_up([], rule)


def test_a_capped_warm_up_says_what_was_missing() -> None:
    rule = WarmUp(events=300_000, quiet_s=10, threshold=50)
    compiling = [Sample(t, t * 1_000, 0.0, 100 * t) for t in range(0, 61)]  # 60,000 events, 100 compilations a second
    assert recent_compilations(compiling, 10) == 1000
    assert warm_up_end(compiling, rule, capped=False) == "settled"
    assert warm_up_end(compiling, rule, capped=True) == "cap: 60,000 of 300,000 events, JIT not settled"
    quiet = [Sample(t, t * 1_000, 0.0, 100) for t in range(0, 61)]
    assert warm_up_end(quiet, rule, capped=True) == "cap: 60,000 of 300,000 events"
    assert warm_up_end([Sample(0, 0, 0.0)], rule, capped=True) == "cap: 0 of 300,000 events, JIT not settled"
    assert recent_compilations([Sample(0, 0, 0.0)], 10) is None


def test_each_variant_runs_once_in_each_place_over_as_many_rounds() -> None:
    order = rotated(["eos", "off", "peer"], 3)
    assert order == [(1, "eos"), (1, "off"), (1, "peer"), (2, "off"), (2, "peer"), (2, "eos"),
                     (3, "peer"), (3, "eos"), (3, "off")]  # fmt: skip
    for variant in ("eos", "off", "peer"):
        places = {[v for n, v in order if n == r].index(variant) for r in (1, 2, 3)}
        assert places == {0, 1, 2}
    assert rotated(["a", "b"], 1) == [(1, "a"), (1, "b")]


def test_a_window_ends_at_its_last_decision_and_starts_at_the_warm_ups_last() -> None:
    samples = [Sample(0.0, 100, 1.0), Sample(1.0, 200, 2.0), Sample(2.0, 300, 3.0), Sample(3.0, 300, 3.5)]
    assert last_rise(samples) == samples[2]
    assert window_start(samples, 150) == samples[1]
    assert window_start(samples, 301) is None


def test_the_halves_show_a_window_that_is_still_warming() -> None:
    # 10 s: 1,000 decisions a second and 50 ms of CPU per 1,000 in the first 5 s, twice as fast and cheap after.
    window, decided, cpu = [], 0, 0.0
    for step in range(0, 41):
        t = step / 4
        window.append(Sample(t, decided, cpu, compilations=1000 + 30 * step))
        decided += 500 if t >= 5 else 250
        cpu += 0.0125  # the same CPU a quarter second: per event, half as much once twice as many
    first, second = halves(window)
    assert (first.events, first.seconds) == (5_000, 5.0)
    assert (second.events, second.seconds) == (10_000, 5.0)
    assert first.rate == 1000 and second.rate == 2000
    assert first.cpu_s_per_1000 == pytest.approx(0.05) and second.cpu_s_per_1000 == pytest.approx(0.025)
    assert (first.compilations, second.compilations) == (600, 600)


def test_the_halves_cut_at_a_batchs_arrival_not_between_two() -> None:
    # A batch's decisions every 2 s: the middle (5 s) falls between the arrivals at 4 s and 6 s.
    window = [Sample(float(t), 1000 * (t // 2), float(t)) for t in range(0, 11)]
    first, second = halves(window)
    assert (first.seconds, first.events) == (4.0, 2000)
    assert (second.seconds, second.events) == (6.0, 3000)
    empty = halves([Sample(0.0, 0, 0.0), Sample(10.0, 0, 1.0)])[0]
    assert empty.rate is None and empty.cpu_s_per_1000 is None


def test_the_peers_moving_p99_is_compared_by_its_median_with_the_range() -> None:
    ikkai, peer = [910.0, 880.0, 950.0], [140.0, 530.0, None]
    value, around = ratio_of_medians(ikkai, peer)
    assert value == pytest.approx(910 / 335)
    assert around == f"{880 / 530:.2f} - {950 / 140:.2f}"
    assert ratio_of_medians(ikkai, [None, None]) == (None, "-")


def test_a_targets_verdict_is_met_not_met_or_not_measured() -> None:
    targets = (
        Target("throughput", 0.7, at_most=False),
        Target("cpu", 1.5, at_most=True),
        Target("p99 s", 0.6, at_most=True),
    )
    rows = target_rows(targets, {"throughput": (0.37, 0.05), "cpu": (1.5, 0.2)})
    assert rows == [
        ["throughput", 0.37, 0.05, ">= 0.7", "not met"],
        ["cpu", 1.5, 0.2, "<= 1.5", "met"],  # the limit itself meets it
        ["p99 s", None, None, "<= 0.6", "not measured"],
    ]
    assert target_rows(targets[:1], {"throughput": (0.71, None)})[0][-1] == "met"
