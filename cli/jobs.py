"""``ikkai jobs``: run a PySpark job as its own process, or print its spark-submit line for a cluster.

    ikkai jobs run infer [job options]      # exec `python -m spark_jobs.infer [job options]`
    ikkai jobs submit infer --master URL    # the spark-submit line (stdout); --execute runs it
                                            # (builds dist/ikkai-app-*.zip and dist/ikkai-data-*.zip it ships)

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

import click

from ikkai.contract.codec import SCHEMAS_VAR
from ikkai.resources import DATA_ALIAS, SHIPPED_SCHEMAS
from spark_jobs.shipping import build_app_zip, build_data_archive

JOBS = {"enrich": "spark_jobs.enrich", "infer": "spark_jobs.infer"}
REPO = Path(__file__).resolve().parent.parent
SHIPPED_ARGS = {  # job options that name files: point them at the copies in the data archive
    "infer": (f"--model={DATA_ALIAS}/models/fraud/model.json",
              f"--features={DATA_ALIAS}/models/fraud/customer_features.csv"),
}  # fmt: skip


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def jobs() -> None:
    """Run or submit the PySpark jobs (enrich, infer)."""


@jobs.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("job", type=click.Choice(sorted(JOBS)))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
def run(job: str, job_args: tuple[str, ...]) -> None:
    """Start JOB as its own process on the local Spark (see `python -m spark_jobs.infer --help`)."""
    command = [sys.executable, "-m", JOBS[job], *job_args]
    click.echo("starting: " + shlex.join(command), err=True)
    sys.stderr.flush()
    os.execv(sys.executable, command)  # noqa: S606 - our own interpreter and module, no shell


def spark_submit_binary() -> str:
    """The cluster's spark-submit if one is on PATH, else the one pyspark ships (same Spark version as the jobs)."""
    on_path = shutil.which("spark-submit")
    if on_path:
        return on_path
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "bin" / "spark-submit")


def submit_command(
    job: str, master: str, job_args: tuple[str, ...], deploy_mode: str, dist: Path, python_env: Path | None = None
) -> list[str]:
    """The spark-submit line; builds (or reuses) the application zip and the data archive it ships under ``dist``."""
    from spark_jobs.session import DEFAULTS, spark_jars

    app_zip, data = build_app_zip(dist), build_data_archive(dist)
    schemas = SHIPPED_SCHEMAS
    conf = {**DEFAULTS, "spark.speculation": "false", f"spark.executorEnv.{SCHEMAS_VAR}": schemas}
    archives = [f"{data}#{DATA_ALIAS}"]
    if deploy_mode == "client":
        conf["spark.pyspark.driver.python"] = sys.executable  # the driver runs here, in this environment
    else:  # the driver runs on the cluster too
        conf["spark.kubernetes.driverEnv." + SCHEMAS_VAR] = schemas
        conf["spark.yarn.appMasterEnv." + SCHEMAS_VAR] = schemas
    # The driver imports ikkai from the zip, so "next to the package" is inside it: name the shipped copies.
    job_args = (*SHIPPED_ARGS.get(job, ()), *job_args)
    if python_env is not None:
        archives.append(f"{python_env.resolve()}#ikkai-env")
        conf["spark.pyspark.python"] = "./ikkai-env/bin/python"
    elif master.startswith("local"):
        conf["spark.pyspark.python"] = sys.executable  # local executors are this machine's processes
    command = [spark_submit_binary(), "--master", master, "--deploy-mode", deploy_mode, "--name", f"ikkai-{job}"]
    command += ["--jars", ",".join(spark_jars())]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += ["--archives", ",".join(archives), "--py-files", str(app_zip)]
    command += [str(REPO / "spark_jobs" / f"{job}.py"), "--master", master, *job_args]
    return command


@jobs.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("job", type=click.Choice(sorted(JOBS)))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--master", required=True, help="Spark master URL, e.g. k8s://https://api:6443, yarn or local[2].")
@click.option("--deploy-mode", type=click.Choice(["client", "cluster"]), default="client", show_default=True)
@click.option(
    "--dist", type=click.Path(file_okay=False, path_type=Path), default=Path("dist"), show_default=True,
    help="Where the application zip and the data archive are built.",
)  # fmt: skip
@click.option(
    "--python-env", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A packed Python environment (venv-pack/conda-pack .tar.gz) with ikkai's dependencies, for executors.",
)  # fmt: skip
@click.option("--execute", is_flag=True, help="Run the line instead of printing it.")
def submit(
    job: str, job_args: tuple[str, ...], master: str, deploy_mode: str, dist: Path, python_env: Path | None,
    execute: bool,
) -> None:  # fmt: skip
    """Print (or --execute) the spark-submit line for JOB; arguments after `--` go to the job.

    The line ships ikkai's packages (--py-files), the schema catalog and the model (--archives)
    and the pinned Kafka connector jars (--jars). Executors also need ikkai's Python dependencies:
    pass --python-env, or install them in the cluster's Python.
    """
    command = submit_command(job, master, job_args, deploy_mode, dist, python_env)
    if python_env is None and not master.startswith("local"):
        click.echo("note: executors need ikkai's dependencies (pyproject.toml); see --python-env", err=True)
    if not execute:
        click.echo(shlex.join(command))
        return
    click.echo("submitting: " + shlex.join(command), err=True)
    sys.exit(subprocess.call(command))
