"""Job start-up with and without the Spark driver's class archive (spark_jobs/class_archive.py).

Each round starts a fresh Python process that builds the job's SparkSession (``spark_session``, as
every job does) and runs one small Python ``mapInArrow`` task, once with the archive ``ikkai setup``
wrote and once without it, alternating (A B A B ...). Measured inside that process: session built,
first task done; outside it: the whole process until it exits. No Kafka: this is the part of a
job's start that is the same for every job.

Tables only; nothing here asserts anything about time.

Usage: .venv/bin/python -m benchmarks.job_startup [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import alternating, median, print_table

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys, time
t0 = time.monotonic()
from spark_jobs.session import spark_session
spark = spark_session("startup-bench", class_archive=sys.argv[1] == "archive")
t1 = time.monotonic()
def numbers(batches):
    import pyarrow as pa
    yield pa.RecordBatch.from_pydict({"n": [1, 2, 3]})
spark.range(4).mapInArrow(numbers, "n long").collect()
t2 = time.monotonic()
spark.stop()
print(json.dumps({"session_s": t1 - t0, "first_task_s": t2 - t1}))
"""

VARIANTS = ("archive", "no archive")


def one_run(variant: str) -> dict[str, float]:
    started = time.monotonic()
    run = subprocess.run(  # our own interpreter
        [sys.executable, "-c", PROBE, "archive" if variant == "archive" else "plain"],
        capture_output=True, text=True, cwd=REPO, check=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(run.stdout.strip().splitlines()[-1])
    result["process_s"] = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from ikkai.settings import jars_dir
    from spark_jobs.class_archive import archive_path

    archive = archive_path(jars_dir())
    if archive is None or not archive.is_file():
        sys.exit(f"job_startup: no class archive at {archive}; run `ikkai setup` first")
    load = os.getloadavg()[0]
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    rows = []
    for round_no, variant in alternating(VARIANTS, args.rounds):
        result = one_run(variant)
        results[variant].append(result)
        rows.append([round_no, variant, result["session_s"], result["first_task_s"], result["process_s"]])
    headers = ["round", "variant", "session s", "first task s", "process s"]
    print_table(f"Job start-up, each run (load average at start {load:.1f})", headers, rows)
    summary = []
    for key in ("session_s", "first_task_s", "process_s"):
        with_archive = median([r[key] for r in results["archive"]]) or 0.0
        without = median([r[key] for r in results["no archive"]]) or 0.0
        summary.append([key.replace("_s", " s").replace("_", " "), without, with_archive,
                        with_archive / without if without else None])  # fmt: skip
    print_table("Job start-up, medians", ["measure", "no archive", "archive", "archive / none"], summary)
    print(f"\narchive: {archive} ({archive.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
