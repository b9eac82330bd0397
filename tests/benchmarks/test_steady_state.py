"""The pure parts of benchmarks/steady_state.py: phases, the peer's warm-up, latencies, ratios.

No timing assertions: the numbers here are made up; the script measures, BENCHMARKS.md records.
"""

from __future__ import annotations

import pytest

from benchmarks.steady_state import (
    IKKAI_ALOS,
    IKKAI_BACK_TO_BACK,
    IKKAI_DATA_SOURCE,
    IKKAI_EOS,
    PEER_EOS,
    Load,
    Run,
    last_rise,
    latency_summary,
    new_producers,
    phase_summary,
    ratio_rows,
    report,
    settled_at,
    target_rows,
    window_start,
)


def progress(batch: int, rows: int, **durations: int) -> dict[str, object]:
    return {"batchId": batch, "numInputRows": rows, "timestamp": "2026-11-26T12:00:00.000Z", "durationMs": durations}


def test_phases_give_median_p99_and_share_of_the_trigger_time() -> None:
    batches = [
        progress(1, 10, triggerExecution=1000, addBatch=900, walCommit=50),
        progress(2, 10, triggerExecution=2000, addBatch=1800, walCommit=100),
        progress(3, 10, triggerExecution=3000, addBatch=2700),  # no walCommit reported: counts 0
    ]
    rows = {row.phase: row for row in phase_summary(batches)}
    assert rows["triggerExecution"].median_ms == 2000
    assert rows["triggerExecution"].share == 1
    assert rows["addBatch"].median_ms == 1800
    assert rows["addBatch"].p99_ms == 2700
    assert rows["addBatch"].share == pytest.approx(0.9)
    assert rows["walCommit"].median_ms == 50
    assert rows["walCommit"].share == pytest.approx(150 / 6000)
    assert rows["getBatch"].share == 0
    assert {row.batches for row in rows.values()} == {3}


def test_a_rate_that_still_grows_has_not_settled() -> None:
    """A cold JVM: each 2 s window decides more than the one before."""
    warming = [(t / 2, int(100 * (t / 2) ** 2)) for t in range(0, 21)]
    assert settled_at(warming, min_seconds=2) is None


def test_a_steady_rate_settles_after_the_minimum_warm_up() -> None:
    steady = [(t / 2, 1000 * t) for t in range(0, 41)]  # 2,000 per second from the start
    index = settled_at(steady, min_seconds=10)
    assert index is not None
    assert steady[index][0] == 10


def test_a_rate_settles_once_three_windows_agree() -> None:
    """Speeding up for 6 s, then 3,000/s: settled once the last three 2 s windows lie (nearly) in the fast part."""
    samples, count = [], 0
    for step in range(0, 41):
        t = step / 2
        samples.append((t, count))
        count += 125 * step if t < 6 else 1500
    index = settled_at(samples, min_seconds=2)
    assert index is not None
    assert samples[index][0] == 10  # windows 4-6 s (4,750, the ramp's end), 6-8 s and 8-10 s (6,000): within 15%


def test_a_window_ends_at_its_last_decision() -> None:
    samples = [(0.0, 100, 1.0), (1.0, 200, 2.0), (2.0, 300, 3.0), (3.0, 300, 3.5), (4.0, 300, 4.0)]
    assert last_rise(samples) == (2.0, 300, 3.0)


def test_a_window_starts_at_the_warm_ups_last_decision() -> None:
    # The warm-up's batches read 250 payments; their decisions reach the consumer in two steps after the line.
    samples = [(1.0, 0, 1.0), (1.25, 100, 1.5), (1.5, 250, 2.0), (1.75, 250, 2.1), (2.0, 400, 2.5)]
    assert window_start(samples, 250) == (1.5, 250, 2.0)
    assert window_start(samples, 401) is None


def test_latency_summary_is_nearest_rank_and_max() -> None:
    values = [float(v) for v in range(1, 201)]
    assert latency_summary(values) == (100, 198, 200)
    assert latency_summary([]) == (None, None, None)


def run(n: int, variant: str, rate: float, cpu_per_1000: float, p99_200: float) -> Run:
    events = int(rate * 60)
    loads = [Load("200/s", 200, 2000, p99_200 / 2, p99_200, p99_200 * 1.1)]
    return Run(n, variant, events=events, seconds=60, cpu_s=cpu_per_1000 * events / 1000, loads=loads)


RUNS = [
    run(1, IKKAI_EOS, 6000, 0.30, 300),
    run(1, IKKAI_ALOS, 6000, 0.28, 250),
    run(1, PEER_EOS, 10000, 0.25, 100),
    run(2, IKKAI_EOS, 8400, 0.40, 500),
    run(2, IKKAI_ALOS, 10000, 0.30, 250),
    run(2, PEER_EOS, 10000, 0.20, 100),
]


