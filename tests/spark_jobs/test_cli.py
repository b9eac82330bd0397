"""``ikkai jobs``: the spark-submit line for a cluster."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from deploy.cli import cli
from ikkai.errors import IkkaiError
from spark_jobs.session import spark_jars


def test_submit_prints_a_spark_submit_line_with_the_pinned_jars_and_no_speculation() -> None:
    try:
        jars = spark_jars()
    except IkkaiError as exc:
        pytest.skip(f"jars not resolved: {exc}")
    result = CliRunner().invoke(
        cli, ["jobs", "submit", "infer", "--master", "k8s://https://api:6443", "--", "--partitions", "6"]
    )
    assert result.exit_code == 0, result.output
    line = result.output.strip()
    assert line.startswith("spark-submit --master k8s://https://api:6443 ")
    assert "--conf spark.speculation=false" in line
    assert ",".join(jars) in line
    assert line.endswith("spark_jobs/infer.py --master k8s://https://api:6443 --partitions 6")


def test_run_knows_only_real_jobs() -> None:
    result = CliRunner().invoke(cli, ["jobs", "run", "train-everything"])
    assert result.exit_code != 0
    assert "infer" in result.output
