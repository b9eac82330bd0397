"""``python -m benchmarks.infer_progress <the infer job's options>``: the infer job, printing each batch's progress.

The job exposes no hook for Spark's ``StreamingQueryProgress``, so this runs the job's own entry
point (``spark_jobs.infer.job.main``, unchanged) with one thread beside it: once the job's
SparkSession exists, the thread polls the running queries' ``recentProgress`` every 0.2 s and
writes every batch it has not written yet as one line on stderr::

    progress {"batchId": 7, "numInputRows": 25000, "timestamp": "...", "durationMs": {"addBatch": 812, ...}}

Batches that read nothing (Spark reports idle triggers too) are left out. Spark keeps the last 100
progress updates per query; at the job's 250 ms trigger the thread polls faster than they age out.
The polling is a few py4j calls a second inside the job's process tree: its CPU counts as the job's.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

PREFIX = "progress "


def progress_line(progress: dict[str, Any]) -> str:
    """The line written for one batch: its id, input rows, trigger start and durations by phase."""
    kept = {key: progress.get(key) for key in ("batchId", "numInputRows", "timestamp", "durationMs")}
    return PREFIX + json.dumps(kept, separators=(",", ":")) + "\n"


def _watch(stop: threading.Event, interval: float = 0.2) -> None:
    from pyspark.sql import SparkSession

    written: set[tuple[str, int]] = set()
    while not stop.wait(interval):
        spark = SparkSession._instantiatedSession  # the job's session, made on the main thread
        if spark is None:
            continue
        try:
            for query in spark.streams.active:
                for update in query.recentProgress:
                    progress = json.loads(update.json)
                    key = (str(progress.get("id")), int(progress.get("batchId", -1)))
                    if key in written or not progress.get("numInputRows"):
                        continue
                    written.add(key)
                    sys.stderr.write(progress_line(progress))
        except Exception:  # noqa: BLE001, S112 - the session stops under us at the end: nothing to report then
            continue


def main() -> None:
    from spark_jobs.infer.job import main as infer_main
    from spark_jobs.job_shell import main_entry

    threading.Thread(target=_watch, args=(threading.Event(),), daemon=True).start()
    main_entry(infer_main)


if __name__ == "__main__":
    main()
