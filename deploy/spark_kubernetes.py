"""Spark on Kubernetes: a job as a ``spark-submit`` line for a ``k8s://`` master, or as a ``SparkApplication``
for the Kubeflow Spark operator (``sparkoperator.k8s.io/v1beta2``). Pure: it only builds text and data.

A pod on the cluster cannot read a path on the submitting machine, so what the job ships (the
application zip, the job script, the Kafka connector jars, an optional packed Python environment)
is referenced in one of two ways, never as a bare local path:

- **uploaded**: ``--upload-path s3a://bucket/prefix`` (any Hadoop file system the cluster's Spark can
  reach: ``s3a``, ``hdfs``, ``gs``, ``abfs``…). ``spark-submit`` in cluster mode uploads the files it
  is given as ``file://`` paths to ``spark.kubernetes.file.upload.path`` and hands the driver their
  uploaded URIs. The operator cannot upload (it runs ``spark-submit`` inside the cluster), so a
  ``SparkApplication`` names the files under the upload path and the caller copies them there first
  (``files_to_upload``).
- **in the image**: ``--in-image /opt/ikkai``: the container image holds them, referenced as
  ``local:///opt/ikkai/<app zip>``, ``local:///opt/ikkai/jobs/<job>.py`` and
  ``local:///opt/ikkai/jars/<jar>`` (docs/kubernetes.md shows the Dockerfile).

The image (``spark.kubernetes.container.image``) runs the driver and the executors: Spark 4 with
Python 3.11 and ikkai's Python dependencies, or a packed environment shipped with ``--python-env``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ikkai.contract.ids import application_name
from ikkai.errors import IkkaiError

OPERATOR_API_VERSION = "sparkoperator.k8s.io/v1beta2"
PYTHON_ENV_ALIAS = "ikkai-env"
_REMOTE = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://\S+$")
_LOCAL_SCHEMES = ("file", "local")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class KubernetesSubmitError(IkkaiError):
    """The options cannot make a submission a Kubernetes cluster accepts."""

    def __init__(self, option: str, problem: str, fix: str) -> None:
        super().__init__(f"{option}: {problem}", fix=fix)
        self.option = option
        self.problem = problem


@dataclass(frozen=True)
class KubernetesTarget:
    """Where and how the job runs on Kubernetes."""

    master: str  # k8s://https://host:port
    image: str
    upload_path: str | None = None  # a Hadoop file system URI the driver pod can read
    in_image: str | None = None  # an absolute folder inside the image
    namespace: str | None = None
    service_account: str | None = None

    def validate(self, *, cluster_mode: bool = True) -> None:
        if not self.master.startswith("k8s://") or len(self.master) <= len("k8s://"):
            raise KubernetesSubmitError(
                "--master", f"{self.master!r} is not a k8s:// URL", "e.g. k8s://https://api:6443"
            )
        if not self.image or any(c.isspace() for c in self.image):
            raise KubernetesSubmitError(
                "--image",
                "Spark on Kubernetes needs the container image its driver and executors run",
                "pass --image REGISTRY/IMAGE:TAG (Spark 4 with Python 3.11 and ikkai's dependencies)",
            )
        if self.upload_path and self.in_image:
            raise KubernetesSubmitError(
                "--upload-path", "and --in-image both say where the job's files are", "pass one of them"
            )
        if self.upload_path is not None:
            match = _REMOTE.match(self.upload_path)
            if not match or match.group("scheme") in _LOCAL_SCHEMES:
                raise KubernetesSubmitError(
                    "--upload-path",
                    f"{self.upload_path!r} is not a remote file system URI: the driver pod cannot read it",
                    "e.g. --upload-path s3a://bucket/ikkai/uploads (or hdfs://, gs://, abfs://)",
                )
        if self.in_image is not None and not PurePosixPath(self.in_image).is_absolute():
            raise KubernetesSubmitError(
                "--in-image",
                f"{self.in_image!r} is not an absolute path inside the image",
                "e.g. --in-image /opt/ikkai",
            )
        if cluster_mode and not (self.upload_path or self.in_image):
            raise KubernetesSubmitError(
                "--upload-path",
                "in cluster mode the driver runs in a pod and cannot read this machine's files",
                "pass --upload-path s3a://bucket/prefix (spark-submit uploads them) or --in-image DIR "
                "(the image holds them)",
            )
        if self.namespace is not None and not _NAME.match(self.namespace):
            raise KubernetesSubmitError("--namespace", f"{self.namespace!r} is not a namespace name", "e.g. spark")


@dataclass(frozen=True)
class JobFiles:
    """What a job ships, as files on this machine."""

    app_zip: Path
    job_script: Path
    jars: tuple[Path, ...]
    python_env: Path | None = None


def _image_path(target: KubernetesTarget, *parts: str) -> str:
    assert target.in_image is not None
    return "local://" + str(PurePosixPath(target.in_image, *parts))


def _submit_uri(path: Path) -> str:
    """A file spark-submit uploads to spark.kubernetes.file.upload.path: an absolute file:// URI."""
    return path.resolve().as_uri()


