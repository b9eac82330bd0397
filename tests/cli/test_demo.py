"""``ikkai demo --kills``: the kinds only a Spark cluster has are refused in one line without one. No stack starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import cli.demo
from demo.chaos import KILL_EXECUTOR, KILL_SPARK_WORKER
from demo.run import DemoOptions


def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, list[DemoOptions]]:
    runs: list[DemoOptions] = []
    monkeypatch.setattr(cli.demo, "run_demo", lambda options: runs.append(options) or {"passed": True})
    monkeypatch.setattr(cli.demo, "emit", lambda *args: None)
    result = CliRunner().invoke(cli.demo.demo, ["--home", str(tmp_path), *args])
    return result.exit_code, result.output, runs


@pytest.mark.parametrize(
    ("kills", "workers", "named"),
    [("executor=2", "0", "executor kills"), ("spark-worker=1", "1", "spark-worker kills"),
     ("executor=1,spark-worker=1", "1", "executor and spark-worker kills")],
)  # fmt: skip
def test_executor_and_spark_worker_kills_without_two_spark_workers_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kills: str, workers: str, named: str
) -> None:
    code, output, runs = invoke(tmp_path, monkeypatch, "--kills", kills, "--spark-workers", workers)
    assert code == 2 and not runs
    assert f"{named} need --spark-workers 2 or more" in " ".join(output.split())
    assert f"this run has {workers}" in " ".join(output.split())


def test_with_two_spark_workers_the_cluster_kinds_reach_the_soak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, output, runs = invoke(tmp_path, monkeypatch, "--kills", "executor=10,spark-worker=3", "--spark-workers", "2")
    assert code == 0, output
    [options] = runs
    assert dict(options.kills) == {KILL_EXECUTOR: 10, KILL_SPARK_WORKER: 3} and options.spark_workers == 2
