"""The Python daemon of local jobs: pyspark's own, started with the jobs' imports done once, before it forks.

Spark starts one Python daemon per executor (``spark.python.daemon.module``) and forks every
Python worker from it. With pyspark's daemon, each new worker then imports pandas, pyarrow,
numpy, fastavro, confluent-kafka and the job's modules itself, and re-reads the directories
of the zips Spark puts first on its path (``pyspark.zip``, py4j's zip and the spark-core jar,
7,000 entries parsed in Python, once per importer of each zip, when the task's files are added
to the path). py-spy showed that start-up costing a new worker more CPU than ``decide`` spends on
a 20,000-event batch (BENCHMARKS.md, "where the time goes").

This module does both once, in the daemon, and then runs pyspark's daemon unchanged, so every
fork starts with the modules in memory:

- When pyspark and py4j are importable without the zips, at the zips' own version (a
  pip-installed pyspark, as ``make setup`` makes), the zips leave the path and their importers
  leave the importer cache; otherwise the path is left as Spark set it.
- pyspark's daemon forks only a process without threads (a fork copies the forking thread
  only). Importing numpy starts OpenBLAS's worker thread and importing pyarrow starts jemalloc's
  background thread unless told otherwise: ``session.LOCAL_DEFAULTS`` sets
  ``OPENBLAS_NUM_THREADS=1`` and ``JE_ARROW_MALLOC_CONF=background_thread:false`` for the
  executors. If a thread runs after the imports anyway, the imports are not kept: the daemon
  restarts itself without them (pyspark's daemon as it is), and says so on stderr.

Used for local masters only (``session.spark_session``): on a cluster, spark-submit decides how
Python workers start.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import zipfile

PRELOADED = (
    "pyspark.worker", "pyspark.sql.pandas.serializers", "numpy", "pyarrow", "pyarrow.compute", "pandas", "fastavro",
    "confluent_kafka", "spark_jobs.infer.fraud_decisions", "spark_jobs.sink.transactional_sink",
)  # fmt: skip
_SPARK_ZIPS = ("pyspark.zip", "-src.zip", ".jar")  # pyspark's, py4j's (py4j-<version>-src.zip), spark-core's
_PLAIN = "IKKAI_PLAIN_PYTHON_DAEMON"  # set when the daemon restarted itself without preloading


def _zip_version(archive: str) -> str | None:
    try:
        with zipfile.ZipFile(archive) as opened:
            text = opened.read("pyspark/version.py").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    return next((line.split("=", 1)[1].strip().strip("\"'") for line in text.splitlines()
                 if line.startswith("__version__")), None)  # fmt: skip


def _installed_version(path: list[str]) -> str | None:
    spec = importlib.machinery.PathFinder.find_spec("pyspark", path)
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
    try:
        with open(version_file, encoding="utf-8") as opened:
            text = opened.read()
    except OSError:
        return None
    return next((line.split("=", 1)[1].strip().strip("\"'") for line in text.splitlines()
                 if line.startswith("__version__")), None)  # fmt: skip


def drop_spark_zips() -> bool:
    """Take Spark's zips off ``sys.path`` when the same pyspark and py4j are installed; True if it did."""
    zips = [p for p in sys.path if p.endswith(_SPARK_ZIPS) and os.path.isfile(p)]
    pyspark_zip = next((p for p in zips if p.endswith("pyspark.zip")), None)
    if not zips or pyspark_zip is None or "pyspark" in sys.modules:
        return False
    rest = [p for p in sys.path if p not in zips]
    version = _zip_version(pyspark_zip)
    if version is None or _installed_version(rest) != version:
        return False
    if importlib.machinery.PathFinder.find_spec("py4j", rest) is None:
        return False

    def inside(path: str) -> bool:
        return any(path == z or path.startswith(z + os.sep) for z in zips)

    sys.path[:] = rest
    for key in list(sys.path_importer_cache):
        if inside(key):
            del sys.path_importer_cache[key]
    # Namespace packages found only inside them: ``org`` from the spark-core jar, made by the stdlib's
    # ``from org.python.core import ...`` (a Jython check in copy and pickle) while the jar was on the path.
    for name, module in list(sys.modules.items()):
        paths = list(getattr(module, "__path__", None) or [])
        if paths and getattr(module, "__file__", None) is None and all(inside(p) for p in paths):
            del sys.modules[name]
    importlib.invalidate_caches()
    return True


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1  # no /proc: nothing to check with; pyspark's daemon makes the same bet


def main() -> None:
    if os.environ.get(_PLAIN) != "1":
        drop_spark_zips()
        for name in PRELOADED:
            importlib.import_module(name)
        if _threads() > 1:
            sys.stderr.write(
                f"ikkai: python daemon: {_threads()} threads after preloading {', '.join(PRELOADED)}; "
                "restarting without preloading (forking a process with threads is unsafe)\n"
            )
            sys.stderr.flush()
            os.environ[_PLAIN] = "1"
            os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])  # noqa: S606
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
