"""The infer job with ``--transactional-writer executor`` as its own process: its writer killed mid-transaction.

In ``local[2]`` Spark does not retry a failed task: the batch fails and the job stops; its restart is the
retry. A read_committed reader then sees one decision per event.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from spark_jobs.sink.commit_pause import PAUSE_BEFORE_COMMIT
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
EVENTS = 120
WAIT_S = 600.0  # a loaded 2-core machine starts Spark slowly; nothing is timed


def test_the_infer_job_through_a_killed_executor_writer_decides_each_event_once(
    cluster: KafkaContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payments = payment_records(simulate(7, payments=EVENTS).payments)
    name = unique("t")
    topics = InferTopics(
        create_topic(cluster, unique("events.payments"), PARTITIONS), f"decisions.{name}", f"outbox.{name}",
        f"dlq.{name}",
    )  # fmt: skip
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)
    produce_payments(cluster, topics.input, payments, PARTITIONS)
    pause, checkpoint = tmp_path / "pause", tmp_path / "checkpoint"
    pause.mkdir()
    # A transaction timeout longer than a marker read waits for an open transaction (120 s): only fencing by the
    # restart's writer ends the killed writer's transaction in time.
    options = ("--transactional-writer", "executor", "--max-offsets-per-trigger", "40", "--transaction-timeout-ms",
               "300000")  # fmt: skip
    monkeypatch.setenv(PAUSE_BEFORE_COMMIT, str(pause))  # the job's executor, and so its writer, inherit it
    first = InferProcess(cluster, topics, checkpoint, "q", *options)
    try:
        give_up_at = time.monotonic() + WAIT_S
        while not (pause / "paused").exists():
            assert first.process.poll() is None and time.monotonic() < give_up_at, first.tail()
            time.sleep(0.1)
        writer = json.loads((pause / "paused").read_text())["pid"]
        os.kill(writer, signal.SIGKILL)
        assert first.wait(WAIT_S) != 0, "local[2]: the failed write task stops the job"
        assert "hung up before answering" in "".join(first.log), first.tail()
    finally:
        first.kill()
    monkeypatch.delenv(PAUSE_BEFORE_COMMIT)
    restart = InferProcess(cluster, topics, checkpoint, "q", *options)
    try:
        assert restart.wait(WAIT_S) == 0, restart.tail()
    finally:
        restart.kill()
    codec = default_codec()
    decisions = [codec.decode("fraud_decision", value) for _, value in flat(by_partition(cluster, topics.decisions))]
    assert Counter(d["event_id"] for d in decisions) == Counter(str(p["event_id"]) for p in payments)
