"""The Spark driver's class archive: where it lives, when a driver maps it, and that a broken one never goes live."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ikkai.errors import ConfigError
from spark_jobs import class_archive
from spark_jobs.class_archive import archive_path, driver_java_options, java_executable

JAVA = java_executable()
needs_java = pytest.mark.skipif(JAVA is None, reason="no java the way spark-submit finds it")


@needs_java
def test_a_driver_maps_the_archive_only_when_it_is_there_and_keeps_given_options(tmp_path: Path) -> None:
    assert driver_java_options(tmp_path, "-Dgiven=1") == "-Dgiven=1"
    assert driver_java_options(tmp_path) is None
    archive = archive_path(tmp_path)
    assert archive is not None and archive.parent == tmp_path / "spark-cds"
    archive.parent.mkdir()
    archive.write_bytes(b"x")
    assert driver_java_options(tmp_path, "-Dgiven=1") == f"-XX:SharedArchiveFile={archive} -Dgiven=1"
    assert driver_java_options(tmp_path) == f"-XX:SharedArchiveFile={archive}"


@needs_java
def test_another_java_gets_another_archive(tmp_path: Path) -> None:
    assert JAVA is not None
    other = tmp_path / "bin" / "java"
    other.parent.mkdir()
    shutil.copy(JAVA, other)
    other.write_bytes(other.read_bytes() + b"\0")  # another build: another size
    assert archive_path(tmp_path, other) != archive_path(tmp_path, JAVA)
    assert archive_path(tmp_path, JAVA) == archive_path(tmp_path)  # stable for one Java and one pyspark


@needs_java
def test_a_truncated_archive_is_refused_before_it_could_crash_a_driver(tmp_path: Path) -> None:
    """A JVM given a half-written archive crashes (it does not fall back): the check must catch it."""
    assert JAVA is not None
    whole = tmp_path / "small.jsa"
    subprocess.run(
        [str(JAVA), f"-XX:ArchiveClassesAtExit={whole}", "-version"], capture_output=True, check=True, cwd=tmp_path
    )
    class_archive._check_maps(whole)  # a whole archive maps
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 3])
    crash = subprocess.run(
        [str(JAVA), f"-XX:SharedArchiveFile={cut}", "-version"], capture_output=True, check=False, cwd=tmp_path
    )
    assert crash.returncode != 0  # what the check is there for
    with pytest.raises(ConfigError, match="cannot start with the new class archive"):
        class_archive._check_maps(cut)
    assert list(Path.cwd().glob("hs_err_pid*.log")) == []  # the crash reports stay beside the archives


def test_without_java_there_is_no_archive_and_no_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(class_archive, "java_executable", lambda: None)
    assert archive_path(tmp_path) is None
    assert driver_java_options(tmp_path, "-Dgiven=1") == "-Dgiven=1"
    assert class_archive.ensure_class_archive(tmp_path) is None
