"""The Kafka Connect worker of the stack: plugins, a real FileStreamSource, config providers, delete."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from demo.pipeline_io import create_topic, unique
from deploy.connect_rest import ConnectClient, ConnectRestError
from ikkai.settings import Endpoints
from tests.connect_helpers import wait_running
from tests.kafka_helpers import read_all

pytestmark = pytest.mark.integration

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def test_connect_lists_the_filestream_connectors(stack: Endpoints) -> None:
    classes = {p["class"] for p in ConnectClient(stack.connect_url).connector_plugins()}
    assert {FILE_SOURCE, FILE_SINK} <= classes


def test_file_source_lands_lines_in_a_topic_and_can_be_deleted(stack: Endpoints, tmp_path: Path) -> None:
    client = ConnectClient(stack.connect_url)
    topic = create_topic(stack.bootstrap_servers, unique("ingest.test"))
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
        landed = read_all(stack.bootstrap_servers, topic, expect=len(lines), timeout=60)
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
