"""``ikkai jobs``: the spark-submit line for a cluster, what it ships, and that it really runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from click.testing import CliRunner

from cli.app import cli
from cli.jobs import job_script
from demo.payments_simulation import payment_records, simulate
from deploy.spark_kubernetes import KubernetesSubmitError
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import IkkaiError
from spark_jobs.model.fraud_model import FraudModel
from spark_jobs.session import spark_jars
from spark_jobs.shipping import build_app_zip
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique
from tests.cli.cli_runner import IKKAI
from tests.deploy.crd_schemas import SPARK_OPERATOR_CRD, validation_errors


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
            "spark://spark-master:7077",
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
    assert " --master spark://spark-master:7077 --deploy-mode client " in line
    assert "--conf spark.speculation=false" in line
    assert ",".join(jars) in line
    (app,) = dist.glob("ikkai-app-*.zip")  # one zip: the data travels inside the packages
    assert f"--py-files {app} {job_script('infer', dist)} --master spark://spark-master:7077 --partitions 6" in line
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


def test_job_scripts_are_found_in_the_package(tmp_path: Path) -> None:
    import spark_jobs.enrich
    import spark_jobs.infer

    for job, room in (("infer", spark_jobs.infer), ("enrich", spark_jobs.enrich)):
        script = job_script(job, tmp_path)
        assert script == tmp_path / "jobs" / f"{job}.py"  # named after the job: uploads and images tell them apart
        assert script.read_bytes() == Path(room.__file__).with_name("__main__.py").read_bytes()


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
        "from spark_jobs.enrich.job import TRANSFORMS_SPEC; from transforms import load_spec; "
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
    # ... read out of the zip into content-named copies in this user's folder of the temp folder (zip entries
    # are not files)
    copies = (tmp_path / "tmp" / f"ikkai-{os.getuid()}").glob("*")
    assert {p.name.split("-", 1)[1] for p in copies} >= {"schemas", "fraud"}


@pytest.mark.integration
def test_submit_execute_runs_infer_through_spark_submit(cluster: KafkaContext, tmp_path: Path) -> None:
    """The printed line is not just text: spark-submit runs it (local[2]) and the decisions are in Kafka."""
    name = unique("submit")
    payments = payment_records(simulate(7, payments=60).payments)
    source = create_topic(cluster, f"events.{name}", 2)
    produce_payments(cluster, source, payments, 2)
    decisions, outbox, dlq = (create_topic(cluster, f"{kind}.{name}", 2) for kind in ("decisions", "outbox", "dlq"))
    job_args = ["--bootstrap", cluster.bootstrap_servers, "--checkpoint", str(tmp_path / "checkpoint"), "--query", name,
                "--input", source, "--decisions", decisions, "--outbox", outbox, "--dlq", dlq]  # fmt: skip
    command = [str(IKKAI), "jobs", "submit", "infer", "--master", "local[2]", "--dist", str(tmp_path / "dist")]
    run = subprocess.run(
        [*command, "--execute", "--", *job_args], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, "\n".join(line for line in run.stderr.splitlines() if " INFO " not in line)[-4000:]
    assert "submitting: " in run.stderr and "spark-submit" in run.stderr
    codec = default_codec()
    decided = Counter(
        codec.decode("fraud_decision", value)["event_id"] for _, value in flat(by_partition(cluster, decisions))
    )
    assert decided == Counter(str(p["event_id"]) for p in payments)


def test_run_knows_only_real_jobs() -> None:
    result = CliRunner().invoke(cli, ["jobs", "run", "train-everything"])
    assert result.exit_code != 0
    assert "'enrich', 'infer'" in result.output


K8S = "k8s://https://api.example:6443"


def test_kubernetes_needs_an_image_and_a_place_for_the_files(tmp_path: Path) -> None:
    base = ["jobs", "submit", "infer", "--master", K8S, "--dist", str(tmp_path / "dist")]
    no_image = CliRunner().invoke(cli, base)
    assert isinstance(no_image.exception, KubernetesSubmitError) and no_image.exception.option == "--image"
    nowhere = CliRunner().invoke(cli, [*base, "--image", "registry/ikkai:1"])
    assert isinstance(nowhere.exception, KubernetesSubmitError) and nowhere.exception.option == "--upload-path"
    not_k8s = CliRunner().invoke(cli, ["jobs", "submit", "infer", "--master", "yarn", "--image", "registry/ikkai:1"])
    assert not_k8s.exit_code == 2 and "--image is for Kubernetes masters" in not_k8s.output


def test_kubernetes_submit_ships_nothing_a_pod_cannot_read(tmp_path: Path) -> None:
    try:
        jars = spark_jars()
    except IkkaiError as exc:
        pytest.skip(f"jars not resolved: {exc}")
    args = ["jobs", "submit", "infer", "--master", K8S, "--image", "registry/ikkai:1", "--upload-path",
            "s3a://bucket/ikkai", "--dist", str(tmp_path / "dist"), "--", "--bootstrap", "b:9092"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    tokens = shlex.split(result.stdout)
    assert tokens[tokens.index("--deploy-mode") + 1] == "cluster"  # the default on Kubernetes
    assert "spark.kubernetes.container.image=registry/ikkai:1" in tokens
    assert "spark.kubernetes.file.upload.path=s3a://bucket/ikkai" in tokens
    assert tokens[tokens.index("--jars") + 1].split(",") == [Path(jar).as_uri() for jar in jars]
    assert not [t for t in tokens[1:] if t.startswith("/")]  # no bare local path: all file:// (uploaded)
    assert not [t for t in tokens if t.startswith("spark.pyspark.driver.python")]
    assert tokens[-4:] == ["--master", K8S, "--bootstrap", "b:9092"]
    assert "install them in the image" in result.stderr


def test_kubernetes_spark_operator_format_prints_a_spark_application(tmp_path: Path) -> None:
    try:
        jars = spark_jars()
    except IkkaiError as exc:
        pytest.skip(f"jars not resolved: {exc}")
    args = ["jobs", "submit", "infer", "--master", K8S, "--image", "registry/ikkai:1", "--upload-path",
            "s3a://bucket/ikkai", "--format", "spark-operator", "--dist", str(tmp_path / "dist"), "--",
            "--bootstrap", "b:9092"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    app = yaml.safe_load(result.stdout)
    assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
    assert validation_errors(yaml.safe_load(SPARK_OPERATOR_CRD.read_text()), app) == []
    assert app["spec"]["deps"]["jars"] == [f"s3a://bucket/ikkai/{Path(jar).name}" for jar in jars]
    # the operator uploads nothing: stderr says what to copy where, one line per file the resource names
    copies = [line for line in result.stderr.splitlines() if line.startswith("copy before applying: ")]
    assert len(copies) == len(jars) + 2 and all(" -> s3a://bucket/ikkai/" in line for line in copies)
    refused = CliRunner().invoke(cli, [*args[:-3], "--execute"])
    assert refused.exit_code == 2 and "kubectl apply" in refused.output


class _KubernetesApi(BaseHTTPRequestHandler):
    """A stand-in for the Kubernetes API server on loopback: records what spark-submit creates, accepts it."""

    created: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.created.append((self.path, body))
        body.setdefault("metadata", {}).update(uid=str(len(self.created)), resourceVersion="1")
        self._reply(201, body)

    def do_GET(self) -> None:
        self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "metadata": {}})

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.integration  # runs the spark-submit pyspark ships (a JVM) against a stand-in API server
def test_spark_submit_accepts_the_kubernetes_line_uploads_the_files_and_creates_the_driver_pod(
    tmp_path: Path,
) -> None:
    """The printed line is what Spark itself takes: it uploads every file and asks for a driver pod that runs the
    image and the uploaded job script. (Only the upload folder is swapped for a local one.)"""
    try:
        spark_jars()
    except IkkaiError as exc:
        pytest.skip(f"jars not resolved: {exc}")
    _KubernetesApi.created = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KubernetesApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    master = f"k8s://http://127.0.0.1:{server.server_address[1]}"
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    try:
        printed = CliRunner().invoke(
            cli,
            ["jobs", "submit", "infer", "--master", master, "--image", "registry/ikkai:1", "--upload-path",
             "s3a://bucket/ikkai", "--dist", str(tmp_path / "dist"), "--", "--bootstrap", "b:9092"],
        )  # fmt: skip
        assert printed.exit_code == 0, printed.output
        line = shlex.split(printed.stdout)
        # The one change: a folder here instead of S3 (this machine reaches no object store).
        line[line.index("spark.kubernetes.file.upload.path=s3a://bucket/ikkai")] = (
            f"spark.kubernetes.file.upload.path={uploads.as_uri()}"
        )
        line[1:1] = ["--conf", "spark.kubernetes.submission.waitAppCompletion=false"]
        run = subprocess.run(line, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    finally:
        server.shutdown()
        server.server_close()
    uploaded = sorted(p.name for p in uploads.glob("spark-upload-*/*"))
    (app,) = (tmp_path / "dist").glob("ikkai-app-*.zip")
    assert uploaded == sorted([app.name, "infer.py", *(Path(jar).name for jar in spark_jars())]), run.stderr[-3000:]
    pods = [body for path, body in _KubernetesApi.created if path.endswith("/pods")]
    assert pods, f"spark-submit created no driver pod: {run.stderr[-3000:]}"
    (container,) = pods[0]["spec"]["containers"]
    assert container["image"] == "registry/ikkai:1"
    # The driver runs the uploaded copy of the job script, with the job's arguments.
    args = container["args"]
    script = args[args.index("org.apache.spark.deploy.PythonRunner") + 1]
    assert script.startswith(uploads.as_uri()) and script.endswith("/infer.py"), args
    assert args[-2:] == ["--bootstrap", "b:9092"]


def test_compare_prints_one_row_per_version_pair_with_its_sample() -> None:
    from dataclasses import asdict

    from cli.jobs import _comparison_text
    from spark_jobs.infer.decision_compare import compare

    def decision(event: str, version: str, action: str) -> dict[str, Any]:
        return {"event_id": event, "payment_id": f"p{event}", "model_version": version, "action": action, "score": 0.25}

    result = compare([decision("1", "live-v1", "hold"), decision("2", "live-v1", "approve")],
                     [decision("1", "cand-v2", "approve"), decision("2", "cand-v2", "approve")])  # fmt: skip
    text = _comparison_text({"live": "decisions.fraud", "shadow": "decisions.fraud.shadow", **asdict(result)})
    lines = text.splitlines()
    assert lines[1].split() == ["live-v1", "cand-v2", "2", "1"]
    assert lines[2].strip() == "event 1 payment p1: live hold (0.2500), shadow approve (0.2500)"
    assert lines[-1] == "decided by decisions.fraud only: 0; by decisions.fraud.shadow only: 0"
