"""Local Python workers fork from ikkai's daemon: the imports done once, Spark's zips off the path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.python_daemon import PRELOADED


def _worker_state(_: Iterator[Any]) -> Iterator[tuple[list[str], list[str], list[str]]]:
    import sys
    import zipimport

    zips = sorted(
        key for key, importer in sys.path_importer_cache.items() if isinstance(importer, zipimport.zipimporter)
    )
    missing = [name for name in PRELOADED if name not in sys.modules]
    on_path = [p for p in sys.path if p.endswith((".zip", ".jar")) and "pyspark" in p]
    yield zips, missing, on_path


def test_workers_start_with_the_imports_done_and_without_spark_zips(spark: Any) -> None:
    assert spark.conf.get("spark.python.daemon.module") == "spark_jobs.python_daemon"
    states = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_state).collect()
    # No zip importer left to re-read when a task adds its files to the path, and every preloaded module
    # there (a daemon that found threads after preloading restarts as pyspark's own, without them).
    assert states == [([], [], [])] * 2
