"""The pure parts of benchmarks/enrich_steady.py: the measured window and its halves, the rotated order, CPU between
two instants, the targets, the tables.

No timing assertions: the numbers here are made up; the script measures, BENCHMARKS.md records.
"""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks.enrich_steady import (
    ENRICH_ALOS,
    ENRICH_EOS,
    PIPELINE,
    VARIANTS,
    Half,
    Run,
    compiled_between,
    cpu_between,
    enrich_targets,
    halves,
    measured_window,
    report,
    rows_between,
    warm_up_over,
    window_end_reason,
)
from benchmarks.harness import rotated
from benchmarks.looped_stream import FreshLines
from benchmarks.steady_state import Load
from benchmarks.targets import MET, NOT_MEASURED, NOT_MET, verdict
from demo.raw_payments import EVENT, mixed_stream


def progress(rows: int) -> dict[str, object]:
    return {"numInputRows": rows, "durationMs": {"triggerExecution": 1000, "addBatch": 800}}


# (arrival of the batch's progress line, its progress): three warm-up batches, then four measured ones.
LINES = [(1.0, progress(100)), (3.0, progress(200)), (5.0, progress(300)),
         (6.0, progress(1000)), (7.0, progress(1000)), (8.0, progress(1000)), (20.0, progress(1000))]  # fmt: skip


def test_the_window_runs_from_the_warm_ups_last_line_to_the_last_line_counted() -> None:
    window = measured_window(LINES, warmup=3, until=9.0)
    assert window is not None
    assert (window.start, window.end, window.rows) == (5.0, 8.0, 3000)  # the batch at 20 s is past the window
    assert window.rate == 1000.0
    assert len(window.batches) == 3


def test_no_window_without_a_batch_after_the_warm_up() -> None:
    assert measured_window(LINES[:3], warmup=3, until=100.0) is None
    assert measured_window(LINES, warmup=3, until=5.5) is None
    assert measured_window(LINES, warmup=0, until=100.0) is None


def test_rows_between_counts_lines_after_the_start_up_to_the_end() -> None:
    assert rows_between(LINES, 5.0, 7.0) == 2000
    assert rows_between(LINES, 0.0, 1.0) == 100


def test_cpu_between_takes_the_first_sample_at_or_after_each_instant() -> None:
    samples = [(1.0, 10.0), (2.0, 11.5), (3.0, 13.0), (4.0, 14.0)]
    assert cpu_between(samples, 1.5, 3.0) == 13.0 - 11.5
    assert cpu_between(samples, 3.5, 9.0) == 0.0  # both past the last sample: the last
    assert cpu_between([], 0.0, 1.0) == 0.0


def test_the_report_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [
        Run(
            1,
            ENRICH_EOS,
            lines=60_000,
            seconds=10.0,
            cpu_s=12.0,
            batches=[progress(20_000)],
            loads=[Load("200/s", 199.5, 4_000, 310.0, 654.0, 700.0)],
            halves=(Half(0.0, 5.0, 25_000), Half(5.0, 10.0, 35_000)),
            halves_cpu_s=(6.5, 5.5),
            ended_by="60 s",
        ),
        Run(1, ENRICH_ALOS, lines=80_000, seconds=10.0, cpu_s=12.0, settled=False, ended_by="short"),
        Run(
            1,
            PIPELINE,
            lines=30_000,
            seconds=10.0,
            decided=25_000,
            cpu_s=20.0,
            loads=[Load("200/s", 200.0, 4_000, 900.0, 1_400.0, 1_600.0)],
        ),
    ]
    report(runs)
    out = capsys.readouterr().out
    assert "## enrich at steady state" in out
    assert "## enrich: ratios per round" in out
    assert "0.75" in out  # 6,000 / 8,000 lines/s
    assert "5,000" in out and "7,000" in out  # the halves' lines/s
    assert "260" in out and "157" in out  # the halves' CPU: 6.5 s / 25,000 and 5.5 s / 35,000 lines, in µs
    assert "not settled" in out and "short" in out
    assert "## enrich: targets" in out
    targets = out.split("## enrich: targets", 1)[1]
    assert "not met" in targets.splitlines()[3]  # 6,000 lines/s against 10,000
    assert " met " in targets.splitlines()[4]  # 1.4 s against 1.5 s
    assert f"where a batch's time goes, {ENRICH_EOS}: durationMs of 1 measured batches" in out
    assert f"where a batch's time goes, {ENRICH_ALOS}" not in out
    assert "## enrich, fixed loads" in out and "654" in out


