"""ikkai's per-user temporary folders follow one rule: created 0700, refused when squatted, with a fix that works."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from ikkai.errors import ConfigError
from spark_jobs.sink.executor_writer_client import writers_folder


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_writers_folder_is_created_private(temp: Path) -> None:
    folder = writers_folder()
    assert folder == temp / f"ikkai-executor-writers-{os.getuid()}"
    assert os.lstat(folder).st_mode & 0o777 == 0o700


def test_a_writers_folder_squatted_by_another_user_is_refused_with_a_fix_this_user_can_do(
    temp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.getuid()
    other = real + 4242  # the folder named for that user is made by this one first: a squat
    (temp / f"ikkai-executor-writers-{other}").mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: other)
    with pytest.raises(ConfigError) as caught:
        writers_folder()
    error = caught.value
    assert error.key == str(temp / f"ikkai-executor-writers-{other}")
    assert f"belongs to uid {real}, not to this user (uid {other})" in str(error)
    assert error.fix is not None and "another user created" in error.fix and "set TMPDIR" in error.fix


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o720], ids=oct)
def test_a_writers_folder_of_this_user_that_others_can_write_is_refused(temp: Path, mode: int) -> None:
    folder = temp / f"ikkai-executor-writers-{os.getuid()}"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(ConfigError) as caught:
        writers_folder()
    assert f"is writable by group or others (mode {mode:o})" in str(caught.value)
    assert caught.value.fix is not None and f"remove {folder}" in caught.value.fix
