"""``ikkai jobs``: the spark-submit line for a cluster, what it ships, and that it really runs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from demo.payments_simulation import payment_records, simulate
from demo.pipeline_io import by_partition, create_topic, flat, produce_payments, unique
from ikkai.contract.codec import default_codec
from ikkai.errors import IkkaiError
from spark_jobs.session import spark_jars
from spark_jobs.shipping import build_app_zip, build_data_archive

IKKAI = Path(sys.executable).parent / "ikkai"


def test_submit_prints_a_spark_submit_line_with_the_pinned_jars_and_no_speculation(tmp_path: Path) -> None:
    try:
        jars = spark_jars()
    except IkkaiError as exc:
        pytest.skip(f"jars not resolved: {exc}")
    dist = tmp_path / "dist"
    result = CliRunner().invoke(
        cli,
        [
            "jobs",
            "submit",
            "infer",
            "--master",
            "k8s://https://api:6443",
            "--dist",
            str(dist),
            "--",
            "--partitions",
            "6",
        ],
    )
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert line.split()[0].endswith("spark-submit")
    assert " --master k8s://https://api:6443 --deploy-mode client " in line
    assert "--conf spark.speculation=false" in line
    assert "--conf spark.executorEnv.IKKAI_SCHEMAS_DIR=ikkai-data/schemas" in line
    assert ",".join(jars) in line
    (app,) = dist.glob("ikkai-app-*.zip")
    (data,) = dist.glob("ikkai-data-*.zip")
    assert f"--py-files {app} " in line
    assert f"--archives '{data}#ikkai-data' " in line or f"--archives {data}#ikkai-data " in line
    assert line.endswith(
        "spark_jobs/infer.py --master k8s://https://api:6443 --model=ikkai-data/models/fraud/model.json"
        " --features=ikkai-data/models/fraud/customer_features.csv --partitions 6"
    )
    assert "--python-env" in result.stderr  # a real cluster needs the dependencies: the CLI says how


def test_cluster_mode_points_the_remote_driver_at_the_shipped_schemas_and_model(tmp_path: Path) -> None:
    try:
        spark_jars()
    except IkkaiError as exc:
        pytest.skip(f"jars not resolved: {exc}")
    args = ["jobs", "submit", "infer", "--master", "yarn", "--deploy-mode", "cluster", "--dist", str(tmp_path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert "--conf spark.yarn.appMasterEnv.IKKAI_SCHEMAS_DIR=ikkai-data/schemas" in line
    assert "--model=ikkai-data/models/fraud/model.json" in line
    assert "spark.pyspark.driver.python" not in line  # the driver is not this machine's Python


def test_the_app_zip_is_importable_on_its_own_and_the_data_archive_holds_the_catalog(tmp_path: Path) -> None:
    app = build_app_zip(tmp_path / "dist")
    data = build_data_archive(tmp_path / "dist")
    assert build_app_zip(tmp_path / "dist") == app  # same checkout, same bytes, same name
    with zipfile.ZipFile(data) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "ikkai-data")
    assert "schemas/payment_event/v2.avsc" in names
    assert "models/fraud/model.json" in names
    assert not [n for n in zipfile.ZipFile(app).namelist() if "__pycache__" in n]
    # A job imports the ground floor, the jobs and the transforms: never the control plane, the stack or the demo.
    assert {n.split("/")[0] for n in zipfile.ZipFile(app).namelist()} == {"ikkai", "spark_jobs", "transforms"}
    # An executor: the packages come from the zip, the schemas from the unpacked archive (relative path).
    probe = (
        "import spark_jobs, ikkai.contract.codec as s; "
        "print(spark_jobs.__file__); print(sorted(s.default_codec().catalog.names())[:1]); "
        "from spark_jobs.enrich import TRANSFORMS_SPEC; from transforms import load_spec; "
        "print(load_spec(TRANSFORMS_SPEC).names)"  # enrich's spec and the MCC table, read out of the zip
    )
    env = {**os.environ, "PYTHONPATH": str(app), "IKKAI_SCHEMAS_DIR": "ikkai-data/schemas"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(str(app))
    assert out.stdout.splitlines()[1] != "[]"
    assert "merchant_category" in out.stdout.splitlines()[2]


@pytest.mark.integration
def test_submit_execute_runs_infer_through_spark_submit(bootstrap: str, tmp_path: Path) -> None:
    """The printed line is not just text: spark-submit runs it (local[2]) and the decisions are in Kafka."""
    name = unique("submit")
    payments = payment_records(simulate(7, payments=60).payments)
    source = create_topic(bootstrap, f"events.{name}", 2)
    produce_payments(bootstrap, source, payments, 2)
    decisions, outbox, dlq = (create_topic(bootstrap, f"{kind}.{name}", 2) for kind in ("decisions", "outbox", "dlq"))
    job_args = ["--bootstrap", bootstrap, "--checkpoint", str(tmp_path / "checkpoint"), "--query", name,
                "--input", source, "--decisions", decisions, "--outbox", outbox, "--dlq", dlq]  # fmt: skip
    command = [str(IKKAI), "jobs", "submit", "infer", "--master", "local[2]", "--dist", str(tmp_path / "dist")]
    env = {k: v for k, v in os.environ.items() if k != "IKKAI_SCHEMAS_DIR"}
    run = subprocess.run(
        [*command, "--execute", "--", *job_args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, "\n".join(line for line in run.stderr.splitlines() if " INFO " not in line)[-4000:]
    assert "submitting: " in run.stderr and "spark-submit" in run.stderr
    codec = default_codec()
    decided = Counter(
        codec.decode("fraud_decision", value)["event_id"] for _, value in flat(by_partition(bootstrap, decisions))
    )
    assert decided == Counter(str(p["event_id"]) for p in payments)


def test_run_knows_only_real_jobs() -> None:
    result = CliRunner().invoke(cli, ["jobs", "run", "train-everything"])
    assert result.exit_code != 0
    assert "'enrich', 'infer'" in result.output
