"""A stack with a Spark standalone cluster of two workers and two Connect workers: it comes up, status lists every
process, the infer job runs on the cluster (its executors in JVMs of their own, its code from the application zip)
and decides each event exactly once, with an executor killed mid-batch, with a zombie first attempt whose
transaction is open while its retry commits on the other worker, with a Spark worker killed under an open
transaction, and with the driver killed while a frozen executor's write holds its transaction open (a new driver on
the same checkpoint fences it), and down leaves no process behind.

One cluster for the module (the tests run in file order; the last one stops it), small data.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import psutil
import pytest

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.errors import IkkaiError
from ikkai.settings import jars_dir
from spark_jobs.sink.commit_markers import commits_topic_for, forget_clusters, read_markers
from spark_jobs.sink.commit_pause import PAUSE_BEFORE_COMMIT
from stack.kit.chaos import EXECUTOR_ID, command_option, executor_jvms
from stack.kit.topic_io import create_topic, produce_payments, read_all, unique
from stack.local_stack import LocalStack
from stack.processes import stack_processes
from stack.shape import StackOptions
from stack.spark_cluster import shared_dir, work_dir
from tests.cli.cli_runner import IKKAI, ROOT, run_ikkai

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
    local = LocalStack(tmp_path_factory.mktemp("cluster"), jars_dir(), StackOptions(spark_workers=2, connect_workers=2))
    try:
        local.up()
    except IkkaiError as exc:
        local.down()
        pytest.skip(f"the embedded stack with a Spark cluster cannot start here: {exc}")
    try:
        yield local
    finally:
        forget_clusters()  # read_markers' cached admin client would log refused connections for the session
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
    for executor in executor_jvms(cluster):
        if command_option(executor.cmdline(), EXECUTOR_ID) == executor_id:
            return executor.pid
    raise AssertionError(f"no JVM of executor {executor_id} under the workers {SPARK_WORKERS}")


def infer_topics(cluster: LocalStack, name: str) -> tuple[str, list[dict[str, object]], dict[str, str]]:
    """The input topic holding ``EVENTS`` payments, those payments, and the job's empty output topics."""
    kafka = cluster.kafka_cluster()
    topic = create_topic(kafka, f"events.{name}", PARTITIONS)
    payments = payment_records(simulate(11, payments=EVENTS).payments)
    produce_payments(kafka, topic, payments, PARTITIONS)
    outputs = {kind: create_topic(kafka, f"{kind}.{name}", PARTITIONS) for kind in ("decisions", "outbox", "dlq")}
    return topic, payments, outputs