def test_ratios_per_round_with_median_and_spread() -> None:
    rows = {str(row[0]): row[1:] for row in ratio_rows(RUNS)}
    assert rows[f"throughput {IKKAI_EOS} / {PEER_EOS}"] == pytest.approx([0.6, 0.84, 0.72, 0.24])
    assert rows[f"CPU per event {IKKAI_EOS} / {PEER_EOS}"] == pytest.approx([1.2, 2.0, 1.6, 0.8])
    assert rows[f"throughput {IKKAI_EOS} / {IKKAI_ALOS}"] == pytest.approx([1.0, 0.84, 0.92, 0.16])
    assert rows[f"p99 at 200/s {IKKAI_EOS} / {PEER_EOS}"] == pytest.approx([3.0, 5.0, 4.0, 2.0])
    assert rows[f"p99 at 2,000/s {IKKAI_EOS} / {PEER_EOS}"] == [None, None, None, None]  # no such load measured


def test_the_data_source_writer_is_compared_with_foreach_batch_when_it_ran() -> None:
    assert not any(IKKAI_DATA_SOURCE in str(row[0]) for row in ratio_rows(RUNS))  # not run: no rows
    trial = [*RUNS, run(1, IKKAI_DATA_SOURCE, 9000, 0.15, 150), run(2, IKKAI_DATA_SOURCE, 8400, 0.40, 250)]
    rows = {str(row[0]): row[1:] for row in ratio_rows(trial)}
    assert rows[f"throughput {IKKAI_DATA_SOURCE} / {IKKAI_EOS}"] == pytest.approx([1.5, 1.0, 1.25, 0.5])
    assert rows[f"CPU per event {IKKAI_DATA_SOURCE} / {IKKAI_EOS}"] == pytest.approx([0.5, 1.0, 0.75, 0.5])
    assert rows[f"p99 at 200/s {IKKAI_DATA_SOURCE} / {IKKAI_EOS}"] == pytest.approx([0.5, 0.5, 0.5, 0.0])
    assert not any(IKKAI_BACK_TO_BACK in str(row[0]) for row in ratio_rows(trial))


def test_each_trial_that_ran_gets_its_own_rows() -> None:
    both = [*RUNS, run(1, IKKAI_DATA_SOURCE, 9000, 0.15, 150), run(1, IKKAI_BACK_TO_BACK, 3000, 0.30, 600)]
    rows = {str(row[0]): row[1:] for row in ratio_rows(both)}
    assert rows[f"throughput {IKKAI_DATA_SOURCE} / {IKKAI_EOS}"][0] == pytest.approx(1.5)
    assert rows[f"throughput {IKKAI_BACK_TO_BACK} / {IKKAI_EOS}"][0] == pytest.approx(0.5)
    assert rows[f"p99 at 200/s {IKKAI_BACK_TO_BACK} / {IKKAI_EOS}"][0] == pytest.approx(2.0)


def test_targets_are_marked_by_the_medians() -> None:
    targets = {str(row[0]): (row[2], row[3]) for row in target_rows(ratio_rows(RUNS), RUNS)}
    assert targets[f"throughput {IKKAI_EOS} / {PEER_EOS}"] == (pytest.approx(0.72), "met")
    assert targets[f"CPU per event {IKKAI_EOS} / {PEER_EOS}"] == (pytest.approx(1.6), "not met")
    assert targets[f"throughput {IKKAI_EOS} / {IKKAI_ALOS}"] == (pytest.approx(0.92), "not met")
    assert targets[f"p99 ms at 200/s {IKKAI_EOS}"] == (400, "met")
    assert targets[f"p99 ms at 2,000/s {IKKAI_EOS}"] == (None, "not met")


def test_the_report_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [*RUNS]
    runs[0].progress = [progress(5, 25_000, triggerExecution=2000, addBatch=1500)]
    runs[0].low_load_progress = [progress(9, 60, triggerExecution=900, addBatch=700)] * 2
    report(runs)
    out = capsys.readouterr().out
    assert "## steady state, maximum load" in out
    assert "## steady state, fixed loads" in out
    assert "## steady state: ratios per round" in out
    assert "## steady state: #31 targets (medians)" in out
    assert f"where a batch's time goes, {IKKAI_EOS}: durationMs of 1 measured batches" in out
    assert f"where a batch's time goes, {IKKAI_EOS}: durationMs of 2 batches at 200/s" in out
    assert f"where a batch's time goes, {IKKAI_ALOS}" not in out  # no progress: no table


def test_new_producers_are_counted_per_batch_line_in_the_window() -> None:
    stamped = [
        (1.0, "q: batch 3 committed 10 records, slowest partition 0.10 s of 0.20 s (2 new producers)\n"),
        (2.0, "q: batch 4 committed 10 records, slowest partition 0.10 s of 0.20 s\n"),
        (3.0, "q: batch 5 committed 0 records, slowest partition 0.00 s of 0.10 s (1 new producer) (partitions [1] "
              "already committed)\n"),
        (3.5, "q: model fraud-lr (1 new producer)\n"),  # not a batch line
        (9.0, "q: batch 6 committed 10 records, slowest partition 0.10 s of 0.20 s (2 new producers)\n"),
    ]  # fmt: skip
    assert new_producers(stamped, 0.5, 5.0) == [2, 0, 1]
