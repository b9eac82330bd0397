"""The local file system of a local job's driver: the checkpoint written without a ``chmod`` process per file.

Hadoop's ``LocalFileSystem`` sets the permissions of every file it creates through libhadoop, and
without libhadoop (pyspark ships none) by running ``chmod`` in a new process. A streaming query
writes two checkpoint files per micro-batch (``offsets/N``, ``commits/N``), each with its ``.crc``,
and a stateful one a delta file per state partition: strace of a local driver shows six ``chmod``
processes per batch, and Spark's own progress puts ``walCommit`` and ``commitOffsets`` at 60-75 ms
each on the 2-core machine, a third of a small batch (BENCHMARKS.md, "Where a batch's time goes").

``BareLocalFileSystem`` (GlobalMentor's hadoop-bare-naked-local-fs, Apache-2.0, one small jar
resolved with the Spark jars: stack/maven/spark/pom.xml) is the same checksummed local file system
with the permissions set through Java NIO: the same files, the same ``.crc`` files, no process. Spark
uses it for the checkpoint through its ``FileSystem``-based checkpoint file manager (the default one
goes through Hadoop's ``FileContext``, whose local file system is hard-wired). Renames stay POSIX
renames, atomic on one machine. A checkpoint written either way is read by the other.

Local masters only: the jar goes on the driver's class path (a class Hadoop loads by name must be
there before Spark adds ``spark.jars``), which on a cluster would have to be on every executor's as
well. Without the jar (a ``setup`` from before it) a job starts exactly as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

JAR_PREFIX = "hadoop-bare-naked-local-fs-"
FILE_SYSTEM = "com.globalmentor.apache.hadoop.fs.BareLocalFileSystem"
CHECKPOINT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
DRIVER_CLASS_PATH = "spark.driver.extraClassPath"


def split_jars(jars: Iterable[str]) -> tuple[list[str], str | None]:
    """The jars for ``spark.jars``, and the local file system's jar (None if ``setup`` resolved none)."""
    jars = list(jars)
    found = [jar for jar in jars if Path(jar).name.startswith(JAR_PREFIX)]
    return [jar for jar in jars if jar not in found], (found[0] if found else None)


def local_file_system_settings(jar: str | None, given: Mapping[str, str]) -> dict[str, str]:
    """The settings that make a local driver write through ``BareLocalFileSystem``; none without its jar.

    A class path in ``given`` is kept, after the jar; a file system or checkpoint manager in
    ``given`` wins (nothing is set then).
    """
    if jar is None or "spark.hadoop.fs.file.impl" in given or "spark.sql.streaming.checkpointFileManagerClass" in given:
        return {}
    class_path = os.pathsep.join(part for part in (jar, given.get(DRIVER_CLASS_PATH)) if part)
    return {
        DRIVER_CLASS_PATH: class_path,
        "spark.hadoop.fs.file.impl": FILE_SYSTEM,
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_MANAGER,
    }
