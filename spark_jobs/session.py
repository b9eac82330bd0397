"""The one place a SparkSession is built: Spark's Kafka jars on the classpath, nothing fetched at run time.

The connector jars are the ones ``ikkai setup`` resolved (stack/pom.xml) and recorded in
``<jars_dir>/spark-jars.txt`` (``ikkai.settings.recorded_spark_jars``), passed through
``spark.jars``; ``spark.jars.packages`` is never used, so a job starts the same way offline as
online. Speculative execution is off: the transactional sink relies on one attempt per partition
writing at a time (docs/exactly-once.md). A driver JVM started here maps the class archive
``ikkai setup`` wrote (spark_jobs/class_archive.py) when there is one: the same classes, loaded faster,
and writes its checkpoints without a ``chmod`` process per file (spark_jobs/local_file_system.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ikkai.errors import ConfigError
from ikkai.settings import jars_dir, recorded_spark_jars
from spark_jobs.class_archive import driver_java_options
from spark_jobs.local_file_system import local_file_system_settings, split_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULTS = {
    "spark.speculation": "false",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",  # a worker keeps its imports, model and producers across tasks and batches
}
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Local masters only: Python workers fork from a daemon that did the jobs' imports once (python_daemon),
# in a process without threads (OpenBLAS and pyarrow's jemalloc would start one at import).
LOCAL_DEFAULTS = {
    "spark.python.daemon.module": "spark_jobs.python_daemon",
    "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
    "spark.executorEnv.JE_ARROW_MALLOC_CONF": "background_thread:false",
}


def spark_jars(jars: Sequence[Path] | None = None) -> list[str]:
    resolved = jars or recorded_spark_jars(jars_dir())
    if not resolved:
        raise ConfigError(
            "spark", "spark.jars", "Spark's Kafka connector jars are not resolved", fix="run `ikkai setup` first"
        )
    return [str(path) for path in resolved]


def launched_by_spark_submit() -> bool:
    """True in a driver that spark-submit started: its JVM is already up and told Python where (the gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    app_name: str,
    *,
    master: str = "local[2]",
    jars: Sequence[Path] | None = None,
    conf: Mapping[str, str] | None = None,
    class_archive: bool = True,
) -> SparkSession:
    from pyspark.sql import SparkSession

    if launched_by_spark_submit():
        # spark-submit already decided master, jars, Python and files (`ikkai jobs submit`); on a
        # cluster driver the local jar folder does not even exist. Only ikkai's own defaults apply.
        builder = SparkSession.builder.appName(app_name)
        for key, value in {**DEFAULTS, **(conf or {})}.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    if not master.startswith("local"):
        # Started here, a cluster's executors would get no code of ours: the jobs reach them only as the
        # application zip spark-submit ships (--py-files). An editable install on the same machine hides this.
        raise ConfigError(
            "spark", "--master", f"{master} is a cluster: its executors get the jobs' code only through spark-submit",
            fix=f"run the job with `ikkai jobs run <job> --master {master}` (or `ikkai jobs submit`), which ships it",
        )  # fmt: skip
    connector_jars, file_system_jar = split_jars(spark_jars(jars))
    builder = SparkSession.builder.appName(app_name).master(master).config("spark.jars", ",".join(connector_jars))
    # Local Python workers run this interpreter (the venv with fastavro, confluent-kafka, pandas),
    # not whatever `python3` is first on PATH; pyspark reads the variable, not spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {**DEFAULTS, **LOCAL_DEFAULTS, **(conf or {})}
    settings.update(local_file_system_settings(file_system_jar, settings))  # spark_jobs.local_file_system
    if class_archive:  # the driver JVM we are about to start maps Spark's classes (spark_jobs.class_archive)
        options = driver_java_options(jars_dir(), settings.get(DRIVER_JAVA_OPTIONS))
        settings.update({DRIVER_JAVA_OPTIONS: options} if options else {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
