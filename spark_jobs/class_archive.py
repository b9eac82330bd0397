"""A class-data archive for the Spark driver's JVM: a job starts without loading Spark's classes from scratch.

Most of a local job's start is its JVM loading and verifying the classes of pyspark's jars, every
run again. Java 17 can write the classes one run loaded into an archive (``-XX:ArchiveClassesAtExit``)
and map them at the next start (``-XX:SharedArchiveFile``, AppCDS). ``ikkai setup`` writes one archive
per Java and pyspark under ``<jars_dir>/spark-cds/``; ``spark_session`` hands it to a driver it starts
when it is there, and starts exactly as before when it is not. Measured side by side on the 2-core
machine: BENCHMARKS.md, "Job start-up".

The archive only changes where class bytes come from, never which classes run: the JVM checks it
against its own build and class path and, on any mismatch, says so in one warning line and loads the
classes as usual (that warning, like every JVM warning of a driver started here, goes to stderr, never
into a command's output). A half-written archive would crash it instead, so an archive is written under a
temporary name, mapped once by a JVM that must start cleanly, and only then renamed into place.

The training run exercises what every job does on the driver: a session, a Python ``mapInArrow``
task, and a streaming query with ``foreachBatch`` (its Python callback server). Kafka's classes come
from ``spark.jars`` through Spark's own class loader and stay out of the archive.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ikkai.errors import ConfigError
from ikkai.settings import recorded_spark_jars
from spark_jobs.local_file_system import split_jars

if TYPE_CHECKING:
    pass

ARCHIVE_DIR = "spark-cds"
# The JVM writes its own warnings (a refused archive among them) to stdout, which is the job's stdout: a
# command's `-o json` would no longer parse. These send every JVM warning to stderr instead.
WARNINGS_TO_STDERR = ("-Xlog:disable", "-Xlog:all=warning:stderr")
_CHECK_TIMEOUT_S = 60
TRAIN_TIMEOUT_S = 600


def java_executable(env: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """The ``java`` that ``spark-submit`` runs: ``$JAVA_HOME/bin/java``, else the first on PATH (resolved)."""
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java", path=env.get("PATH"))
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path(jars_dir: Path, java: Path | None = None) -> Path | None:
    """Where the archive for this Java and this pyspark lives (None without either): a new either is a new file."""
    java = java or java_executable()
    if java is None or find_spec("pyspark") is None:  # a control-plane install runs no Spark
        return None
    import pyspark

    stat = java.stat()
    # The JVM checks the archive against its class path: the jars' folder, names, sizes and times. A virtualenv
    # made again at the same path has new files there: a new key, or the old archive is refused at every start.
    folder = Path(pyspark.__file__).resolve().parent / "jars"
    jars = [f"{p.name} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in sorted(folder.glob("*.jar"))]
    _, file_system_jar = split_jars(str(jar) for jar in recorded_spark_jars(jars_dir) or [])
    if file_system_jar:  # first on the driver's class path (spark_jobs.local_file_system): part of what is checked
        jar = Path(file_system_jar)
        jars.append(f"{jar} {jar.stat().st_size} {jar.stat().st_mtime_ns}")
    identity = "\n".join([str(java), str(stat.st_size), str(stat.st_mtime_ns), version("pyspark"), str(folder), *jars])
    return jars_dir / ARCHIVE_DIR / f"spark-driver-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.jsa"


def driver_java_options(jars_dir: Path, given: str | None = None) -> str | None:
    """``spark.driver.extraJavaOptions`` with the archive added when there is one; ``given`` options are kept."""
    archive = archive_path(jars_dir)
    if archive is None or not archive.is_file():
        return given
    return " ".join(part for part in (f"-XX:SharedArchiveFile={archive}", *WARNINGS_TO_STDERR, given) if part)


def ensure_class_archive(jars_dir: Path, *, progress: TextIO = sys.stderr) -> Path | None:
    """Write the archive for this Java and pyspark if it is missing; its path, or None without Java or pyspark."""
    target = archive_path(jars_dir)
    if target is None or target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    progress.write("writing the Spark driver's class archive (one Spark run, about a minute)\n")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".training-") as scratch:
        partial = Path(scratch) / target.name
        training = subprocess.run(  # our own interpreter and module
            [sys.executable, "-m", "spark_jobs.class_archive_training", str(partial), str(jars_dir)],
            capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S, check=False,
        )  # fmt: skip
        if training.returncode != 0 or not partial.is_file():
            raise ConfigError(
                "spark", str(target), f"the class archive's training run failed: {_last_line(training.stderr)}",
                fix="run `ikkai setup` again; jobs still start without the archive, only slower",
            )  # fmt: skip
        _check_maps(partial)
        partial.replace(target)
    progress.write(f"class archive ready: {target}\n")
    return target


def _check_maps(archive: Path) -> None:
    """A JVM must start cleanly with ``archive`` mapped: a broken archive crashes the JVM, so it never goes live."""
    java = java_executable()
    check = subprocess.run(  # the Java spark-submit runs
        [str(java), f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-version"],
        cwd=archive.parent,  # a crash report (hs_err_pid*.log) lands beside the refused archive
        capture_output=True, text=True, timeout=_CHECK_TIMEOUT_S, check=False,
    )  # fmt: skip
    if check.returncode != 0:
        raise ConfigError(
            "spark", str(archive), f"a JVM cannot start with the new class archive: {_last_line(check.stderr)}",
            fix="run `ikkai setup` again; jobs still start without the archive, only slower",
        )  # fmt: skip


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