def infer_on_the_cluster(
    cluster: LocalStack, name: str, topic: str, outputs: dict[str, str], *, stderr: int | IO[str], env: dict[str, str],
    args: tuple[str, ...] = (),
) -> subprocess.Popen[str]:  # fmt: skip
    """``ikkai jobs run infer --master spark://…``: 60 events a trigger, its checkpoint in the shared folder."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")} | env_for(cluster) | env
    return subprocess.Popen(
        [str(IKKAI), "jobs", "run", "infer", "--master", str(cluster.spark_master_url()), "--bootstrap",
         cluster.kafka_cluster().bootstrap_servers, "--input", topic, "--decisions", outputs["decisions"], "--outbox",
         outputs["outbox"], "--dlq", outputs["dlq"], "--checkpoint", str(shared_dir(cluster.home) / name), "--query",
         name, "--max-offsets-per-trigger", "60", *args],
        stderr=stderr, stdout=subprocess.DEVNULL, text=True, env=environment, cwd=ROOT,
    )  # fmt: skip


def assert_each_event_decided_once(
    cluster: LocalStack, payments: list[dict[str, object]], outputs: dict[str, str]
) -> None:
    """What a read_committed reader finds: one decision per event, no dead letter."""
    kafka = cluster.kafka_cluster()
    codec = default_codec()
    decisions = [codec.decode("fraud_decision", value) for _, value in read_all(kafka, outputs["decisions"])]
    assert Counter(d["event_id"] for d in decisions) == Counter(str(p["event_id"]) for p in payments)
    assert read_all(kafka, outputs["dlq"]) == []


def test_kill_9_of_an_executor_mid_batch_retries_its_task_on_the_other(cluster: LocalStack) -> None:
    """The infer job on the cluster (``ikkai jobs run --master spark://``, the application zip on executors of both
    workers, checkpoints in the shared folder) decides each event once while the executor running a task of batch
    2's last stage (the sink's writes) is killed as the task starts: the task is retried on another executor, whose
    producer has the same transactional.id (per application, query and partition). The kill lands before the first
    attempt produced (the test passes with --mode at-least-once too); the next test holds the first attempt's
    transaction open on purpose."""
    name = unique("executor-kill")
    topic, payments, outputs = infer_topics(cluster, name)
    job = infer_on_the_cluster(cluster, name, topic, outputs, stderr=subprocess.PIPE, env={})
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
    assert_each_event_decided_once(cluster, payments, outputs)
    # The job ran on executors of both workers, in JVMs of their own, each given the application zip.
    for worker in SPARK_WORKERS:
        stderr = [path.read_text() for path in work_dir(cluster.home, worker).glob("app-*/*/stderr")]
        assert stderr, f"{worker} launched no executor"
        assert any("/files/ikkai-app-" in text for text in stderr), f"{worker}'s executor got no application zip"


# The driver gives up on an executor that sent no heartbeat for 15 s (Spark's default: 120 s), checked every 2 s.
LOST_BY_HEARTBEAT = {
    "spark.executor.heartbeatInterval": "2s",
    "spark.storage.blockManagerHeartbeatTimeoutMs": "15s",
    "spark.network.timeoutInterval": "2s",
}
# Longer than the test: only fencing can end the zombie's transaction, never the broker's timeout.
ZOMBIE_TRANSACTION_TIMEOUT_MS = 600_000
WAIT_S = 300.0
APP = "ikkai"  # the jobs' default --app: the commits topic is _ikkai.commits.<app>.<query>


def wait_until(done: Callable[[], bool], job: subprocess.Popen[str] | None, log: Path, what: str) -> None:
    """Until ``done()``; fails naming ``what`` if the job (None: no job runs) exits first or ``WAIT_S`` pass."""
    give_up_at = time.monotonic() + WAIT_S
    while not done():
        if (job is not None and job.poll() is not None) or time.monotonic() > give_up_at:
            tail = "".join(log.read_text().splitlines(keepends=True)[-40:])
            code = job.returncode if job is not None else "no job"
            raise AssertionError(f"no {what} (the job's exit code: {code}) within {WAIT_S:.0f}s:\n{tail}")
        time.sleep(0.5)


def committed_since(cluster: LocalStack, query: str, partition: int, batch: int) -> bool:
    """Whether (query, partition) has a committed marker of ``batch`` or later, as read_committed sees it."""
    topic = commits_topic_for(APP, query)
    marker = read_markers(cluster.kafka_cluster(), APP, query, topic=topic).get(partition)
    return marker is not None and marker.batch_id >= batch


def infer_with_a_pause(
    cluster: LocalStack, tmp_path: Path, name: str, topic: str, outputs: dict[str, str]
) -> tuple[subprocess.Popen[str], Path, Path]:
    """The infer job on the cluster with the sink's pause point armed in a folder of its own (no option of ours: a
    SPARK_CONF_DIR of the test's whose spark-defaults.conf sets spark.executorEnv); the job, that folder, its log."""
    pause = tmp_path / "pause"
    pause.mkdir()
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    settings = {**LOST_BY_HEARTBEAT, f"spark.executorEnv.{PAUSE_BEFORE_COMMIT}": str(pause)}
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in settings.items()))
    log = tmp_path / "job.log"
    with log.open("w") as stderr:
        job = infer_on_the_cluster(
            cluster, name, topic, outputs, stderr=stderr, env={"SPARK_CONF_DIR": str(conf_dir)},
            args=("--transaction-timeout-ms", str(ZOMBIE_TRANSACTION_TIMEOUT_MS)),
        )  # fmt: skip
    return job, pause, log


