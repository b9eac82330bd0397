"""The class archive's training run: what a job's driver does once, in a JVM that writes the archive at exit.

``ikkai setup`` runs it (``class_archive.ensure_class_archive``) as ``python -m spark_jobs.class_archive_training
<archive> <jars_dir>``: a session, an Arrow map and a streaming ``foreachBatch``, so the classes a job loads
are the ones archived. Apart from ``class_archive`` so that the session, which reads the archive, is
imported by this run only: no import runs in a circle.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ikkai.settings import recorded_spark_jars
from spark_jobs.class_archive import TRAIN_TIMEOUT_S
from spark_jobs.session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _numbers(_: Iterator[object]) -> Iterator[object]:
    import pyarrow as pa  # type: ignore[import-untyped]

    yield pa.RecordBatch.from_pydict({"n": [1, 2, 3]})


def _collect_numbers(batch: DataFrame, _batch_id: int) -> None:
    batch.mapInArrow(_numbers, "n long").collect()


def _train(target: Path, jars_dir: Path) -> None:
    """Run what a job's driver does once, then let the JVM exit so that it writes ``target``."""
    from pyspark import SparkContext

    spark = spark_session(
        "ikkai-class-archive",
        jars=recorded_spark_jars(jars_dir),
        conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={target}"},
        class_archive=False,
    )
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "in").mkdir()
        Path(folder, "in", "0.json").write_text('{"n": 1}\n{"n": 2}\n')
        spark.range(4).mapInArrow(_numbers, "n long").collect()
        stream = spark.readStream.schema("n long").json(str(Path(folder, "in")))
        query = (
            stream.writeStream.foreachBatch(_collect_numbers)
            .option("checkpointLocation", str(Path(folder, "checkpoint")))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    gateway = SparkContext._gateway  # private, but the one handle on the JVM process pyspark started
    spark.stop()
    if gateway is not None and gateway.proc is not None:
        gateway.proc.stdin.close()  # the gateway JVM exits on end of input, writing the archive on its way out
        gateway.proc.wait(TRAIN_TIMEOUT_S)


if __name__ == "__main__":
    _train(Path(sys.argv[1]), Path(sys.argv[2]))