def _uploaded_uri(target: KubernetesTarget, path: Path) -> str:
    assert target.upload_path is not None
    return f"{target.upload_path.rstrip('/')}/{path.name}"


def shipped_uris(target: KubernetesTarget, files: JobFiles, *, operator: bool) -> dict[str, Any]:
    """The URIs the driver is given: ``local://`` in the image, or uploaded (by spark-submit or beforehand)."""
    if target.in_image:
        return {
            "app": _image_path(target, files.app_zip.name),
            "script": _image_path(target, "jobs", files.job_script.name),
            "jars": [_image_path(target, "jars", jar.name) for jar in files.jars],
            "env": _image_path(target, files.python_env.name) if files.python_env else None,
        }
    where = (lambda p: _uploaded_uri(target, p)) if operator else _submit_uri
    return {
        "app": where(files.app_zip),
        "script": where(files.job_script),
        "jars": [where(jar) for jar in files.jars],
        "env": where(files.python_env) if files.python_env else None,
    }


def files_to_upload(target: KubernetesTarget, files: JobFiles) -> list[tuple[Path, str]]:
    """For a ``SparkApplication`` with an upload path: (local file, URI it must be copied to)."""
    if target.in_image or not target.upload_path:
        return []
    local = [files.app_zip, files.job_script, *files.jars, *([files.python_env] if files.python_env else [])]
    return [(path, _uploaded_uri(target, path)) for path in local]


def kubernetes_conf(target: KubernetesTarget, base_conf: Mapping[str, str], python_env: bool) -> dict[str, str]:
    conf = {**base_conf, "spark.kubernetes.container.image": target.image}
    if target.upload_path and not target.in_image:
        conf["spark.kubernetes.file.upload.path"] = target.upload_path
    if target.namespace:
        conf["spark.kubernetes.namespace"] = target.namespace
    if target.service_account:
        conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = target.service_account
    if python_env:
        conf["spark.pyspark.python"] = f"./{PYTHON_ENV_ALIAS}/bin/python"
    return conf


def submit_command(
    spark_submit: str,
    job: str,
    target: KubernetesTarget,
    files: JobFiles,
    job_args: Sequence[str],
    base_conf: Mapping[str, str],
    deploy_mode: str = "cluster",
) -> list[str]:
    """The ``spark-submit`` line for a ``k8s://`` master; every shipped file is uploaded or ``local://``."""
    target.validate(cluster_mode=deploy_mode == "cluster")
    uris = shipped_uris(target, files, operator=False)
    conf = kubernetes_conf(target, base_conf, files.python_env is not None)
    command = [spark_submit, "--master", target.master, "--deploy-mode", deploy_mode, "--name", application_name(job)]
    command += ["--jars", ",".join(uris["jars"])]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    if uris["env"]:
        command += ["--archives", f"{uris['env']}#{PYTHON_ENV_ALIAS}"]
    command += ["--py-files", uris["app"], uris["script"], *job_args]
    return command


def spark_application(
    job: str,
    target: KubernetesTarget,
    files: JobFiles,
    job_args: Sequence[str],
    base_conf: Mapping[str, str],
    spark_version: str,
    *,
    executors: int = 2,
) -> dict[str, Any]:
    """A ``SparkApplication`` for the Kubeflow Spark operator: cluster mode, the same files and settings."""
    target.validate(cluster_mode=True)
    uris = shipped_uris(target, files, operator=True)
    conf = kubernetes_conf(target, base_conf, files.python_env is not None)
    for key in ("spark.kubernetes.container.image", "spark.kubernetes.namespace", "spark.kubernetes.file.upload.path"):
        conf.pop(key, None)  # spec.image and metadata.namespace say it; the operator uploads nothing
    conf.pop("spark.kubernetes.authenticate.driver.serviceAccountName", None)  # spec.driver.serviceAccount
    metadata: dict[str, Any] = {"name": application_name(job), "labels": {"app.kubernetes.io/managed-by": "ikkai"}}
    if target.namespace:
        metadata["namespace"] = target.namespace
    driver: dict[str, Any] = {"cores": 1, "memory": "1g"}
    if target.service_account:
        driver["serviceAccount"] = target.service_account
    deps: dict[str, Any] = {"jars": uris["jars"], "pyFiles": [uris["app"]]}
    if uris["env"]:
        deps["archives"] = [f"{uris['env']}#{PYTHON_ENV_ALIAS}"]
    spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": target.image,
        "sparkVersion": spark_version,
        "mainApplicationFile": uris["script"],
        "arguments": list(job_args),
        "deps": deps,
        "sparkConf": dict(conf),
        # A restarted driver resumes exactly once: the transactional sink fences the old attempt.
        "restartPolicy": {
            "type": "OnFailure",
            "onFailureRetries": 3,
            "onFailureRetryInterval": 10,
            "onSubmissionFailureRetries": 3,
            "onSubmissionFailureRetryInterval": 20,
        },
        "driver": driver,
        "executor": {"instances": executors, "cores": 1, "memory": "2g"},
    }
    return {"apiVersion": OPERATOR_API_VERSION, "kind": "SparkApplication", "metadata": metadata, "spec": spec}
