"""``ikkai jobs``: run a PySpark job as its own process, or print its spark-submit line for a cluster.

    ikkai jobs run infer [job options]      # exec `python -m spark_jobs.infer [job options]`
    ikkai jobs run infer --master spark://127.0.0.1:PORT [job options]
                                            # on a Spark standalone cluster (`ikkai stack up --spark-workers 2`):
                                            # exec the spark-submit line `submit --execute` would run
    ikkai jobs submit infer --master URL    # the spark-submit line (stdout); --execute runs it
                                            # (builds dist/ikkai-app-*.zip, the code and data it ships)
    ikkai jobs submit infer --master k8s://https://api:6443 --image IMG --upload-path s3a://b/ikkai
    ikkai jobs submit infer --master k8s://... --image IMG --in-image /opt/ikkai --format spark-operator
    ikkai jobs compare                      # live decisions against a shadow model's (infer --shadow)

``run`` replaces the CLI process with the job (exec), so signals and exit codes are the job's
own. The connector jars from ``ikkai setup`` are passed explicitly; nothing is fetched at run time.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.output import emit, output_option, say
from ikkai.contract import topics
from ikkai.contract.ids import application_name
from ikkai.resources import package_path

if TYPE_CHECKING:
    from deploy.spark_kubernetes import JobFiles, KubernetesTarget

# `run` execs the job at once: what only `submit` needs (the Kubernetes renderer, the app zip's builder, YAML)
# is imported where it is used, so that a job's start does not pay for it.

JOBS = {"enrich": "spark_jobs.enrich", "infer": "spark_jobs.infer"}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def jobs() -> None:
    """Run or submit the PySpark jobs (enrich, infer)."""


@jobs.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("job", type=click.Choice(sorted(JOBS)))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
def run(job: str, job_args: tuple[str, ...]) -> None:
    """Start JOB as its own process on the local Spark (see `python -m spark_jobs.infer --help`).

    With `--master spark://HOST:PORT` (a standalone cluster, such as `ikkai stack up --spark-workers 2` starts) the
    job goes through spark-submit instead, as `ikkai jobs submit JOB --master URL --execute` sends it: its code and
    data reach the executors in the application zip (built under dist/), never from this checkout."""
    master, rest = standalone_master(job_args)
    if master is not None:
        command = submit_command(job, master, rest, "client", Path("dist"))
        say("submitting: " + shlex.join(command))
        sys.stderr.flush()
        os.execv(command[0], command)  # noqa: S606 - pyspark's spark-submit, no shell
    command = [sys.executable, "-m", JOBS[job], *job_args]
    say("starting: " + shlex.join(command))
    sys.stderr.flush()
    os.execv(sys.executable, command)  # noqa: S606 - our own interpreter and module, no shell


def standalone_master(job_args: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """The ``spark://`` master among the job's arguments (``--master URL`` or ``--master=URL``) and the others;
    (None, the arguments) for any other master."""
    for i, arg in enumerate(job_args):
        if arg == "--master" and i + 1 < len(job_args):
            master, rest = job_args[i + 1], job_args[:i] + job_args[i + 2 :]
        elif arg.startswith("--master="):
            master, rest = arg.split("=", 1)[1], job_args[:i] + job_args[i + 1 :]
        else:
            continue
        return (master, rest) if master.startswith("spark://") else (None, job_args)
    return None, job_args


def loopback_master(master: str) -> bool:
    """A standalone master on this machine's loopback (the stack's): the driver then listens on loopback too."""
    return master.startswith(("spark://127.0.0.1:", "spark://localhost:"))


def spark_submit_binary() -> str:
    """The cluster's spark-submit if one is on PATH, else the one pyspark ships (same Spark version as the jobs)."""
    on_path = shutil.which("spark-submit")
    if on_path:
        return on_path
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "bin" / "spark-submit")


def job_script(job: str, dist: Path) -> Path:
    """The job's entry point as a file named after the job, for spark-submit: ``dist/jobs/<job>.py``.

    It is the job room's ``__main__.py`` (what ``python -m spark_jobs.<job>`` runs), copied out of the
    checkout or the wheel: the name tells the jobs apart where spark-submit uploads them, or in an image.
    """
    source = package_path(JOBS[job], "__main__.py").read_bytes()
    target = dist / "jobs" / f"{job}.py"
    if not target.is_file() or target.read_bytes() != source:
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.partial")
        staged.write_bytes(source)
        staged.replace(target)
    return target


