"""``--progress``'s line: what the listener writes is what the benchmarks read back, other lines ignored."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from spark_jobs.progress import ProgressLines, parse_progress, progress_line


def progress(batch: int, rows: int, **durations: int) -> dict[str, object]:
    return {"batchId": batch, "numInputRows": rows, "timestamp": "2026-11-26T12:00:00.000Z", "durationMs": durations}


def test_progress_lines_round_trip_and_keep_only_batch_rows_start_and_durations() -> None:
    written = progress(7, 25_000, addBatch=800, triggerExecution=1000) | {"id": "q", "sources": [{"big": "x"}]}
    stamped = [(1.0, "infer: batch 6 committed\n"), (2.5, progress_line(written)), (3.0, "noise\n")]
    assert parse_progress(stamped) == [(2.5, progress(7, 25_000, addBatch=800, triggerExecution=1000))]


def test_the_listener_writes_a_line_per_trigger_that_read_rows_and_none_for_an_idle_one() -> None:
    stream = io.StringIO()
    listener = ProgressLines(stream)
    for rows in (0, 12):
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress(rows, rows)))))
    assert [p for _, p in parse_progress([(0.0, line) for line in stream.getvalue().splitlines()])] == [
        progress(12, 12)
    ]
