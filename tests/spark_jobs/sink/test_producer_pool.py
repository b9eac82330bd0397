"""The producer pool's owner files: in a folder only this user can write, refused when squatted, a write error said.

Pure: no broker. The pool's producers themselves are pinned by the sink's Kafka tests (test_commit_markers,
test_executor_writer, test_transactional_sink).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.executor_writer_client import writers_folder
from spark_jobs.sink.producer_pool import OwnerFiles, ProducerPool

KEY = ("localhost:9092", "app.query.0")


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary folder of the test's own, as ``tempfile.gettempdir()`` answers it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def squat(folder: Path) -> None:
    """``folder`` as another user would leave it for us: there first, writable by everybody."""
    folder.mkdir()
    folder.chmod(0o777)


def test_owner_files_live_in_a_private_folder_of_this_user(temp: Path) -> None:
    owners = OwnerFiles()
    token = owners.claim(KEY)
    folder = temp / f"ikkai-transactional-ids-{os.getuid()}"
    assert owners.folder == folder
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    assert [p.read_text() for p in folder.iterdir()] == [token]
    assert owners.still_owner(KEY, token)
    OwnerFiles().claim(KEY)  # another worker of this host initialised the id since
    assert not owners.still_owner(KEY, token)


def test_a_squatted_owner_folder_is_refused_with_what_to_do(temp: Path) -> None:
    folder = temp / f"ikkai-transactional-ids-{os.getuid()}"
    squat(folder)
    with pytest.raises(ConfigError) as refused:
        OwnerFiles().claim(KEY)
    message = str(refused.value)
    assert str(folder) in message
    assert "writable by group or others (mode 777)" in message
    assert "producers are reused" in message  # what whoever else writes there decides
    assert f"remove {folder}" in message  # the fix
    assert list(folder.iterdir()) == []  # nothing of ours written there


def test_a_squatted_owner_folder_is_refused_before_any_producer_exists(temp: Path) -> None:
    squat(temp / f"ikkai-transactional-ids-{os.getuid()}")
    config = SinkConfig(
        app="app", query="query", cluster=KafkaContext('localhost:1'), output_topics=("out",), partitions=1,
        order_by=("seq",), source_topic="in",
    )  # fmt: skip
    pool = ProducerPool()
    with pytest.raises(ConfigError, match="writable by group or others"):
        pool.fresh(config, config.transactional_id(0))  # no broker at localhost:1: refused before init_transactions
    assert pool.oldest_first() == []


def test_a_squatted_executor_writers_folder_is_refused_by_the_same_rule(temp: Path) -> None:
    folder = temp / f"ikkai-executor-writers-{os.getuid()}"
    squat(folder)
    with pytest.raises(ConfigError) as refused:
        writers_folder()
    assert str(folder) in str(refused.value)
    assert "writable by group or others (mode 777)" in str(refused.value)
    assert f"remove {folder}" in str(refused.value)


def test_an_owner_file_that_cannot_be_written_is_said_once_and_reuse_goes_on(
    temp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    owners = OwnerFiles()
    owners.check()
    assert owners.folder is not None
    first = owners.claim(KEY)
    blocked = next(owners.folder.iterdir())  # KEY's owner file
    blocked.unlink()
    blocked.mkdir()  # a folder where the file goes: the rename onto it fails (as a full disk would)
    token = owners.claim(KEY)
    again = owners.claim(("localhost:9092", "app.query.1"))
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1, said  # once, not per claim
    assert str(blocked) in said[0]
    assert "reused without checking it" in said[0]
    # The hint is off, not the reuse: a kept producer stays usable (a fenced one fails its transaction anyway).
    assert owners.still_owner(KEY, token)
    assert owners.still_owner(KEY, first)
    assert owners.still_owner(("localhost:9092", "app.query.1"), again)
    assert sorted(p.name for p in owners.folder.iterdir()) == [blocked.name]  # no staged file left behind