def test_fresh_lines_are_new_payments_after_every_line_of_the_stream() -> None:
    """Each fixed-load line must become one event: a payment id and event id of its own, keyed by the payment id,
    an event time after every line of the stream (never behind the watermark), growing across loads."""
    stream = mixed_stream(11, payments=300, partitions=2)
    fresh = FreshLines.after(stream, templates=50)
    first, second = fresh.fresh("a", 120), fresh.fresh("b", 30)
    documents = [json.loads(value) for _, value in first + second]
    assert [key.decode() for key, _ in first + second] == [d["payment_id"] for d in documents]
    known = {json.loads(line.value).get("payment_id") for line in stream.lines if line.expected == EVENT}
    assert len({d["payment_id"] for d in documents}) == 150 and not known & {d["payment_id"] for d in documents}
    assert len({d["event_id"] for d in documents}) == 150
    times = [d["event_time"] for d in documents]
    latest = max(json.loads(line.value)["event_time"] for line in stream.lines if line.expected == EVENT)
    assert times == sorted(times) and len(set(times)) == 150 and times[0] > latest
    assert {d["status"] for d in documents} <= {"authorized", "captured"}


def test_the_variants_order_rotates_by_one_every_round() -> None:
    a, b, c = VARIANTS
    assert rotated(VARIANTS, 3) == [(1, a), (1, b), (1, c), (2, b), (2, c), (2, a), (3, c), (3, a), (3, b)]
    assert [v for _, v in rotated(VARIANTS, 4)[-3:]] == [a, b, c]  # round 4 is round 1's order again


def test_the_window_is_cut_at_its_first_line_past_the_middle() -> None:
    assert halves(LINES, 5.0, 20.0) is None  # the only line past 12.5 s is the window's last: one batch
    cut = halves(LINES, 3.0, 8.0)
    assert cut == (Half(3.0, 6.0, 1300), Half(6.0, 8.0, 2000))  # split at 6.0, the first line >= 5.5
    assert cut[0].rate == pytest.approx(1300 / 3) and cut[1].rate == 1000.0


def test_the_window_says_what_ended_it() -> None:
    assert window_end_reason(100_000, 61.0, 400_000, 60) == "60 s"
    assert window_end_reason(400_000, 40.0, 400_000, 60) == "400,000 lines"
    assert window_end_reason(115_438, 19.0, 400_000, 60) == "short"  # the backlog ran out first


def test_the_enrich_targets_take_the_medians_and_say_when_nothing_was_measured() -> None:
    fast = [Run(n, ENRICH_EOS, lines=rate * 10, seconds=10.0) for n, rate in ((1, 9_000), (2, 12_000), (3, 11_000))]
    slow_p99 = [Run(n, PIPELINE, loads=[Load("200/s", 200.0, 4_000, 900.0, p99, 2_000.0)])
                for n, p99 in ((1, 1_400.0), (2, 1_700.0), (3, 1_600.0))]  # fmt: skip
    (rate_target, rate, _), (p99_target, p99, _) = enrich_targets(fast + slow_p99)
    assert rate == 11_000 and p99 == pytest.approx(1.6)
    assert verdict(rate_target, rate) == MET and verdict(p99_target, p99) == NOT_MET
    (_, none_rate, _), (_, none_p99, _) = enrich_targets([])
    assert verdict(rate_target, none_rate) == NOT_MEASURED and none_p99 is None


def test_compilations_in_a_window_come_from_the_samples_at_its_ends() -> None:
    jit = [(1.0, 4_000), (2.0, None), (3.0, 4_300), (4.0, 4_310), (5.0, 4_320)]
    assert compiled_between(jit, 2.0, 4.0) == 10  # 4,310 - 4,300: an unknown count is skipped
    assert compiled_between(jit, 0.5, 9.0) == 320  # the end past the last sample: the last known
    assert compiled_between([(1.0, None)], 0.0, 2.0) is None  # no performance-data file: not known


def test_the_warm_up_needs_the_lines_and_a_settled_jit_or_its_bound() -> None:
    args = argparse.Namespace(warmup_lines=300_000, settle_span=10.0, settle_max=50, lines=400_000)
    compiling = [(0.0, 1_000), (5.0, 3_000), (10.0, 4_500), (15.0, 4_560)]  # 1,560 in the last 10 s
    quiet = [*compiling, (20.0, 4_590), (25.0, 4_600)]  # 40 since 15 s
    assert not warm_up_over(299_999, quiet, 25.0, 300.0, args)  # settled, but not enough lines
    assert not warm_up_over(300_000, compiling, 15.0, 300.0, args)  # the lines, but still compiling
    assert warm_up_over(300_000, quiet, 25.0, 300.0, args)
    assert not warm_up_over(300_000, [*compiling, (20.0, 4_590), (25.0, 4_610)], 25.0, 300.0, args)  # 50: not fewer
    assert warm_up_over(300_000, compiling, 301.0, 300.0, args)  # past the bound: over, the row says not settled
    assert not warm_up_over(300_000, [(t, None) for t in range(30)], 29.0, 300.0, args)  # no count: wait the bound
    left = 300_000 + args.lines  # the stream's lines: the warm-up may not read into the window's
    assert not warm_up_over(300_000, compiling, 15.0, 300.0, args, left + 1)
    assert warm_up_over(300_001, compiling, 15.0, 300.0, args, left)  # still compiling, but the rest is the window's
    assert not warm_up_over(299_999, quiet, 25.0, 300.0, args, 300_000)  # the warm-up's own lines come first
