"""A local driver writes its checkpoints through BareLocalFileSystem: the settings, and the real session using them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.local_file_system import (
    CHECKPOINT_MANAGER,
    DRIVER_CLASS_PATH,
    FILE_SYSTEM,
    local_file_system_settings,
    split_jars,
)

JARS = ["/j/spark/kafka-clients-3.9.2.jar", "/j/spark/hadoop-bare-naked-local-fs-0.1.0.jar", "/j/spark/x.jar"]
SPARK_DEFAULT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"


def test_the_file_system_jar_leaves_spark_jars_for_the_drivers_class_path() -> None:
    connectors, file_system = split_jars(JARS)
    assert connectors == [JARS[0], JARS[2]]
    assert file_system == JARS[1]
    assert split_jars(connectors) == (connectors, None)  # a setup from before the jar: nothing changes


def test_the_settings_put_the_jar_first_and_keep_a_given_class_path() -> None:
    settings = local_file_system_settings(JARS[1], {DRIVER_CLASS_PATH: "/mine.jar"})
    assert settings == {
        DRIVER_CLASS_PATH: f"{JARS[1]}:/mine.jar",
        "spark.hadoop.fs.file.impl": FILE_SYSTEM,
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_MANAGER,
    }
    assert local_file_system_settings(None, {}) == {}
    assert local_file_system_settings(JARS[1], {"spark.hadoop.fs.file.impl": "my.FileSystem"}) == {}


@pytest.mark.integration
def test_the_session_writes_checkpoints_through_it_and_either_manager_reads_the_others(
    spark: Any, tmp_path: Path
) -> None:
    """The driver's file system for file:/ is BareLocalFileSystem and the query's checkpoint manager the FileSystem-
    based one; a query checkpointed under it continues under Spark's default manager and back: the same files."""
    jvm = spark._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())
    assert local.getClass().getName() == FILE_SYSTEM
    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == CHECKPOINT_MANAGER
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def run(manager: str, files: int) -> list[int]:
        for n in range(files):
            (source / f"{n}.json").write_text(json.dumps({"n": n}) + "\n")
        seen: list[int] = []
        spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", manager)
        try:
            stream = spark.readStream.schema("n long").json(str(source))
            query = (
                stream.writeStream.foreachBatch(lambda batch, _: seen.extend(r.n for r in batch.collect()))
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
        finally:
            spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_MANAGER)
        return sorted(seen)

    assert run(CHECKPOINT_MANAGER, 2) == [0, 1]
    assert sorted(path.name for path in (checkpoint / "offsets").iterdir()) == [".0.crc", "0"]  # checksummed, as ever
    assert run(SPARK_DEFAULT_MANAGER, 3) == [2]  # the default manager continues the checkpoint written through ours
    assert run(CHECKPOINT_MANAGER, 4) == [3]  # and back
