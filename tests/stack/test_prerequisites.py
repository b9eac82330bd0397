import os
import stat
from pathlib import Path

import pytest

from ikkai.errors import PrerequisiteError
from stack.prerequisites import check_java, check_maven, parse_java_version


@pytest.mark.parametrize(
    ("output", "major", "version"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17, "17.0.15"),
        ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment', 8, "1.8.0_392"),
        ('openjdk version "21" 2023-09-19', 21, "21"),
        ('openjdk version "11.0.2-ea" 2019-01-15', 11, "11.0.2-ea"),
    ],
)
def test_parse_java_version(output: str, major: int, version: str) -> None:
    assert parse_java_version(output) == (major, version)


def test_parse_java_version_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="no version"):
        parse_java_version("command not found")


def fake_tool(folder: Path, name: str, stderr: str) -> None:
    tool = folder / name
    tool.write_text(f"#!/bin/sh\necho '{stderr}' >&2\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_old_java_is_a_one_line_error_that_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(tmp_path, "java", 'openjdk version "11.0.22" 2024-01-16')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PrerequisiteError) as caught:
        check_java()
    message = str(caught.value)
    assert "\n" not in message
    assert "11.0.22" in message and "17 or newer" in message and "apt-get install openjdk-17" in message


def test_java_home_without_java_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(PrerequisiteError, match=f"JAVA_HOME={tmp_path} has no bin/java"):
        check_java()


def test_missing_maven_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PrerequisiteError) as caught:
        check_maven()
    assert caught.value.tool == "mvn"
    assert "apt-get install maven" in str(caught.value)


def test_real_java_on_this_machine_is_accepted() -> None:
    if not os.environ.get("JAVA_HOME") and not any(
        (Path(p) / "java").exists() for p in os.environ.get("PATH", "").split(os.pathsep)
    ):
        pytest.skip("no java on this machine")
    assert check_java().major >= 17
