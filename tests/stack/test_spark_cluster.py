"""A stack with a Spark standalone cluster of two workers and two Connect workers: it comes up, status lists every
process, the infer job runs on the cluster (its executors in JVMs of their own, its code from the application zip)
and decides each event exactly once, and down leaves no process behind.

One cluster for the module (the tests run in file order; the last one stops it), small data.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator

import psutil
import pytest

from demo.payments_simulation import payment_records, simulate
from demo.pipeline_io import create_topic, produce_payments, unique
from ikkai.contract.codec import default_codec
from ikkai.errors import IkkaiError
from ikkai.settings import jars_dir
from stack.local_stack import LocalStack
from stack.processes import stack_processes
from stack.spark_cluster import shared_dir, work_dir
from tests.cli.cli_runner import IKKAI, ROOT, run_ikkai
from tests.kafka_helpers import read_all

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
COMPONENTS = ["broker", "connect", "connect-2", "spark-master", *SPARK_WORKERS]
EVENTS = 300
PARTITIONS = 2
STARTING_TASK = re.compile(
    r"\[batchId = (?P<batch>\d+)\] Starting task \d+\.(?P<attempt>\d+) in stage (?P<stage>\d+)\.\d+ "
    r".*executor (?P<executor>\d+)"
)
JOINED = re.compile(r"Joined group at generation (\d+) .*leaderUrl='([^']+)'")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("cluster"), jars_dir(), spark_workers=2, connect_workers=2)
    try:
        local.up()
    except IkkaiError as exc:
        local.down()
        pytest.skip(f"the embedded stack with a Spark cluster cannot start here: {exc}")
    try:
        yield local
    finally:
        local.down()


def env_for(cluster: LocalStack) -> dict[str, str]:
    return {"IKKAI_HOME": str(cluster.home), "IKKAI_JARS_DIR": str(jars_dir())}


def test_status_lists_the_spark_cluster_and_both_connect_workers(cluster: LocalStack) -> None:
    result = run_ikkai("stack", "status", "-o", "json", env=env_for(cluster))
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert [c["name"] for c in status["components"]] == COMPONENTS
    assert all(c["healthy"] and len(c["pids"]) == 1 for c in status["components"]), status["components"]
    assert status["spark_master_url"] == cluster.spark_master_url()
    assert status["spark_master_url"].startswith("spark://127.0.0.1:")
    assert status["connect_urls"] == cluster.connect_urls()
    assert len(set(status["connect_urls"])) == 2
    # One group: each worker's last join names the same generation and the same leader.
    joins = [JOINED.findall(cluster.log_file(name).read_text())[-1] for name in ("connect", "connect-2")]
    assert joins[0] == joins[1], joins
    assert joins[0][1].rstrip("/") in status["connect_urls"]


def test_up_again_keeps_every_port(cluster: LocalStack) -> None:
    before = json.loads(cluster.state_file.read_text())
    pids = stack_processes(cluster.home)
    cluster.up()  # already running: a no-op
    after = json.loads(cluster.state_file.read_text())
    assert after["cluster_ports"] == before["cluster_ports"]
    assert stack_processes(cluster.home) == pids


def executor_pid(cluster: LocalStack, executor_id: str) -> int:
    """The pid of executor ``executor_id``'s JVM: a child of one of the workers."""
    workers = [pid for name in SPARK_WORKERS for pid in stack_processes(cluster.home).get(name, [])]
    for worker in workers:
        for child in psutil.Process(worker).children(recursive=True):
            args = child.cmdline()
            if "--executor-id" in args and args[args.index("--executor-id") + 1] == executor_id:
                return child.pid
    raise AssertionError(f"no JVM of executor {executor_id} under the workers {workers}")