def submit_command(
    job: str, master: str, job_args: tuple[str, ...], deploy_mode: str, dist: Path, python_env: Path | None = None
) -> list[str]:
    """The spark-submit line; builds (or reuses) the application zip it ships under ``dist``.

    The zip carries the data too (schemas, model), so the job needs no file arguments: wherever the
    driver and the executors run, they find the data inside the packages they import.
    """
    from spark_jobs.session import DEFAULTS, spark_jars
    from spark_jobs.shipping import build_app_zip

    app_zip = build_app_zip(dist)
    conf = {**DEFAULTS, "spark.speculation": "false"}
    if deploy_mode == "client":
        conf["spark.pyspark.driver.python"] = sys.executable  # the driver runs here, in this environment
    if python_env is not None:
        conf["spark.pyspark.python"] = "./ikkai-env/bin/python"
    elif master.startswith("local"):
        conf["spark.pyspark.python"] = sys.executable  # local executors are this machine's processes
    if loopback_master(master):  # executors reach the driver where it listens: loopback, as everything of the stack
        conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = "127.0.0.1"
    command = [spark_submit_binary(), "--master", master, "--deploy-mode", deploy_mode, "--name", application_name(job)]
    command += ["--jars", ",".join(spark_jars())]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    if python_env is not None:
        command += ["--archives", f"{python_env.resolve()}#ikkai-env"]
    command += ["--py-files", str(app_zip), str(job_script(job, dist)), "--master", master, *job_args]
    return command


def kubernetes_files(job: str, dist: Path, python_env: Path | None) -> JobFiles:
    from deploy.spark_kubernetes import JobFiles
    from spark_jobs.session import spark_jars
    from spark_jobs.shipping import build_app_zip

    return JobFiles(
        app_zip=build_app_zip(dist),
        job_script=job_script(job, dist),
        jars=tuple(Path(jar) for jar in spark_jars()),
        python_env=python_env,
    )


def kubernetes_submit_command(
    job: str, target: KubernetesTarget, job_args: tuple[str, ...], deploy_mode: str, dist: Path,
    python_env: Path | None = None,
) -> list[str]:  # fmt: skip
    """The spark-submit line for a ``k8s://`` master: the image, and every file uploaded or ``local://``."""
    from deploy import spark_kubernetes
    from spark_jobs.session import DEFAULTS

    target.validate(cluster_mode=deploy_mode == "cluster")
    files = kubernetes_files(job, dist, python_env)
    conf = {**DEFAULTS, "spark.speculation": "false"}
    if deploy_mode == "client":
        conf["spark.pyspark.driver.python"] = sys.executable  # the driver runs here, in this environment
    job_args = ("--master", target.master, *job_args)
    return spark_kubernetes.submit_command(spark_submit_binary(), job, target, files, job_args, conf, deploy_mode)


def spark_application(
    job: str, target: KubernetesTarget, job_args: tuple[str, ...], dist: Path, python_env: Path | None, executors: int
) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """A SparkApplication for the Spark operator, and the files to copy to the upload path first."""
    import pyspark

    from deploy import spark_kubernetes
    from spark_jobs.session import DEFAULTS

    target.validate(cluster_mode=True)
    files = kubernetes_files(job, dist, python_env)
    conf = {**DEFAULTS, "spark.speculation": "false"}
    app = spark_kubernetes.spark_application(
        job, target, files, job_args, conf, pyspark.__version__, executors=executors
    )
    return app, spark_kubernetes.files_to_upload(target, files)


