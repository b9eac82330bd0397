"""A replay request to a running job: read, checked against the live query, turned into the replay's options. Pure."""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.replay_query import ReplayRequests, failure_line, read_outcome, read_request, request_replay
from spark_jobs.streaming_job import StreamingOptions, replay_options

LIVE = StreamingOptions(
    cluster=KafkaContext('127.0.0.1:9'), checkpoint=Path("/ck/infer"), input_topic="events.payments",
    query="infer", available_now=False, max_offsets_per_trigger=40, crash_after_batch=3, after_query="old",
    start_offsets={0: 5}, input_recreated="abc",
)  # fmt: skip


def test_a_request_written_is_read_back(tmp_path: Path) -> None:
    done = request_replay(tmp_path / "requests", "infer-replay", "/ck/infer-replay", ".replay")
    assert done == tmp_path / "requests" / "infer-replay.done"
    request = read_request(tmp_path / "requests" / "infer-replay.request", LIVE)
    assert (request.query, request.checkpoint, request.suffix) == ("infer-replay", "/ck/infer-replay", ".replay")
    assert read_outcome(done) is None  # not done yet


def test_the_replay_drains_from_the_start_under_its_own_name_and_checkpoint(tmp_path: Path) -> None:
    request_replay(tmp_path, "infer-replay", "/ck/r", ".replay")
    options = replay_options(LIVE, read_request(tmp_path / "infer-replay.request", LIVE))
    assert (options.query, options.checkpoint, options.available_now) == ("infer-replay", "/ck/r", True)
    assert options.input_topic == LIVE.input_topic and options.cluster == LIVE.cluster
    # none of the live query's start, crash or batch settings: a fresh query from the earliest offsets
    assert (options.max_offsets_per_trigger, options.crash_after_batch, options.after_query) == (None, None, "")
    assert (options.start_offsets, options.input_recreated) == ({}, "")


@pytest.mark.parametrize(
    ("name", "document", "field"),
    [
        ("infer.request", {"checkpoint": "/ck/r", "suffix": ".replay"}, "query"),  # the live query's transactional.ids
        ("r.request", {"checkpoint": "/ck/r", "suffix": ""}, "suffix"),  # into the live topics
        ("r.request", {"checkpoint": "/ck/infer/", "suffix": ".replay"}, "checkpoint"),  # the live query's state
        ("r.request", {"checkpoint": "/ck/r"}, "request"),
        ("r.request", {"checkpoint": 3, "suffix": ".replay"}, "request"),
    ],
)
def test_a_request_that_would_touch_the_live_query_is_refused(
    tmp_path: Path, name: str, document: dict[str, object], field: str
) -> None:
    (tmp_path / name).write_text(json.dumps(document))
    with pytest.raises(ConfigError) as refused:
        read_request(tmp_path / name, LIVE)
    assert refused.value.key == field


def test_a_failure_is_one_line_with_the_jvms_message() -> None:
    class JavaError(Exception):
        java_exception = "java.lang.IllegalStateException: Cannot start query with id 1 as another is active\n\tat"

    assert failure_line(JavaError("An error occurred while calling o253.start.")) == (
        "JavaError: java.lang.IllegalStateException: Cannot start query with id 1 as another is active"
    )
    assert failure_line(RuntimeError("a bug\nmore")) == "RuntimeError: a bug"


def test_replay_requests_without_continuous_is_refused_before_kafka(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from spark_jobs.infer.job import main

    result = CliRunner().invoke(main, ["--bootstrap", "127.0.0.1:9", "--replay-requests", str(tmp_path)])
    assert result.exit_code == 2 and "--replay-requests needs --continuous" in result.output


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda folder: folder.mkdir(mode=0o777) or folder.chmod(0o777), "writable by group or others (mode 777)"),
        (lambda folder: folder.mkdir(mode=0o770) or folder.chmod(0o770), "writable by group or others (mode 770)"),
        (lambda folder: folder.symlink_to(folder.parent / "elsewhere", target_is_directory=True), "symbolic link"),
        (lambda folder: folder.write_text("a file"), "is not a folder"),
    ],
    ids=["world-writable", "group-writable", "a symbolic link", "a file"],
)
def test_a_requests_folder_others_could_write_is_refused_before_the_job_watches_it(
    tmp_path: Path, make: Callable[[Path], object], problem: str
) -> None:
    """A request makes the job replay its whole input: a folder another user can write is not the job's own."""
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    folder = tmp_path / "requests"
    make(folder)
    watcher = ReplayRequests(folder, LIVE, run=lambda request: None)
    with pytest.raises(ConfigError, match=r"--replay-requests") as refused:
        watcher.__enter__()
    assert problem in str(refused.value) and str(folder) in str(refused.value)
    with pytest.raises(ConfigError, match=re.escape(problem)):
        request_replay(folder, "infer-replay", "/ck/r", ".replay")
    assert not list(tmp_path.glob("*/*.request"))  # nothing written there


def test_a_requests_folder_is_made_0700_and_one_of_ours_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / "new" / "requests"
    request_replay(folder, "infer-replay", "/ck/r", ".replay")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o750)  # readable by the group, writable only by us: ours
    request_replay(folder, "infer-replay-2", "/ck/r2", ".replay")