def committed_while_the_zombie_lives(
    cluster: LocalStack, query: str, paused: dict[str, Any], zombie: psutil.Process, pause: Path,
    job: subprocess.Popen[str], log: Path, by: str, since: str,
) -> None:  # fmt: skip
    """Wait until ``by`` committed the paused write's partition while the zombie, alive, has not gone on from its
    pause; then release the zombie: its commit must fail, fenced."""
    started_at = time.monotonic()
    partition = paused["partition"]
    committed = functools.partial(committed_since, cluster, query, partition, paused["batch"])
    wait_until(committed, job, log, f"commit of partition {partition}'s write by {by}")
    print(f"batch {paused['batch']}: {by} committed {time.monotonic() - started_at:.1f}s after {since}")
    assert zombie.is_running() and zombie.status() != psutil.STATUS_ZOMBIE, "the zombie died before"
    assert not (pause / "outcome").exists(), f"the zombie committed before {by}"
    (pause / "release").touch()
    wait_until((pause / "outcome").exists, job, log, "commit attempt of the released zombie")
    outcome = json.loads((pause / "outcome").read_text())
    assert not outcome["committed"], f"the zombie committed its transaction after {by}"
    assert outcome["kind"] == "fatal" and "commit_transaction" in outcome["error"], outcome
    print(f"the released zombie: {outcome['error']}")


def stopped_node(zombie: psutil.Process, cluster: LocalStack) -> tuple[psutil.Process, psutil.Process]:
    """The executor JVM whose Python worker ``zombie`` is, and the Spark worker that launched it."""
    workers = {pid for name in SPARK_WORKERS for pid in stack_processes(cluster.home).get(name, [])}
    parents = zombie.parents()
    executor = next(p for p in parents if "--executor-id" in p.cmdline())
    worker = next(p for p in parents if p.pid in workers)
    return executor, worker


def hold_a_zombie_until_its_retry_committed(
    cluster: LocalStack, query: str, pause: Path, job: subprocess.Popen[str], log: Path
) -> None:
    """Freeze the node of the write that paused, wait for its retry's commit, release the zombie: it is fenced."""
    frozen: dict[str, psutil.Process] = {}  # the node frozen: its Spark worker and its executor JVM
    try:
        wait_until((pause / "paused").exists, job, log, "write paused with its transaction open")
        paused = json.loads((pause / "paused").read_text())
        zombie = psutil.Process(paused["pid"])
        executor, worker = stopped_node(zombie, cluster)
        for role, process in (("worker", worker), ("executor", executor)):  # first the one that would kill the other
            process.suspend()
            frozen[role] = process
        # Committed by the retry, not the zombie: it is alive and has not gone on from its pause.
        committed_while_the_zombie_lives(cluster, query, paused, zombie, pause, job, log, "the retry", "the freeze")
    finally:
        # The frozen executor dies (its worker would kill it, as told by the master); the worker goes on.
        if "executor" in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                frozen["executor"].kill()
        if "worker" in frozen:
            frozen["worker"].resume()


def test_a_zombie_first_attempt_with_its_transaction_open_is_fenced_by_the_retry(
    cluster: LocalStack, tmp_path: Path
) -> None:
    """The interleaving that matters, built on purpose: a first attempt of a sink write has produced its records and
    holds its transaction open (the sink's test-only pause point, IKKAI_FAULT_PAUSE_BEFORE_COMMIT, reaching the
    executors as spark.executorEnv through a SPARK_CONF_DIR of the test's); its node then freezes (SIGSTOP of the
    Spark worker and the executor JVM: a kill -9 of the JVM would take its Python workers with it, pyspark's daemon
    hangs them up). Its Python worker lives on, a zombie holding an open transaction. The driver loses the executor
    by its heartbeat and retries the task on the other worker's executor, whose producer of the same
    transactional.id fences the zombie and aborts its transaction; the retry commits while the zombie is alive and
    still paused. Released, the zombie's commit is refused (fenced), and a read_committed reader finds each event
    decided once, while a read_uncommitted one sees the zombie's aborted records too."""
    name = unique("zombie")
    topic, payments, outputs = infer_topics(cluster, name)
    job, pause, log = infer_with_a_pause(cluster, tmp_path, name, topic, outputs)
    try:
        hold_a_zombie_until_its_retry_committed(cluster, name, pause, job, log)
        assert job.wait(timeout=900) == 0, log.read_text()[-6000:]
    finally:
        if job.poll() is None:
            job.kill()
    assert_each_event_decided_once(cluster, payments, outputs)
    # The zombie's records reached the log and were aborted: a read_uncommitted reader sees them as well.
    kafka = cluster.kafka_cluster()
    assert len(read_all(kafka, outputs["decisions"], isolation="read_uncommitted")) > EVENTS


