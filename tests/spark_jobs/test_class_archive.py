"""The Spark driver's class archive: where it lives, when a driver maps it, and that a broken one never goes live."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
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
    options = f"-XX:SharedArchiveFile={archive} -Xlog:disable -Xlog:all=warning:stderr"
    assert driver_java_options(tmp_path, "-Dgiven=1") == f"{options} -Dgiven=1"
    assert driver_java_options(tmp_path) == options


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
def test_another_virtualenv_gets_another_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM checks an archive against its class path: pyspark's jars in another virtualenv are another path."""
    import pyspark

    here = archive_path(tmp_path)
    other = tmp_path / "other-venv" / "pyspark"
    (other / "jars").mkdir(parents=True)
    for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"):
        (other / "jars" / jar.name).touch()  # the same jar names, another folder
    monkeypatch.setattr(pyspark, "__file__", str(other / "__init__.py"))
    assert archive_path(tmp_path) != here


def test_a_virtualenv_made_again_at_the_same_path_gets_another_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a clean-clone run in the same folder as the last: new jar files, the same key, the old archive
    refused by every driver JVM (quietly: the warning goes to stderr) and jobs started without it, 30-50% slower.

    Mutation: the key naming the jars without their times: the same archive path after the venv is made again.
    """
    import pyspark

    venv = tmp_path / "venv" / "pyspark"
    (venv / "jars").mkdir(parents=True)
    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))[:5]:
        (venv / "jars" / jar.name).write_bytes(b"jar")
    monkeypatch.setattr(pyspark, "__file__", str(venv / "__init__.py"))
    before = archive_path(tmp_path)
    first = next((venv / "jars").glob("*.jar"))
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))  # the same jar, written again
    assert archive_path(tmp_path) != before


@needs_java
def test_a_refused_archive_warns_on_stderr_and_leaves_the_drivers_stdout_alone(tmp_path: Path) -> None:
    """An archive of another class path is refused with a JVM warning, which must not land in a command's
    ``-o json`` output: found when a fresh clone's venv met the archive of another checkout's venv."""
    assert JAVA is not None
    javac = JAVA.with_name("javac")
    if not javac.exists():
        pytest.skip("no javac beside java")
    (tmp_path / "Hello.java").write_text(
        'class Hello { public static void main(String[] a) { System.out.println("hello"); } }'
    )
    subprocess.run([str(javac), "-d", str(tmp_path), str(tmp_path / "Hello.java")], check=True, cwd=tmp_path)
    for name in ("a", "b"):  # two class paths holding the same class: jars of different sizes
        with zipfile.ZipFile(tmp_path / f"{name}.jar", "w") as jar:
            jar.write(tmp_path / "Hello.class", "Hello.class")
            jar.writestr(f"{name}.txt", name * (1 if name == "a" else 100))
    archive = tmp_path / "hello.jsa"
    subprocess.run(
        [str(JAVA), "-cp", str(tmp_path / "a.jar"), f"-XX:ArchiveClassesAtExit={archive}", "Hello"],
        capture_output=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    options = [f"-XX:SharedArchiveFile={archive}", *class_archive.WARNINGS_TO_STDERR]
    run = subprocess.run(
        [str(JAVA), "-cp", str(tmp_path / "b.jar"), *options, "Hello"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert "Unable to use shared archive" in run.stderr or "shared class paths mismatch" in run.stderr, run.stderr
    assert run.stdout == "hello\n"


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
