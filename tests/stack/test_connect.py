"""The Kafka Connect worker of the stack: plugins, a real FileStreamSource, config providers, delete."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from deploy.connect_rest import ConnectClient, ConnectRestError
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints, jars_dir
from stack.artifacts import resolved_jars
from stack.kit.topic_io import create_topic, read_all, unique
from stack.prerequisites import java_executable
from stack.processes import run_java
from stack.stack_config import CONNECT_GROUP, SOURCE_TRANSACTION_TIMEOUT_MS
from tests.connect_helpers import wait_running

pytestmark = pytest.mark.integration

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def test_connect_lists_the_filestream_connectors(stack: Endpoints) -> None:
    classes = {p["class"] for p in ConnectClient(stack.connect_url).connector_plugins()}
    assert {FILE_SOURCE, FILE_SINK} <= classes


def test_file_source_lands_lines_in_a_topic_and_can_be_deleted(
    stack: Endpoints, cluster: KafkaContext, tmp_path: Path
) -> None:
    client = ConnectClient(stack.connect_url)
    topic = create_topic(cluster, unique("ingest.test"))
    lines = [f'{{"payment_id": "p-{i}", "amount": {i}}}' for i in range(20)]
    source = tmp_path / "payments.jsonl"
    source.write_text("\n".join(lines) + "\n")
    # The file name is read through the `file` config provider, as secrets will be.
    secrets = tmp_path / "connector.properties"
    secrets.write_text(f"path={source}\n")
    name = unique("test-file-source")

    client.put_connector_config(name, {
        "connector.class": FILE_SOURCE,
        "tasks.max": "1",
        "topic": topic,
        "file": f"${{file:{secrets}:path}}",
    })  # fmt: skip
    try:
        wait_running(client, name)
        assert client.connector_config(name)["file"] == f"${{file:{secrets}:path}}"  # stored unresolved
        landed = read_all(cluster, topic, expect=len(lines), timeout=60)
        assert [v.decode() for _, v in landed if v] == lines
    finally:
        client.delete_connector(name)

    assert name not in client.connectors()
    deadline = time.monotonic() + 30  # the status record is removed asynchronously after the config
    while time.monotonic() < deadline:
        try:
            client.connector_status(name)
        except ConnectRestError as exc:
            assert exc.status == 404
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"{name} still has a status 30 s after delete")


def test_a_source_tasks_transactions_time_out_in_seconds_so_a_killed_task_cannot_hold_readers(
    stack: Endpoints, cluster: KafkaContext, tmp_path: Path
) -> None:
    """An exactly-once source task killed with a transaction open holds every read_committed reader of its topics
    and of the worker's offsets topic (a restarted worker's start) until the broker times the transaction out.
    The broker itself says which timeout the running task's producer registered: Kafka's own
    ``kafka-transactions describe`` for the task's transactional.id (``<group>-<connector>-<task>``, KIP-618).
    Mutation: the setting without its ``producer.`` prefix (a worker setting no task producer reads) → 60000."""
    jars, java = resolved_jars(jars_dir()), java_executable()
    assert jars is not None and java is not None, "the stack runs, so its jars and Java are there"
    client = ConnectClient(stack.connect_url)
    topic = create_topic(cluster, unique("ingest.txn"))
    source = tmp_path / "lines.txt"
    source.write_text("one\ntwo\n")
    name = unique("txn-file-source")
    client.put_connector_config(name, {"connector.class": FILE_SOURCE, "tasks.max": "1", "topic": topic,
                                       "file": str(source)})  # fmt: skip
    try:
        wait_running(client, name)
        assert len(read_all(cluster, topic, expect=2, timeout=60)) == 2  # a transaction committed
        described = run_java(
            java, classpath=jars.kafka_classpath(), main_class="org.apache.kafka.tools.TransactionsCommand",
            args=["--bootstrap-server", stack.bootstrap_servers, "describe", "--transactional-id",
                  f"{CONNECT_GROUP}-{name}-0"],
        )  # fmt: skip
        assert described.returncode == 0, described.stderr[-2000:]
        header, row = (line.split() for line in described.stdout.strip().splitlines()[-2:])
        assert dict(zip(header, row, strict=False))["TransactionTimeoutMs"] == str(SOURCE_TRANSACTION_TIMEOUT_MS)
    finally:
        client.delete_connector(name)
