"""The chaos kit without a running stack: brokers named by node id, refusals that say what to do,
and the product path that never loads it."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from stack.errors import StackError
from stack.kit.chaos import ChaosStack, active_application_ids, command_option
from stack.shape import StackOptions


def test_a_node_id_names_its_broker_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    stack = ChaosStack(tmp_path / "home", tmp_path / "jars", StackOptions(brokers=3), progress=io.StringIO())
    assert [stack.broker_of(node) for node in (1, 2, 3)] == ["broker-1", "broker-2", "broker-3"]
    with pytest.raises(StackError, match=r"no such broker .* \(node ids 1\.\.3\)"):
        stack.broker_of(4)


def test_a_question_to_a_stack_that_never_started_says_to_start_it(tmp_path: Path) -> None:
    stack = ChaosStack(tmp_path / "home", tmp_path / "jars", progress=io.StringIO())
    with pytest.raises(StackError, match="ikkai stack up"):
        stack.leader_of("events.payments", 0)


def test_the_stack_and_its_command_never_load_the_chaos_kit() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, stack, cli.stack; print(sorted(m for m in sys.modules if m in "
         "('stack.kit', 'stack.kit.chaos', 'stack.kit.leaders', 'stack.kit.topic_io')))"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2],
    ).stdout  # fmt: skip
    assert loaded.strip() == "[]"


def test_the_masters_json_names_the_active_applications_of_a_name_by_their_ids() -> None:
    state = {
        "status": "ALIVE",
        "activeapps": [
            {"id": "app-2", "name": "ikkai-infer", "state": "RUNNING"},
            {"id": "app-3", "name": "ikkai-enrich", "state": "RUNNING"},
            {"id": "app-4", "name": "ikkai-infer-replay", "state": "WAITING"},
        ],
        "completedapps": [{"id": "app-1", "name": "ikkai-infer", "state": "KILLED"}],
    }
    assert active_application_ids(state, "ikkai-infer") == ["app-2"]
    assert active_application_ids(state, "ikkai-infer-replay") == ["app-4"]
    assert active_application_ids({"status": "ALIVE"}, "ikkai-infer") == []
    assert active_application_ids("<html>", "ikkai-infer") == []


def test_an_executors_command_line_names_its_application() -> None:
    args = ["java", "-cp", "jars/*", "org.apache.spark.executor.CoarseGrainedExecutorBackend", "--executor-id", "1",
            "--app-id", "app-20261127-0003", "--cores", "1"]  # fmt: skip
    assert command_option(args, "--app-id") == "app-20261127-0003"
    assert command_option(args, "--executor-id") == "1"
    assert command_option(["java", "--app-id"], "--app-id") is None and command_option(args, "--worker-url") is None


def test_asking_for_executors_of_a_stack_without_spark_says_to_start_one(tmp_path: Path) -> None:
    stack = ChaosStack(tmp_path / "home", tmp_path / "jars", progress=io.StringIO())
    with pytest.raises(StackError, match="--spark-workers"):
        stack.executors_of("ikkai-infer")
