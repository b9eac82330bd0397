"""The executor writer on the real broker: producers kept across batches and workers, and each kill built on purpose.

Every Python worker is a process of its own (``sink_worker``), the executor JVM a stand-in process
whose pid names the writer; what counts is what a read_committed consumer sees: each record once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from demo.pipeline_io import by_partition, create_topic, unique
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import ensure_commits_topic
from spark_jobs.sink.executor_writer import started_at
from spark_jobs.sink.executor_writer_client import running_writer, socket_path, writers_folder
from spark_jobs.sink.partition_transactions import PAUSE_BEFORE_COMMIT
from spark_jobs.sink.transactional_sink import TransactionalBatchWriter
from tests.spark_jobs.sink.sink_worker import config

pytestmark = pytest.mark.integration

PARTITIONS = 3
WAIT_S = 120.0  # bounds a broken test's wait; nothing is timed
REPO = Path(__file__).resolve().parents[3]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    give_up_at = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > give_up_at:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def executor() -> Iterator[int]:
    """A stand-in executor JVM: the writer lives as long as this process does."""
    process = subprocess.Popen(["sleep", "3600"])
    path = socket_path("test", process.pid)  # named after the process's pid and start: computed while it runs
    yield process.pid
    writer = running_writer(path)
    process.kill()
    process.wait()
    if writer is not None:
        try:
            wait_until(lambda: not alive(writer), f"writer {writer} exits once its executor is gone")
        finally:
            if alive(writer):  # a failed test's stopped writer
                os.kill(writer, signal.SIGKILL)


@pytest.fixture
def job(bootstrap: str, executor: int) -> dict[str, Any]:
    topic = create_topic(bootstrap, unique("test.out"), PARTITIONS)
    commits = unique("_ikkai.commits.test")
    ensure_commits_topic(KafkaContext.of(bootstrap), commits, PARTITIONS)
    return {
        "bootstrap": bootstrap, "topic": topic, "commits": commits, "query": "q", "partitions": PARTITIONS,
        "executor": executor, "transaction_timeout_ms": 60_000, "retry_deadline_s": 20.0,
    }  # fmt: skip


def start_worker(
    job: dict[str, Any], batch: int, write: list[int], start: int, count: int, log: Path, **env: str
) -> subprocess.Popen[str]:
    request = json.dumps({**job, "batch": batch, "write": write, "start": start, "count": count})
    environment = {k: v for k, v in os.environ.items() if k != PAUSE_BEFORE_COMMIT} | env
    code = "from tests.spark_jobs.sink.sink_worker import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, request], cwd=REPO, env=environment, stdout=subprocess.PIPE,
        stderr=log.open("a"), text=True,
    )  # fmt: skip


def finished(worker: subprocess.Popen[str]) -> str:
    try:
        out, _ = worker.communicate(timeout=WAIT_S)
    finally:
        if worker.poll() is None:  # a failed test's hung worker
            worker.kill()
            worker.wait()
    return out


def results(worker: subprocess.Popen[str], log: Path) -> list[dict[str, Any]]:
    out = finished(worker)
    assert worker.returncode == 0, log.read_text()
    return [json.loads(line) for line in out.splitlines()]


def failure(worker: subprocess.Popen[str], log: Path) -> str:
    finished(worker)
    assert worker.returncode == 3, log.read_text()
    return log.read_text()


def values(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    return {p: [value for _, value in records] for p, records in by_partition(bootstrap, topic).items()}


def expected(partition: int, start: int, count: int) -> list[bytes]:
    return [f"p{partition}-v{i}".encode() for i in range(start, start + count)]


def test_producers_survive_across_batches_and_workers(job: dict[str, Any], tmp_path: Path) -> None:
    """Each batch from a new worker process, the worst case for producers kept per worker: one init per partition."""
    log = tmp_path / "workers.log"
    new_producers = []
    for batch in range(4):
        written = results(start_worker(job, batch, [0, 1, 2], batch * 10, 10, log), log)
        assert [r["records"] for r in written] == [10, 10, 10]
        new_producers.append(sum(r["new_producer"] for r in written))
    assert new_producers == [3, 0, 0, 0]
    assert values(job["bootstrap"], job["topic"]) == {p: expected(p, 0, 40) for p in range(PARTITIONS)}


def test_a_writer_killed_with_its_transaction_open_is_fenced_by_its_successor(
    job: dict[str, Any], tmp_path: Path
) -> None:
    """(1) kill -9 of the writer paused before commit: the task fails, its retry starts a writer that fences it."""
    # Longer than a marker read waits for an open transaction (120 s): only fencing can end the killed one's in time.
    job = {**job, "transaction_timeout_ms": 300_000}
    log, pause = tmp_path / "workers.log", tmp_path / "pause"
    pause.mkdir()
    first = start_worker(job, 0, [0], 0, 20, log, **{PAUSE_BEFORE_COMMIT: str(pause)})
    wait_until((pause / "paused").exists, "the writer holds batch 0's transaction open")
    killed = json.loads((pause / "paused").read_text())["pid"]
    os.kill(killed, signal.SIGKILL)
    assert "hung up before answering batch 0, partition 0" in failure(first, log)
    [retry] = results(start_worker(job, 0, [0], 0, 20, log), log)
    assert (retry["records"], retry["new_producer"]) == (20, True)
    assert running_writer(socket_path("test", job["executor"])) not in (None, killed)
    assert values(job["bootstrap"], job["topic"]) == {0: expected(0, 0, 20), 1: [], 2: []}


def test_a_worker_killed_mid_request_leaves_the_write_to_the_writer_and_its_retry_waits(
    job: dict[str, Any], tmp_path: Path
) -> None:
    """(2) kill -9 of the worker while the writer holds its transaction: the writer commits, the retry waits, skips."""
    log, pause = tmp_path / "workers.log", tmp_path / "pause"
    pause.mkdir()
    first = start_worker(job, 0, [0], 0, 20, log, **{PAUSE_BEFORE_COMMIT: str(pause)})
    wait_until((pause / "paused").exists, "the writer holds batch 0's transaction open")
    writer = json.loads((pause / "paused").read_text())["pid"]
    first.kill()
    first.wait()
    retry = start_worker(job, 0, [0], 0, 20, log)
    wait_until(lambda: "batch 0 waits for transactional.id" in log.read_text(), "the retry waits for the id's lock")
    (pause / "release").touch()
    [result] = results(retry, log)
    assert json.loads((pause / "outcome").read_text()) == {"committed": True}
    assert (result["records"], result["already_committed"], result["new_producer"]) == (0, 20, False)
    assert running_writer(socket_path("test", job["executor"])) == writer
    assert values(job["bootstrap"], job["topic"]) == {0: expected(0, 0, 20), 1: [], 2: []}


def test_a_writer_that_stops_answering_is_killed_at_the_deadline_and_replaced(
    job: dict[str, Any], tmp_path: Path
) -> None:
    """(3) SIGSTOP of the writer holding a transaction open: killed at the answer's deadline, its successor fences."""
    job = {**job, "transaction_timeout_ms": 4000, "retry_deadline_s": 1.0}  # a deadline of 2 * (4 + 1) s
    log, pause = tmp_path / "workers.log", tmp_path / "pause"
    pause.mkdir()
    first = start_worker(job, 0, [0], 0, 20, log, **{PAUSE_BEFORE_COMMIT: str(pause)})
    wait_until((pause / "paused").exists, "the writer holds batch 0's transaction open")
    stopped = json.loads((pause / "paused").read_text())["pid"]
    os.kill(stopped, signal.SIGSTOP)
    assert "no answer for batch 0, partition 0 within 10 s; killed it" in failure(first, log)
    wait_until(lambda: not alive(stopped), f"the stopped writer {stopped} is gone")
    [retry] = results(start_worker(job, 0, [0], 0, 20, log), log)
    assert (retry["records"], retry["new_producer"]) == (20, True)
    assert running_writer(socket_path("test", job["executor"])) not in (None, stopped)
    assert values(job["bootstrap"], job["topic"]) == {0: expected(0, 0, 20), 1: [], 2: []}


