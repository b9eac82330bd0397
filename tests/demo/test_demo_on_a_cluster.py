"""``ikkai demo --spark-workers N --connect-workers N``: the flags reach the demo's stack, and on a Spark cluster the
live jobs are submitted to its master with their checkpoints in the folder the cluster shares. No stack is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import cli.demo
from demo.lineup import CLUSTER_JOB_SETTINGS, IKKAI, Lineup, spark_defaults
from demo.run import Demo, DemoOptions

MASTER = "spark://127.0.0.1:7077"
LINEUP = Lineup(Path("/run"), "127.0.0.1:9092", "http://127.0.0.1:8083", 2, batch=150, master=MASTER,
                shared=Path("/home/spark/shared"))  # fmt: skip


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_flags_reach_the_demo_and_its_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[DemoOptions] = []
    monkeypatch.setattr(cli.demo, "run_demo", lambda options: runs.append(options) or {})
    monkeypatch.setattr(cli.demo, "emit", lambda *args: None)
    result = CliRunner().invoke(
        cli.demo.demo, ["--home", str(tmp_path), "--spark-workers", "2", "--connect-workers", "2", "--no-chaos"]
    )
    assert result.exit_code == 1, result.output  # the stand-in report passed nothing
    [options] = runs
    assert (options.spark_workers, options.connect_workers) == (2, 2)
    stack = Demo(options).stack
    assert stack.home == tmp_path / "demo"
    assert {"spark-master", "spark-worker-1", "spark-worker-2", "connect", "connect-2"} <= set(stack.components)


def test_without_the_flags_the_demo_has_no_spark_cluster_and_one_connect_worker(tmp_path: Path) -> None:
    options = DemoOptions(home=tmp_path)
    assert (options.spark_workers, options.connect_workers) == (0, 1)
    components = set(Demo(options).stack.components)
    assert "connect" in components and not {"connect-2", "spark-master", "spark-worker-1"} & components


def test_on_a_cluster_the_live_jobs_are_submitted_to_its_master_with_shared_checkpoints() -> None:
    for (name, command), job in ((LINEUP.enrich(), "enrich"), (LINEUP.infer(), "infer")):
        assert command[:4] == [str(IKKAI), "jobs", "run", job]  # spark-submit with the application zip
        assert option(command, "--master") == MASTER
        assert option(command, "--checkpoint") == f"/home/spark/shared/{name}"
        assert "--continuous" in command and option(command, "--max-offsets-per-trigger") == "150"


def test_on_a_cluster_the_replays_stay_on_local_spark_with_fresh_checkpoints() -> None:
    for name, command in (LINEUP.enrich(replay=True), LINEUP.infer(replay=True)):
        assert "--master" not in command and command[1:3] == ["-m", f"spark_jobs.{name.removesuffix('-replay')}"]
        assert option(command, "--checkpoint") == f"/run/checkpoints/{name}"


def test_a_master_needs_the_folder_its_processes_share() -> None:
    with pytest.raises(ValueError, match="share"):
        Lineup(Path("/run"), "127.0.0.1:9092", "http://127.0.0.1:8083", 2, batch=150, master=MASTER)


def test_each_live_job_takes_one_core_of_the_cluster() -> None:
    assert spark_defaults(CLUSTER_JOB_SETTINGS) == "spark.cores.max 1\n"
