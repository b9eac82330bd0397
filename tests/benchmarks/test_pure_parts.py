"""The pure parts of the benchmark scripts: tables, percentiles, A/B order, parsing Kafka's perf tools.

No timing assertions here: the scripts print numbers, BENCHMARKS.md records them.
"""

from __future__ import annotations

import pytest

from benchmarks.ceiling import parse_consumer_performance, parse_producer_performance
from benchmarks.harness import (
    EXECUTOR_WRITER_MODULE,
    alternating,
    executor_writers,
    format_table,
    median,
    percentile,
    proc_stats,
    process_tree,
    tree_memory_bytes,
)
from benchmarks.infer_scaling import fit_line


def test_tables_align_text_left_and_numbers_right() -> None:
    rows = [["exactly-once", 1388.4, None], ["at-least-once", 2634, 2.5]]
    table = format_table(["MODE", "RECORDS/S", "P99 MS"], rows)
    assert table.splitlines() == [
        "MODE           RECORDS/S  P99 MS",
        "exactly-once       1,388       -",
        "at-least-once      2,634    2.50",
    ]


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([7.0], 99) == 7
    assert percentile([], 50) is None
    assert median([3.0, 1.0, 2.0]) == 2


def test_variants_alternate_within_each_round() -> None:
    assert alternating(["eos", "alos"], 2) == [(1, "eos"), (1, "alos"), (2, "eos"), (2, "alos")]


def test_a_line_fit_finds_the_per_batch_cost() -> None:
    a, b = fit_line([1, 2, 4, 8], [10.5, 11.0, 12.0, 14.0])
    assert a == pytest.approx(10.0)
    assert b == pytest.approx(0.5)


def test_a_tree_counts_descendants_that_left_its_process_group() -> None:
    """As PySpark's daemon does with its Python workers: a child in a session of its own is still the job's."""
    import os
    import subprocess
    import sys
    import time

    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; x = bytearray(40_000_000); sys.stdin.read()"],
        stdin=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while tree_memory_bytes(child.pid) < 40_000_000 and time.monotonic() < deadline:
            assert child.poll() is None  # until the child has its bytes resident
        assert child.pid in process_tree(os.getpid())
        assert tree_memory_bytes(os.getpid()) >= tree_memory_bytes(child.pid) >= 40_000_000
    finally:
        child.kill()
        child.wait()


def test_kafka_perf_tool_summaries_are_parsed() -> None:
    producer = (
        "49823 records sent, 9964.6 records/sec (3.37 MB/sec), 1234.5 ms avg latency, 2100.0 ms max latency.\n"
        "50000 records sent, 9066.339 records/sec (3.07 MB/sec), 1500.12 ms avg latency, 2200.00 ms max latency, "
        "1400 ms 50th, 2000 ms 95th, 2100 ms 99th, 2150 ms 99.9th.\n"
    )
    assert parse_producer_performance(producer) == (9066.339, 3.07, 2100.0)
    consumer = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
        "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-22 13:40:01:000, 2026-11-22 13:40:04:172, 16.9277, 5.3366, 50000, 15763.0517, 512, 2660, 6.36, 18796\n"
    )
    assert parse_consumer_performance(consumer) == (15763.0517, 5.3366)


def test_an_executor_writer_counts_with_the_jvm_it_serves_when_its_parent_is_gone() -> None:
    """The Python worker that started a writer may exit: the writer, then a child of init, is still the job's, named
    by its ``--executor-pid``. Built with two real processes and the writer's parent link rewritten to init's.
    Mutation: the tree by parent links only -> the writer is left out."""
    import dataclasses
    import os
    import subprocess
    import sys

    executor = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "-m", EXECUTOR_WRITER_MODULE, "--executor-pid",
         str(executor.pid)], stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        stats = proc_stats()
        stats[writer.pid] = dataclasses.replace(stats[writer.pid], ppid=1)  # as after its starter exited
        assert executor_writers(stats)[writer.pid] == executor.pid
        assert writer.pid in process_tree(executor.pid, stats)
        assert writer.pid not in process_tree(os.getpid() + 10**9, stats)  # a tree without that JVM does not take it
    finally:
        executor.kill()
        writer.kill()
