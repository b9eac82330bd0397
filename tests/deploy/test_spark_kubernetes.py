"""Spark on Kubernetes: the spark-submit line and the SparkApplication name the image and never a path only
this machine has; the SparkApplication is one the Spark operator's CRD schema accepts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.spark_kubernetes import (
    JobFiles,
    KubernetesSubmitError,
    KubernetesTarget,
    files_to_upload,
    spark_application,
    submit_command,
)
from tests.deploy.crd_schemas import SPARK_OPERATOR_CRD, validation_errors

MASTER = "k8s://https://api.example:6443"
CONF = {"spark.speculation": "false", "spark.sql.session.timeZone": "UTC"}


@pytest.fixture
def files(tmp_path: Path) -> JobFiles:
    jars = (tmp_path / "jars" / "kafka-clients-3.9.2.jar", tmp_path / "jars" / "spark-sql-kafka-0-10_2.13-4.1.1.jar")
    return JobFiles(
        app_zip=tmp_path / "dist" / "ikkai-app-0123456789ab.zip", job_script=tmp_path / "infer.py", jars=jars
    )


@pytest.fixture(scope="module")
def operator_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(SPARK_OPERATOR_CRD.read_text())
    return crd


def local_only(values: list[str]) -> list[str]:
    """Values naming a file of this machine in a way a pod cannot read (no scheme, or file:// after upload)."""
    return [v for v in values if v.startswith("/") or (v.startswith("file://") and "/up/" not in v)]


def test_uploaded_files_are_file_uris_spark_submit_uploads_to_the_upload_path(files: JobFiles) -> None:
    target = KubernetesTarget(MASTER, "registry/ikkai:1", upload_path="s3a://bucket/ikkai", namespace="spark")
    line = submit_command("spark-submit", "infer", target, files, ["--bootstrap", "b:9092"], CONF)
    assert line[:7] == ["spark-submit", "--master", MASTER, "--deploy-mode", "cluster", "--name", "ikkai-infer"]
    conf = dict(line[i + 1].split("=", 1) for i, arg in enumerate(line) if arg == "--conf")
    assert conf["spark.kubernetes.container.image"] == "registry/ikkai:1"
    assert conf["spark.kubernetes.file.upload.path"] == "s3a://bucket/ikkai"
    assert conf["spark.kubernetes.namespace"] == "spark" and conf["spark.speculation"] == "false"
    assert line[line.index("--jars") + 1].split(",") == [jar.resolve().as_uri() for jar in files.jars]
    assert line[-4:] == [files.app_zip.resolve().as_uri(), files.job_script.resolve().as_uri(), "--bootstrap", "b:9092"]
    assert not [t for t in line if t.startswith("/")]  # every path is a URI spark-submit uploads


def test_files_in_the_image_are_local_uris_and_nothing_is_uploaded(files: JobFiles) -> None:
    target = KubernetesTarget(MASTER, "registry/ikkai:1", in_image="/opt/ikkai")
    line = submit_command("spark-submit", "infer", target, files, [], CONF)
    assert line[line.index("--jars") + 1] == (
        "local:///opt/ikkai/jars/kafka-clients-3.9.2.jar,local:///opt/ikkai/jars/spark-sql-kafka-0-10_2.13-4.1.1.jar"
    )
    assert line[-2:] == ["local:///opt/ikkai/ikkai-app-0123456789ab.zip", "local:///opt/ikkai/jobs/infer.py"]
    assert not [t for t in line if "upload.path" in t or "file://" in t]


def test_a_packed_python_environment_is_shipped_as_an_archive(files: JobFiles, tmp_path: Path) -> None:
    env = tmp_path / "ikkai-env.tar.gz"
    with_env = JobFiles(files.app_zip, files.job_script, files.jars, env)
    target = KubernetesTarget(MASTER, "registry/ikkai:1", upload_path="hdfs://nn/ikkai")
    line = submit_command("spark-submit", "infer", target, with_env, [], CONF)
    assert line[line.index("--archives") + 1] == f"{env.as_uri()}#ikkai-env"
    assert "spark.pyspark.python=./ikkai-env/bin/python" in line


@pytest.mark.parametrize(
    ("target", "option"),
    [
        (KubernetesTarget(MASTER, ""), "--image"),
        (KubernetesTarget(MASTER, "img"), "--upload-path"),  # cluster mode: the driver pod cannot read our files
        (KubernetesTarget(MASTER, "img", upload_path="/tmp/uploads"), "--upload-path"),
        (KubernetesTarget(MASTER, "img", upload_path="file:///tmp/uploads"), "--upload-path"),
        (KubernetesTarget(MASTER, "img", upload_path="local:///opt"), "--upload-path"),
        (KubernetesTarget(MASTER, "img", upload_path="s3a://b/p", in_image="/opt/ikkai"), "--upload-path"),
        (KubernetesTarget(MASTER, "img", in_image="opt/ikkai"), "--in-image"),
        (KubernetesTarget("yarn", "img", in_image="/opt/ikkai"), "--master"),
        (KubernetesTarget(MASTER, "img", in_image="/opt/ikkai", namespace="Spark Jobs"), "--namespace"),
    ],
)
def test_what_a_cluster_would_refuse_is_an_error_naming_the_option(
    files: JobFiles, target: KubernetesTarget, option: str
) -> None:
    with pytest.raises(KubernetesSubmitError) as caught:
        submit_command("spark-submit", "infer", target, files, [], CONF)
    assert caught.value.option == option and caught.value.fix


def test_client_mode_needs_no_upload_path(files: JobFiles) -> None:
    line = submit_command("spark-submit", "infer", KubernetesTarget(MASTER, "img"), files, [], CONF, "client")
    assert " --deploy-mode client " in " ".join(line)


@pytest.mark.parametrize("where", [{"in_image": "/opt/ikkai"}, {"upload_path": "s3a://bucket/ikkai/"}])
def test_the_spark_application_is_valid_for_the_operators_crd(
    files: JobFiles, operator_crd: dict[str, Any], where: dict[str, str]
) -> None:
    target = KubernetesTarget(MASTER, "registry/ikkai:1", namespace="spark", service_account="spark", **where)
    app = spark_application("infer", target, files, ["--bootstrap", "b:9092"], CONF, "4.1.1", executors=3)
    assert validation_errors(operator_crd, app) == []
    assert yaml.safe_load(yaml.safe_dump(app)) == app
    spec = app["spec"]
    assert (spec["type"], spec["mode"], spec["image"]) == ("Python", "cluster", "registry/ikkai:1")
    assert spec["arguments"] == ["--bootstrap", "b:9092"] and spec["executor"]["instances"] == 3
    assert app["metadata"]["namespace"] == "spark" and spec["driver"]["serviceAccount"] == "spark"
    assert spec["sparkConf"] == CONF  # the image and namespace live in spec and metadata, not twice
    named = [spec["mainApplicationFile"], *spec["deps"]["jars"], *spec["deps"]["pyFiles"]]
    assert local_only(named) == []
    scheme = "local://" if "in_image" in where else "s3a://bucket/ikkai/"
    assert all(uri.startswith(scheme) for uri in named), named
    uploads = files_to_upload(target, files)
    if "in_image" in where:
        assert uploads == []
    else:  # the operator uploads nothing: the caller copies exactly the files the resource names
        assert sorted(remote for _, remote in uploads) == sorted(named)
        assert "s3a://bucket/ikkai//" not in " ".join(named)


def test_the_operator_crd_validation_can_fail(files: JobFiles, operator_crd: dict[str, Any]) -> None:
    target = KubernetesTarget(MASTER, "registry/ikkai:1", in_image="/opt/ikkai")
    good = spark_application("infer", target, files, [], CONF, "4.1.1")
    for path, value in [
        (("spec", "type"), "Pyhton"),
        (("spec", "mode"), "local"),
        (("spec", "executor", "instances"), "2"),
        (("spec", "deps", "pyFile"), ["x.zip"]),  # misspelt: the API server would drop it
        (("spec", "restartPolicy", "type"), "Sometimes"),
    ]:
        broken = copy.deepcopy(good)
        node = broken
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        assert validation_errors(operator_crd, broken), path
    missing = copy.deepcopy(good)
    del missing["spec"]["sparkVersion"]
    assert validation_errors(operator_crd, missing) == ["spec: 'sparkVersion' is a required property"]