def test_the_writer_is_0600_in_a_0700_folder(job: dict[str, Any], tmp_path: Path) -> None:
    log = tmp_path / "workers.log"
    results(start_worker(job, 0, [1], 0, 5, log), log)
    path = socket_path("test", job["executor"])
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)


def test_an_unknown_transactional_writer_is_refused(job: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="transactional_writer"):
        dataclasses.replace(config(job), transactional_writer="driver")


def test_through_spark_each_partition_initialises_once(spark: Any, bootstrap: str) -> None:
    """The sink's own tasks find their executor's writer (the Python worker's JVM ancestor) and keep its producers."""
    topic = create_topic(bootstrap, unique("test.out"), PARTITIONS)
    sink = dataclasses.replace(
        config({"bootstrap": bootstrap, "topic": topic, "commits": unique("_ikkai.commits.test"), "query": "q",
                "partitions": PARTITIONS, "transaction_timeout_ms": 60_000, "retry_deadline_s": 20.0}),
        order_by=("input_offset",),
    )  # fmt: skip
    new_producers: list[int] = []
    writer = TransactionalBatchWriter(
        sink, after_batch=lambda _, results: new_producers.append(sum(r.new_producer for r in results))
    )
    schema = "topic string, key binary, value binary, timestamp long, input_partition int, input_offset long"
    for batch in range(4):
        rows = [
            (topic, f"pay-{i % 17}".encode(), f"v{i}".encode(), None, 0, i) for i in range(batch * 30, batch * 30 + 30)
        ]
        writer(spark.createDataFrame(rows, schema).repartition(2), batch)
    assert new_producers == [PARTITIONS, 0, 0, 0]
    assert sorted(v for records in values(bootstrap, topic).values() for v in records) == sorted(
        f"v{i}".encode() for i in range(120)
    )


def test_a_writer_whose_executor_pid_now_names_another_process_exits(executor: int) -> None:
    """A pid is reused: the writer goes by the executor's pid and start, so a new process with its pid is not it."""
    path = writers_folder() / f"{unique('reused')}.sock"
    writer = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.sink.executor_writer", "--socket", str(path), "--executor-pid",
         str(executor), "--executor-started", str(started_at(executor) - 1)],
        cwd=REPO, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert writer.wait(timeout=WAIT_S) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert not path.exists()