def test_kill_9_of_the_spark_worker_under_an_open_transaction(cluster: LocalStack, tmp_path: Path) -> None:
    """kill -9 of the Spark worker whose executor runs a sink write that has produced and holds its transaction open
    (the pause point): the executor JVM dies with it (its process group), its Python workers once pyspark's daemon
    hangs them up, and the transaction stays open on the brokers, its producer dead. The driver loses the executor,
    the task runs again on the other worker's executor, whose producer of the same transactional.id aborts the open
    transaction (the broker would keep it open for 10 minutes) and commits; the worker is started again, the job ends
    well, and a read_committed reader finds each event decided once."""
    name = unique("worker-kill")
    topic, payments, outputs = infer_topics(cluster, name)
    job, pause, log = infer_with_a_pause(cluster, tmp_path, name, topic, outputs)
    killed: str | None = None
    try:
        wait_until((pause / "paused").exists, job, log, "write paused with its transaction open")
        paused = json.loads((pause / "paused").read_text())
        writer = psutil.Process(paused["pid"])
        _, worker = stopped_node(writer, cluster)
        killed = next(name for name in SPARK_WORKERS if worker.pid in stack_processes(cluster.home).get(name, []))
        cluster.kill(killed)
        killed_at = time.monotonic()
        writer.wait(timeout=60)  # gone with its executor: nothing but the broker holds its transaction now
        retried = functools.partial(committed_since, cluster, name, paused["partition"], paused["batch"])
        wait_until(retried, job, log, f"commit of partition {paused['partition']}'s retried write")
        print(
            f"batch {paused['batch']}: retry committed {time.monotonic() - killed_at:.1f}s after the kill of {killed}"
        )
        cluster.start(killed)
        assert job.wait(timeout=900) == 0, log.read_text()[-6000:]
    finally:
        (pause / "release").touch()  # should the writer still live, it goes on (and is fenced)
        if job.poll() is None:
            job.kill()
        if killed is not None and not stack_processes(cluster.home).get(killed):
            cluster.start(killed)  # the next test needs the whole cluster
    assert not (pause / "outcome").exists(), "the killed writer tried to commit"
    assert_each_event_decided_once(cluster, payments, outputs)
    kafka = cluster.kafka_cluster()
    assert len(read_all(kafka, outputs["decisions"], isolation="read_uncommitted")) > EVENTS


def kill_the_driver(job: subprocess.Popen[str], executors: list[psutil.Process]) -> list[int]:
    """kill -9 of the job's process tree on the driver's side (``spark-submit``'s JVM, which holds the SparkContext,
    and the Python driver it started); the executors are the workers' children, never in it. The pids killed."""
    driver = [psutil.Process(job.pid), *psutil.Process(job.pid).children(recursive=True)]
    executor_side = {p.pid for e in executors for p in [e, *e.children(recursive=True)]}
    killed = [p.pid for p in driver if p.pid not in executor_side]
    assert len(killed) == len(driver), "an executor's process is in the driver's tree"
    for process in driver:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    job.wait(timeout=60)
    return killed


def gone(processes: list[psutil.Process]) -> bool:
    """Whether none of ``processes`` runs any more (a zombie waiting for its parent's wait has ended)."""
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                return False
    return True