@jobs.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("job", type=click.Choice(sorted(JOBS)))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--master", required=True, help="Spark master URL, e.g. k8s://https://api:6443, yarn or local[2].")
@click.option(
    "--deploy-mode", type=click.Choice(["client", "cluster"]),
    help="Where the driver runs [default: cluster for k8s://, else client].",
)  # fmt: skip
@click.option(
    "--dist", type=click.Path(file_okay=False, path_type=Path), default=Path("dist"), show_default=True,
    help="Where the application zip is built.",
)  # fmt: skip
@click.option(
    "--python-env", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A packed Python environment (venv-pack/conda-pack .tar.gz) with ikkai's dependencies, for executors.",
)  # fmt: skip
@click.option(
    "--image", help="k8s: the container image of the driver and executors (spark.kubernetes.container.image)."
)
@click.option(
    "--upload-path", metavar="URI",
    help="k8s: where the job's files are uploaded (spark.kubernetes.file.upload.path), e.g. s3a://bucket/ikkai.",
)  # fmt: skip
@click.option(
    "--in-image", metavar="DIR",
    help="k8s: the image holds the job's files under DIR (app zip, jobs/<job>.py, jars/): local:// paths.",
)  # fmt: skip
@click.option("--namespace", help="k8s: the namespace the driver and executors run in.")
@click.option("--service-account", help="k8s: the driver's service account (it creates the executor pods).")
@click.option(
    "--format", "format_", type=click.Choice(["spark-submit", "spark-operator"]), default="spark-submit",
    show_default=True, help="k8s: a spark-submit line, or a SparkApplication (sparkoperator.k8s.io/v1beta2) as YAML.",
)  # fmt: skip
@click.option(
    "--executors", type=click.IntRange(min=1), default=2, show_default=True, help="spark-operator: executors."
)
@click.option("--execute", is_flag=True, help="Run the line instead of printing it.")
def submit(
    job: str, job_args: tuple[str, ...], master: str, deploy_mode: str | None, dist: Path, python_env: Path | None,
    image: str | None, upload_path: str | None, in_image: str | None, namespace: str | None,
    service_account: str | None, format_: str, executors: int, execute: bool,
) -> None:  # fmt: skip
    """Print (or --execute) the spark-submit line for JOB; arguments after `--` go to the job.

    The line ships ikkai's packages with the schema catalog and the model inside them (--py-files)
    and the pinned Kafka connector jars (--jars). Executors also need ikkai's Python dependencies:
    pass --python-env, or install them in the cluster's Python (on Kubernetes: in the image).

    On Kubernetes (--master k8s://...) the line names the --image, and every file is uploaded by
    spark-submit to --upload-path or read from the image (--in-image); --format spark-operator prints
    a SparkApplication for the Kubeflow Spark operator instead.
    """
    kubernetes = master.startswith("k8s://")
    mode = deploy_mode or ("cluster" if kubernetes else "client")
    if kubernetes or format_ == "spark-operator":
        import yaml

        from deploy.spark_kubernetes import KubernetesTarget

        target = KubernetesTarget(
            master=master, image=image or "", upload_path=upload_path, in_image=in_image, namespace=namespace,
            service_account=service_account,
        )  # fmt: skip
        if format_ == "spark-operator":
            if execute:
                raise click.UsageError("--execute runs spark-submit; apply a SparkApplication with kubectl apply -f")
            app, uploads = spark_application(job, target, job_args, dist, python_env, executors)
            for local, remote in uploads:
                say(f"copy before applying: {local} -> {remote}")
            click.echo(yaml.safe_dump(app, sort_keys=False, width=1000), nl=False)
            return
        command = kubernetes_submit_command(job, target, job_args, mode, dist, python_env)
    else:
        for name, value in (("--image", image), ("--upload-path", upload_path), ("--in-image", in_image)):
            if value:
                raise click.UsageError(f"{name} is for Kubernetes masters (k8s://...)")
        command = submit_command(job, master, job_args, mode, dist, python_env)
    if python_env is None and not master.startswith("local"):
        where = "install them in the image or pass --python-env" if kubernetes else "see --python-env"
        say(f"note: executors need ikkai's dependencies (pyproject.toml); {where}")
    if not execute:
        click.echo(shlex.join(command))
        return
    say("submitting: " + shlex.join(command))
    sys.exit(subprocess.call(command))


@jobs.command()
@click.option("--bootstrap", help="Kafka bootstrap servers [default: IKKAI_BOOTSTRAP_SERVERS, else the local stack].")
@click.option("--live", default=topics.DECISIONS_FRAUD, show_default=True, help="The live decisions topic.")
@click.option("--shadow", help="The shadow model's decisions topic [default: <live>.shadow].")
@click.option("--sample", type=click.IntRange(min=0), default=5, show_default=True, help="Differences shown per pair.")
@output_option
def compare(bootstrap: str | None, live: str, shadow: str | None, sample: int, output: str) -> None:
    """Compare a shadow model's decisions (infer --shadow) with the live ones, per model version pair.

    Both topics are read with read_committed up to their end now; events are matched by event_id.
    """
    from dataclasses import asdict

    from ikkai.contract.wire_format import environment_codec
    from spark_jobs.infer.decision_compare import compare as compare_decisions
    from spark_jobs.infer.decision_compare import read_decisions
    from spark_jobs.streaming_options import kafka_cluster

    servers = kafka_cluster("compare", bootstrap)
    shadow = shadow or f"{live}.shadow"
    codec = environment_codec()
    result = compare_decisions(read_decisions(servers, live, codec), read_decisions(servers, shadow, codec), sample)
    emit({"live": live, "shadow": shadow, **asdict(result)}, output, _comparison_text)


def _comparison_text(data: dict[str, Any]) -> str:
    lines = [f"{'LIVE VERSION':<28} {'SHADOW VERSION':<28} {'BOTH DECIDED':>12} {'DIFFER':>8}"]
    for pair in data["pairs"]:
        lines.append(f"{pair['live_version']:<28} {pair['shadow_version']:<28} {pair['both']:>12} {pair['differ']:>8}")
        for d in pair["sample"]:
            lines.append(
                f"  event {d['event_id']} payment {d['payment_id']}: live {d['live_action']} "
                f"({d['live_score']:.4f}), shadow {d['shadow_action']} ({d['shadow_score']:.4f})"
            )
    lines.append(
        f"decided by {data['live']} only: {data['live_only']}; by {data['shadow']} only: {data['shadow_only']}"
    )
    return "\n".join(lines)