def test_kill_9_of_an_executor_mid_batch_retries_its_task_on_the_other(cluster: LocalStack) -> None:
    """The infer job on the cluster (``ikkai jobs run --master spark://``, the application zip on executors of both
    workers, checkpoints in the shared folder) decides each event once while the executor running a task of batch
    2's last stage (the sink's writes) is killed as the task starts: the task is retried on another executor, whose
    producer has the same transactional.id (per application, query and partition). The kill lands before the first
    attempt produced (the test passes with --mode at-least-once too): a kill with the first attempt's transaction
    open needs a pause point in the sink (docs/running-jobs-on-a-cluster.md)."""
    bootstrap = cluster.kafka_cluster().bootstrap_servers
    name = unique("executor-kill")
    topic = create_topic(bootstrap, f"events.{name}", PARTITIONS)
    payments = payment_records(simulate(11, payments=EVENTS).payments)
    produce_payments(bootstrap, topic, payments, PARTITIONS)
    outputs = {kind: create_topic(bootstrap, f"{kind}.{name}", PARTITIONS) for kind in ("decisions", "outbox", "dlq")}
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")} | env_for(cluster)
    job = subprocess.Popen(
        [str(IKKAI), "jobs", "run", "infer", "--master", str(cluster.spark_master_url()), "--bootstrap", bootstrap,
         "--input", topic, "--decisions", outputs["decisions"], "--outbox", outputs["outbox"], "--dlq", outputs["dlq"],
         "--checkpoint", str(shared_dir(cluster.home) / name), "--query", name, "--max-offsets-per-trigger", "60"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=environment, cwd=ROOT,
    )  # fmt: skip
    assert job.stderr is not None
    stages: dict[int, list[int]] = {}  # batch -> its stages, in order
    killed: tuple[str, int] | None = None
    retried = False
    tail: list[str] = []
    try:
        for line in job.stderr:
            tail = [*tail[-200:], line]
            started = STARTING_TASK.search(line)
            if started is None:
                continue
            batch, stage, attempt, executor = (int(started["batch"]), int(started["stage"]), int(started["attempt"]),
                                               started["executor"])  # fmt: skip
            if stage not in stages.setdefault(batch, []):
                stages[batch].append(stage)
            retried |= killed is not None and attempt > 0 and executor != killed[0]
            # Batch 2's last stage is as long as batch 1's: its first task is the sink's.
            if killed is None and batch == 2 and 1 in stages and len(stages[2]) == len(stages[1]):
                pid = executor_pid(cluster, executor)
                os.kill(pid, signal.SIGKILL)
                killed = (executor, pid)
        assert job.wait(timeout=1500) == 0, "".join(tail)
    finally:
        if job.poll() is None:
            job.kill()
    assert killed is not None, f"the job never reached batch 2's last stage: {stages}"
    assert retried, f"no task was retried on another executor than {killed[0]}:\n{''.join(tail[-40:])}"
    codec = default_codec()
    decisions = [codec.decode("fraud_decision", value) for _, value in read_all(bootstrap, outputs["decisions"])]
    assert Counter(d["event_id"] for d in decisions) == Counter(str(p["event_id"]) for p in payments)
    assert read_all(bootstrap, outputs["dlq"]) == []
    # The job ran on executors of both workers, in JVMs of their own, each given the application zip.
    for worker in SPARK_WORKERS:
        stderr = [path.read_text() for path in work_dir(cluster.home, worker).glob("app-*/*/stderr")]
        assert stderr, f"{worker} launched no executor"
        assert any("/files/ikkai-app-" in text for text in stderr), f"{worker}'s executor got no application zip"


def test_down_stops_every_process(cluster: LocalStack) -> None:
    live = stack_processes(cluster.home)
    assert sorted(live) == sorted(COMPONENTS)
    pids = {pid for found in live.values() for pid in found}
    pids |= {child.pid for pid in list(pids) for child in psutil.Process(pid).children(recursive=True)}  # executors
    stopped = cluster.down()
    assert set(stopped) >= {pid for found in live.values() for pid in found}
    assert stack_processes(cluster.home) == {}
    left = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"still running after down: {left}"
    assert json.loads(cluster.state_file.read_text())["cluster_ports"], "the ports are kept for the next up"
