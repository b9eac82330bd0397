"""``ikkai jobs``: the spark-submit line for a cluster, what it ships, and that it really runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from cli.jobs import job_script
from demo.payments_simulation import payment_records, simulate
from demo.pipeline_io import by_partition, create_topic, flat, produce_payments, unique
from ikkai.contract.codec import default_codec
from ikkai.errors import IkkaiError
from spark_jobs.model.fraud_model import FraudModel
from spark_jobs.session import spark_jars
from spark_jobs.shipping import build_app_zip
from tests.cli.cli_runner import IKKAI


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
    assert ",".join(jars) in line
    (app,) = dist.glob("ikkai-app-*.zip")  # one zip: the data travels inside the packages
    assert f"--py-files {app} {job_script('infer')} --master k8s://https://api:6443 --partitions 6" in line
    assert line.endswith("--partitions 6")
    assert "--archives" not in line and "--model" not in line  # nothing to unpack, no file to point the job at
    assert "--python-env" in result.stderr  # a real cluster needs the dependencies: the CLI says how


def test_cluster_mode_leaves_the_remote_driver_its_own_python(tmp_path: Path) -> None:
    try:
        spark_jars()
    except IkkaiError as exc:
        pytest.skip(f"jars not resolved: {exc}")
    env = tmp_path / "ikkai-env.tar.gz"
    env.write_bytes(b"")
    args = ["jobs", "submit", "infer", "--master", "yarn", "--deploy-mode", "cluster", "--dist", str(tmp_path / "dist"),
            "--python-env", str(env)]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert " --deploy-mode cluster " in line
    assert "spark.pyspark.driver.python" not in line  # the driver is not this machine's Python
    tokens = shlex.split(line)
    assert tokens[tokens.index("--archives") + 1] == f"{env}#ikkai-env"  # unpacked as ./ikkai-env on every node
    assert "spark.pyspark.python=./ikkai-env/bin/python" in tokens


def test_job_scripts_are_found_in_the_package() -> None:
    import spark_jobs.enrich
    import spark_jobs.infer

    assert job_script("infer") == Path(spark_jobs.infer.__file__)
    assert job_script("enrich") == Path(spark_jobs.enrich.__file__)


def test_the_app_zip_carries_the_data_and_runs_on_its_own(tmp_path: Path) -> None:
    app = build_app_zip(tmp_path / "dist")
    assert build_app_zip(tmp_path / "dist") == app  # same code, same bytes, same name
    names = zipfile.ZipFile(app).namelist()
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # A job imports the ground floor, the jobs and the transforms: never the control plane, the stack or the demo.
    assert {n.split("/")[0] for n in names} == {"ikkai", "spark_jobs", "transforms"}
    # The data the packages read ships inside them: every schema version and the model's files.
    catalog = default_codec().catalog
    shipped = {
        f"ikkai/contract/schemas/{v.name}/v{v.version}.avsc" for n in catalog.names() for v in catalog.versions(n)
    }
    assert shipped <= set(names)
    model_dir = "spark_jobs/model/artifacts/fraud/"
    assert {model_dir + "model.json", model_dir + "customer_features.csv"} <= set(names)
    # An executor: packages, schemas, model and transform spec all come out of the zip, with no other file at hand.
    probe = (
        "import json, spark_jobs, ikkai.contract.codec as s; "
        "from spark_jobs.model.fraud_model import FraudModel, load_snapshots; "
        "from spark_jobs.enrich import TRANSFORMS_SPEC; from transforms import load_spec; "
        "print(json.dumps({'package': spark_jobs.__file__, 'schemas': s.default_codec().catalog.names(), "
        "'model': FraudModel.load().version, 'snapshots': len(load_snapshots()), "
        "'transforms': list(load_spec(TRANSFORMS_SPEC).names)}))"  # enrich's spec and the MCC table
    )
    env = {**os.environ, "PYTHONPATH": str(app), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("{"), out.stdout + out.stderr
    seen = json.loads(out.stdout)
    assert seen["package"].startswith(str(app))
    assert seen["schemas"] == catalog.names()
    assert seen["model"] == FraudModel.load().version
    assert seen["snapshots"] > 0
    assert "merchant_category" in seen["transforms"]
    # ... read out of the zip into content-named copies in the temp folder (zip entries are not files)
    assert {p.name.split("-", 2)[2] for p in (tmp_path / "tmp").glob("ikkai-*")} >= {"schemas", "fraud"}


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
    run = subprocess.run(
        [*command, "--execute", "--", *job_args], cwd=tmp_path, capture_output=True, text=True, timeout=600
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
