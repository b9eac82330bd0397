"""``ikkai jobs``: run a PySpark job as its own process, or print its spark-submit line for a cluster.

    ikkai jobs run infer [job options]      # exec `python -m spark_jobs.infer [job options]`
    ikkai jobs submit infer --master URL    # the spark-submit line (stdout); --execute runs it

``run`` replaces the CLI process with the job (exec), so signals and exit codes are the job's
own. The connector jars from ``ikkai setup`` are passed explicitly; nothing is fetched at run time.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click

from spark_jobs.fraud_model import FEATURES_PATH, MODEL_PATH

JOBS = {"infer": "spark_jobs.infer"}
REPO = Path(__file__).resolve().parent.parent


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def jobs() -> None:
    """Run or submit the PySpark jobs (infer)."""


@jobs.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("job", type=click.Choice(sorted(JOBS)))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
def run(job: str, job_args: tuple[str, ...]) -> None:
    """Start JOB as its own process on the local Spark (see `python -m spark_jobs.infer --help`)."""
    command = [sys.executable, "-m", JOBS[job], *job_args]
    click.echo("starting: " + shlex.join(command), err=True)
    sys.stderr.flush()
    os.execv(sys.executable, command)  # noqa: S606 - our own interpreter and module, no shell


def submit_command(job: str, master: str, job_args: tuple[str, ...], deploy_mode: str) -> list[str]:
    from spark_jobs.session import DEFAULTS, spark_jars

    conf = {**DEFAULTS, "spark.speculation": "false"}
    command = ["spark-submit", "--master", master, "--deploy-mode", deploy_mode, "--name", f"ikkai-{job}"]
    command += ["--jars", ",".join(spark_jars())]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += ["--files", f"{MODEL_PATH},{FEATURES_PATH}"]
    command += ["--py-files", str(REPO / "dist" / "ikkai.zip")]
    command += [str(REPO / "spark_jobs" / f"{job}.py"), "--master", master, *job_args]
    return command


@jobs.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("job", type=click.Choice(sorted(JOBS)))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--master", required=True, help="Spark master URL, e.g. k8s://https://api:6443 or yarn.")
@click.option("--deploy-mode", type=click.Choice(["client", "cluster"]), default="client", show_default=True)
@click.option("--execute", is_flag=True, help="Run the line instead of printing it.")
def submit(job: str, job_args: tuple[str, ...], master: str, deploy_mode: str, execute: bool) -> None:
    """Print the spark-submit line for JOB on a cluster (ship the ikkai package as dist/ikkai.zip)."""
    command = submit_command(job, master, job_args, deploy_mode)
    if not execute:
        click.echo(shlex.join(command))
        return
    sys.exit(subprocess.call(command))
