"""A Spark standalone cluster on this machine, and the stack's Connect workers beyond the first.

``ikkai stack up --spark-workers N`` adds a Spark standalone master and N workers to the stack, started from
the jars pyspark ships (the classes ``spark-class`` runs: ``org.apache.spark.deploy.master.Master`` and
``…worker.Worker``), loopback only. Each worker launches the executors of an application in JVMs of their own,
and each executor starts its own Python workers, as on a real cluster: nothing is forked from the driver.

``--connect-workers N`` runs N Kafka Connect distributed workers in the stack's one group: the first is the
stack's ``connect`` (its port ``Ports.connect``), the others ``connect-2`` .. ``connect-N``.

Where they live, under the stack's home::

    <home>/spark/work/spark-worker-<i>/   each worker's work dir (its executors' folders, stdout and stderr)
    <home>/spark/shared/                  the folder every process of the cluster shares (checkpoints, state):
                                          a real cluster's would be on HDFS or S3
    <home>/logs/spark-master.log, spark-worker-<i>.log, connect-<i>.log

Their ports (RPC and web UI each; the UI's JSON is how readiness is checked) are chosen like the stack's
others (stack/state.py) and kept in ``stack.json`` under ``cluster_ports``. This module names what each
process runs; stack.probes asks whether it answers; the lifecycle is stack.local_stack's.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from stack.errors import StackError
from stack.stack_config import CONNECT, HOST
from stack.stack_security import private_dir

SPARK_MASTER = "spark-master"
SPARK_WORKER = "spark-worker"
MASTER_MAIN = "org.apache.spark.deploy.master.Master"
WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
UI = "-ui"  # a Spark process's web UI port is named after it: ``spark-master-ui``
SPARK_WORKER_NODE = re.compile(rf"{SPARK_WORKER}-([1-9][0-9]*)")
CONNECT_NODE = re.compile(rf"{CONNECT}-([2-9]|[1-9][0-9]+)")  # ``connect`` is worker 1
# What each worker offers its executors: one core and enough memory for one executor of the default
# spark.executor.memory (1g) plus its overhead, so two workers fit on a 2-core machine beside the stack.
WORKER_CORES = 1
WORKER_MEMORY = "1536m"
DAEMON_HEAP = "256m"  # the master's and the workers' own JVMs; executors are sized by the application


def spark_worker_components(count: int) -> tuple[str, ...]:
    return tuple(f"{SPARK_WORKER}-{i}" for i in range(1, count + 1))


def spark_components(workers: int) -> tuple[str, ...]:
    """The Spark processes of a stack with ``workers`` workers: none without workers, else the master and them."""
    return (SPARK_MASTER, *spark_worker_components(workers)) if workers else ()


def connect_components(workers: int) -> tuple[str, ...]:
    """The Connect workers of the stack's group: ``connect``, then ``connect-2`` .. ``connect-N``."""
    if workers < 1:
        raise ValueError(f"a stack needs at least one Connect worker, not {workers}")
    return (CONNECT, *(f"{CONNECT}-{i}" for i in range(2, workers + 1)))


def is_spark(component: str) -> bool:
    return component == SPARK_MASTER or SPARK_WORKER_NODE.fullmatch(component) is not None


def is_extra_connect(component: str) -> bool:
    return CONNECT_NODE.fullmatch(component) is not None


def cluster_port_roles(spark_workers: int, connect_workers: int) -> tuple[str, ...]:
    """The ports beyond ``Ports``: each Spark process's RPC and UI port, each extra Connect worker's REST port."""
    spark = [role for name in spark_components(spark_workers) for role in (name, f"{name}{UI}")]
    return (*spark, *connect_components(connect_workers)[1:])


def spark_home() -> Path:
    """The Spark that pyspark ships (its ``jars/``), the one the jobs' driver runs."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def spark_env() -> dict[str, str]:
    """The environment Spark's launcher and daemons need: where Spark is and which Scala its jars are for (what
    ``spark-class`` reads from ``load-spark-env.sh``, which pyspark does not ship)."""
    root = spark_home()
    scala = next((jar.stem.split("_")[1].split("-")[0] for jar in (root / "jars").glob("spark-core_*.jar")), "2.13")
    return {"SPARK_HOME": str(root), "SPARK_SCALA_VERSION": scala}


@functools.cache
def launcher_java_options(java: Path) -> tuple[str, ...]:
    """The JVM options Spark's launcher gives its daemons (``--add-opens`` and the like for this Java), as
    ``spark-class`` would run them; their heap is set by the stack instead."""
    root = spark_home()
    result = subprocess.run(
        [str(java), "-cp", f"{root}/jars/*", "org.apache.spark.launcher.Main", MASTER_MAIN],
        capture_output=True, timeout=60, check=False, env={**os.environ, **spark_env()},
    )  # fmt: skip
    command = [arg.strip() for arg in result.stdout.decode(errors="replace").split("\0") if arg.strip()]
    if result.returncode != 0 or MASTER_MAIN not in command:
        raise StackError(SPARK_MASTER, f"Spark's launcher failed: {result.stderr.decode(errors='replace')[-300:]}",
                         fix="check that pyspark is installed (`make setup`)")  # fmt: skip
    options = command[command.index("-cp") + 2 : command.index(MASTER_MAIN)]
    return tuple(option for option in options if not option.startswith(("-Xmx", "-Xms")))


def master_url(ports: dict[str, int]) -> str:
    return f"spark://{HOST}:{ports[SPARK_MASTER]}"


def shared_dir(home: Path) -> Path:
    """The folder every process of the cluster reads and writes (checkpoints, state): HDFS or S3 on a real one."""
    return home / "spark" / "shared"


def work_dir(home: Path, worker: str) -> Path:
    return home / "spark" / "work" / worker


@dataclass(frozen=True)
class SparkLaunch:
    """What one Spark process runs: its main class, classpath, arguments and environment."""

    main_class: str
    classpath: str
    args: list[str]
    env: dict[str, str]


def spark_launch(home: Path, component: str, ports: dict[str, int]) -> SparkLaunch:
    """The master's or worker ``component``'s process.

    Workers get ``SPARK_HOME`` (they build their executors' command lines from its jars and give their Python
    workers its ``python/lib`` zips) and a ``PATH`` whose ``python3`` is this environment's, with ikkai's
    dependencies: the cluster's Python, as a real cluster's nodes would have it installed. Every process
    binds loopback only (``SPARK_LOCAL_IP``), executors included.
    """
    root = spark_home()
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        **spark_env(),
        "SPARK_LOCAL_IP": HOST,
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
    }
    args = ["--host", HOST, "--port", str(ports[component]), "--webui-port", str(ports[f"{component}{UI}"])]
    if component == SPARK_MASTER:
        return SparkLaunch(MASTER_MAIN, f"{root}/jars/*", args, env)
    folder = work_dir(home, component)
    private_dir(folder)  # the applications' files and their executors' output
    args += ["--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--work-dir", str(folder), master_url(ports)]
    return SparkLaunch(WORKER_MAIN, f"{root}/jars/*", args, env)


def master_ui_url(ports: dict[str, int]) -> str:
    """The master's web UI, whose JSON (``/json/``) is how readiness is asked (``stack.probes.spark_answers``)."""
    return ui_url(ports, SPARK_MASTER)


def ui_url(ports: dict[str, int], component: str) -> str:
    """The web UI of the Spark master or of a worker ``component``."""
    return f"http://{HOST}:{ports[f'{component}{UI}']}"
