"""The pure parts of benchmarks/steady_tables.py: phases, latencies, ratios, p99 per round, targets, the report.

No timing assertions: the numbers here are made up; the script measures, BENCHMARKS.md records.
"""

from __future__ import annotations

import pytest

from benchmarks.steady_method import Half
from benchmarks.steady_tables import (
    IKKAI_ALOS,
    IKKAI_BACK_TO_BACK,
    IKKAI_DATA_SOURCE,
    IKKAI_EOS,
    IKKAI_TXN_OFF,
    PEER_EOS,
    BrokerWarmUp,
    Load,
    Run,
    infer_targets,
    latency_summary,
    measured_batches,
    new_producers,
    p99_rows,
    phase_summary,
    ratio_rows,
    report,
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
    run(1, IKKAI_TXN_OFF, 6000, 0.28, 250),
    run(1, PEER_EOS, 10000, 0.25, 100),
    run(2, IKKAI_EOS, 8400, 0.40, 500),
    run(2, IKKAI_TXN_OFF, 10000, 0.30, 250),
    run(2, PEER_EOS, 10000, 0.20, 100),
]


def test_ratios_per_round_with_median_and_spread() -> None:
    rows = {str(row[0]): row[1:] for row in ratio_rows(RUNS)}
    assert rows[f"throughput {IKKAI_EOS} / {PEER_EOS}"] == pytest.approx([0.6, 0.84, 0.72, 0.24])
    assert rows[f"CPU per event {IKKAI_EOS} / {PEER_EOS}"] == pytest.approx([1.2, 2.0, 1.6, 0.8])
    assert rows[f"throughput {IKKAI_EOS} / {IKKAI_TXN_OFF}"] == pytest.approx([1.0, 0.84, 0.92, 0.16])
    assert not any(IKKAI_ALOS in str(row[0]) for row in ratio_rows(RUNS))  # Spark's sink did not run: no rows
    with_alos = [*RUNS, run(1, IKKAI_ALOS, 12000, 0.15, 150)]
    rows = {str(row[0]): row[1:] for row in ratio_rows(with_alos)}
    assert rows[f"throughput {IKKAI_EOS} / {IKKAI_ALOS}"][0] == pytest.approx(0.5)


def test_p99s_are_given_per_round_and_compared_with_the_peers_by_their_medians() -> None:
    runs = [*RUNS, run(3, IKKAI_EOS, 6000, 0.3, 400), run(3, PEER_EOS, 10000, 0.2, 530)]
    rows = {str(row[0]): row[1:] for row in p99_rows(runs)}
    assert rows[f"p99 ms at 200/s, {PEER_EOS}"] == [100, 100, 530, 100, 430, None]
    assert rows[f"p99 ms at 200/s, {IKKAI_EOS}"] == [300, 500, 400, 400, 200, None]
    medians = rows[f"p99 at 200/s, {IKKAI_EOS} / {PEER_EOS} (medians)"]
    assert medians[:3] == [None, None, None] and medians[3] == pytest.approx(4.0)  # 400 / 100, not a best round
    assert medians[5] == f"{300 / 530:.2f} - {500 / 100:.2f}"
    assert rows[f"p99 ms at 2,000/s, {IKKAI_EOS}"][:3] == [None, None, None]  # no such load measured


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


def test_infers_targets_are_marked_by_the_medians() -> None:
    targets = {str(row[0]): row[1:] for row in infer_targets(RUNS)}
    assert targets[f"throughput {IKKAI_EOS} / {PEER_EOS}"] == [pytest.approx(0.72), pytest.approx(0.24), ">= 0.7",
                                                             "met"]  # fmt: skip
    assert targets[f"CPU per event {IKKAI_EOS} / {PEER_EOS}"][::3] == [pytest.approx(1.6), "not met"]
    assert targets[f"p99 s at 200/s, {IKKAI_EOS}"] == [pytest.approx(0.4), pytest.approx(0.2), "<= 0.6", "met"]
    assert [row[-1] for row in infer_targets([])] == ["not measured"] * 3


def test_the_report_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [*RUNS]
    runs[0].progress = [progress(5, 25_000, triggerExecution=2000, addBatch=1500)]
    runs[0].low_load_progress = [progress(9, 60, triggerExecution=900, addBatch=700)] * 2
    runs[0].halves = (Half(1000, 1.0, 0.5, 400), Half(2000, 1.0, 0.5, 10))
    runs[0].warmup_end = "cap: JIT not settled"
    report(runs, BrokerWarmUp(300_000, 30.0, 3.0, 900), (0.4, 0.6))
    out = capsys.readouterr().out
    for title in ("the broker warmed first", "the rounds' order (rotated)", "warm-up: until the events and a settled",
                  "steady state, maximum load", "the window's two halves", "steady state, fixed loads",
                  "p99 per round, and exactly-once against the peer", "steady state: ratios per round",
                  "infer's targets, from the medians (load average 0.40 before, 0.60 after"):  # fmt: skip
        assert f"## {title}" in out
    assert "cap: JIT not settled" in out
    assert f"where a batch's time goes, {IKKAI_EOS}: durationMs of 1 measured batches" in out
    assert f"where a batch's time goes, {IKKAI_EOS}: durationMs of 2 batches at 200/s" in out
    assert f"where a batch's time goes, {IKKAI_TXN_OFF}" not in out  # no progress: no table


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


def test_the_measured_batches_are_those_whose_rows_make_the_windows_events() -> None:
    after = [progress(4, 5000), progress(5, 5000), progress(6, 0), progress(7, 5000)]
    assert [p["batchId"] for p in measured_batches(after, 10_000)] == [4, 5]
    assert [p["batchId"] for p in measured_batches(after, 10_001)] == [4, 5, 6, 7]
    assert measured_batches(after, 0) == []