def test_loss_of_the_driver_with_a_zombie_executor_is_fenced_by_the_next_driver(
    cluster: LocalStack, tmp_path: Path
) -> None:
    """kill -9 of the driver (spark-submit's JVM and the Python driver) while a sink write holds its transaction open
    (the pause point). Left alone, the standalone cluster cleans up within a second or two: the master removes the
    application and tells the workers to kill its executors, each executor exits by itself ("Driver …
    disassociated"), and pyspark's daemon takes their Python workers with them, the paused one included, leaving
    its transaction open on the brokers. The worst case is an executor that does not die promptly (a long pause, a
    network partition): so the paused write's node is frozen first (SIGSTOP of its Spark worker and executor JVM),
    and its Python worker outlives the driver, a zombie holding an open transaction, while the other executor goes
    as it would. A new driver, started with the same checkpoint and query, runs the same batch again; its producer
    of the same transactional.id fences the zombie and aborts its transaction, and commits while the zombie is
    alive and paused. Released, the zombie's commit is refused; a read_committed reader finds each event decided
    once, a read_uncommitted one the zombie's aborted records besides."""
    name = unique("driver-loss")
    topic, payments, outputs = infer_topics(cluster, name)
    job, pause, log = infer_with_a_pause(cluster, tmp_path, name, topic, outputs)
    again: subprocess.Popen[str] | None = None
    frozen: dict[str, psutil.Process] = {}  # the zombie's node: its Spark worker and its executor JVM
    try:
        wait_until((pause / "paused").exists, job, log, "write paused with its transaction open")
        paused = json.loads((pause / "paused").read_text())
        zombie = psutil.Process(paused["pid"])
        executor, worker = stopped_node(zombie, cluster)
        others = [e for e in executor_jvms(cluster) if e.pid != executor.pid]
        assert others, "the job had one executor: nothing would go on its own after the driver's loss"
        others_tree = [p for e in others for p in [e, *e.children(recursive=True)]]  # with their Python workers
        app = executor.cmdline()[executor.cmdline().index("--app-id") + 1]
        for role, process in (("worker", worker), ("executor", executor)):  # first the one that would kill the other
            process.suspend()
            frozen[role] = process
        kill_the_driver(job, executor_jvms(cluster))
        lost_at = time.monotonic()
        # What the cluster does by itself: the master removes the application, the executor not frozen exits.
        master_log = cluster.log_file("spark-master")
        wait_until(lambda: f"Removing app {app}" in master_log.read_text(), None, master_log, f"removal of {app}")
        others_left = functools.partial(gone, others_tree)
        wait_until(others_left, None, log, "end of the executor the driver left running")
        print(f"{app}: removed and its running executor gone {time.monotonic() - lost_at:.1f}s after the driver")
        assert zombie.is_running() and zombie.status() != psutil.STATUS_ZOMBIE, "the frozen node's writer died"
        # A new driver: the same checkpoint and query (the pause already claimed: every write runs straight through).
        log = tmp_path / "job-again.log"
        with log.open("w") as stderr:
            again = infer_on_the_cluster(
                cluster, name, topic, outputs, stderr=stderr, env={"SPARK_CONF_DIR": str(tmp_path / "spark-conf")},
                args=("--transaction-timeout-ms", str(ZOMBIE_TRANSACTION_TIMEOUT_MS)),
            )  # fmt: skip
        by, since = "the new driver", "its start"
        committed_while_the_zombie_lives(cluster, name, paused, zombie, pause, again, log, by, since)
        assert again.wait(timeout=900) == 0, log.read_text()[-6000:]
    finally:
        (pause / "release").touch()
        for process in (job, again):
            if process is not None and process.poll() is None:
                process.kill()
        if "executor" in frozen:  # its worker would kill it, as the master told it
            with contextlib.suppress(psutil.NoSuchProcess):
                frozen["executor"].kill()
        if "worker" in frozen:
            frozen["worker"].resume()
    assert_each_event_decided_once(cluster, payments, outputs)
    kafka = cluster.kafka_cluster()
    assert len(read_all(kafka, outputs["decisions"], isolation="read_uncommitted")) > EVENTS


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
