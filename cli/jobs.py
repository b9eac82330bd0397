"""``ikkai jobs``: run a PySpark job as its own process, or print its spark-submit line for a cluster.

    ikkai jobs run infer [job options]      # exec `python -m spark_jobs.infer [job options]`
    ikkai jobs submit infer --master URL    # the spark-submit line (stdout); --execute runs it
                                            # (builds dist/ikkai-app-*.zip, the code and data it ships)

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

from ikkai.resources import package_path
from spark_jobs.shipping import build_app_zip

JOBS = {"enrich": "spark_jobs.enrich", "infer": "spark_jobs.infer"}


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


def job_script(job: str) -> Path:
    """The job's entry point as a file, for spark-submit: from the checkout or the installed wheel."""
    package, module = JOBS[job].rsplit(".", 1)
    return package_path(package, f"{module}.py")


def submit_command(
    job: str, master: str, job_args: tuple[str, ...], deploy_mode: str, dist: Path, python_env: Path | None = None
) -> list[str]:
    """The spark-submit line; builds (or reuses) the application zip it ships under ``dist``.

    The zip carries the data too (schemas, model), so the job needs no file arguments: wherever the
    driver and the executors run, they find the data inside the packages they import.
    """
    from spark_jobs.session import DEFAULTS, spark_jars

    app_zip = build_app_zip(dist)
    conf = {**DEFAULTS, "spark.speculation": "false"}
    if deploy_mode == "client":
        conf["spark.pyspark.driver.python"] = sys.executable  # the driver runs here, in this environment
    if python_env is not None:
        conf["spark.pyspark.python"] = "./ikkai-env/bin/python"
    elif master.startswith("local"):
        conf["spark.pyspark.python"] = sys.executable  # local executors are this machine's processes
    command = [spark_submit_binary(), "--master", master, "--deploy-mode", deploy_mode, "--name", f"ikkai-{job}"]
    command += ["--jars", ",".join(spark_jars())]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    if python_env is not None:
        command += ["--archives", f"{python_env.resolve()}#ikkai-env"]
    command += ["--py-files", str(app_zip), str(job_script(job)), "--master", master, *job_args]
    return command


@jobs.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("job", type=click.Choice(sorted(JOBS)))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--master", required=True, help="Spark master URL, e.g. k8s://https://api:6443, yarn or local[2].")
@click.option("--deploy-mode", type=click.Choice(["client", "cluster"]), default="client", show_default=True)
@click.option(
    "--dist", type=click.Path(file_okay=False, path_type=Path), default=Path("dist"), show_default=True,
    help="Where the application zip is built.",
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

    The line ships ikkai's packages with the schema catalog and the model inside them (--py-files)
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
