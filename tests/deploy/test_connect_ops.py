"""``ikkai connect`` against the real worker: list, describe, offsets get / alter / reset (KIP-875), loggers,
and shell completion of connector names. Each checks the CLI's output and what Connect itself says."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy import connect_ops
from deploy.connect_rest import ConnectClient
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from stack.kit.topic_io import create_topic, read_all, unique
from tests.cli.cli_runner import IKKAI, ROOT, run_ikkai
from tests.connect_helpers import wait_running

pytestmark = pytest.mark.integration

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
LINES = ["alpha", "beta", "gamma"]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


class Source:
    """A FileStreamSource with a literal secret in its config, on its own topic."""

    def __init__(self, stack: Endpoints, cluster: KafkaContext, folder: Path) -> None:
        self.client = ConnectClient(stack.connect_url)
        self.url = stack.connect_url
        self.cluster = cluster
        self.name = unique("test-connect-ops")
        self.topic = create_topic(cluster, unique("ingest.connect-ops"))
        self.file = folder / "lines.txt"
        self.file.write_text("".join(f"{line}\n" for line in LINES))
        self.client.put_connector_config(self.name, {
            "connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(self.file), "topic": self.topic,
            "sasl.password": "hunter2-not-for-output",
        })  # fmt: skip
        wait_running(self.client, self.name)

    def ikkai(self, *args: str) -> Any:
        return run_ikkai("connect", *args, "--connect-url", self.url)

    def committed(self) -> list[dict[str, Any]]:
        return list(self.client.connector_offsets(self.name).get("offsets") or [])

    def values(self, expect: int) -> list[str]:
        return [v.decode() for _, v in read_all(self.cluster, self.topic, expect=expect, timeout=60) if v]


@pytest.fixture
def source(stack: Endpoints, cluster: KafkaContext, tmp_path: Path) -> Iterator[Source]:
    s = Source(stack, cluster, tmp_path)
    try:
        yield s
    finally:
        s.client.delete_connector(s.name)


def test_list_and_describe_show_state_tasks_topics_with_secrets_masked(source: Source) -> None:
    assert source.values(expect=3) == LINES
    wait_for(lambda: source.client.connector_topics(source.name), "Connect to record the topic")

    listed = source.ikkai("list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout)["connectors"] if r["name"] == source.name)
    assert (row["type"], row["state"], row["class"], row["tasks"]) == (
        "source", "RUNNING", FILE_SOURCE, [{"id": 0, "state": "RUNNING"}],
    )  # fmt: skip

    described = source.ikkai("describe", source.name, "-o", "json")
    assert described.returncode == 0, described.stderr
    data = json.loads(described.stdout)
    assert data["config"]["sasl.password"] == "<redacted>" and data["config"]["file"] == str(source.file)
    assert data["topics"] == [source.topic] and data["tasks"][0]["state"] == "RUNNING"
    assert source.client.connector_config(source.name)["sasl.password"] == "hunter2-not-for-output"  # only masked
    text = source.ikkai("describe", source.name)
    assert "hunter2" not in described.stdout + text.stdout
    assert f"Topics:   {source.topic}" in text.stdout and "sasl.password: <redacted>" in text.stdout

    missing = source.ikkai("describe", source.name + "x")
    assert missing.returncode == 1
    assert f"did you mean {source.name}?" in missing.stderr and missing.stderr.count("\n") == 1


def test_offsets_alter_stops_rewinds_and_resumes_a_running_source(source: Source, tmp_path: Path) -> None:
    assert source.values(expect=3) == LINES
    end = wait_for(lambda: [o for o in source.committed() if o["offset"] and o["offset"]["position"] == 17], "offsets")
    got = source.ikkai("offsets", "get", source.name, "-o", "json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"connector": source.name, "offsets": end}

    # Rewind to the start of the second line: the edited output of `offsets get` is the input of `alter`.
    rewind = json.loads(got.stdout)
    rewind["offsets"][0]["offset"]["position"] = len("alpha\n")
    offsets_file = tmp_path / "offsets.json"
    offsets_file.write_text(json.dumps(rewind))
    altered = source.ikkai("offsets", "alter", source.name, "--file", str(offsets_file))
    assert altered.returncode == 0, altered.stderr
    assert "RUNNING -> RUNNING" in altered.stdout
    assert "stopping it (Connect changes offsets only of a STOPPED connector" in altered.stderr
    assert "resuming it (it was RUNNING)" in altered.stderr

    wait_running(source.client, source.name)  # back in the state it was in, as Connect reports it
    assert source.values(expect=5) == [*LINES, "beta", "gamma"]  # re-read from the altered position


def test_offsets_reset_of_a_paused_connector_leaves_it_paused_without_offsets(source: Source) -> None:
    wait_for(lambda: source.committed(), "offsets to be committed")
    source.client.pause_connector(source.name)
    wait_for(lambda: source.client.connector_status(source.name)["connector"]["state"] == "PAUSED", "PAUSED")

    refused = source.ikkai("offsets", "reset", source.name)  # no terminal to confirm on
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert source.committed()

    reset = source.ikkai("offsets", "reset", source.name, "--yes", "-o", "json")
    assert reset.returncode == 0, reset.stderr
    data = json.loads(reset.stdout)
    assert (data["state_before"], data["state_after"], data["action"]) == ("PAUSED", "PAUSED", "reset")
    assert reset.stderr == ""  # -o json: stderr carries errors only
    assert source.committed() == []
    paused = wait_for(lambda: source.client.connector_status(source.name)["connector"]["state"] == "PAUSED", "PAUSED")
    assert paused


def test_offsets_alter_checks_the_file_before_stopping_anything(source: Source, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"offsets": [{"partition": {"filename": "x"}}]}))
    result = source.ikkai("offsets", "alter", source.name, "--file", str(bad), "-o", "json")
    assert result.returncode == 1
    error = json.loads(result.stderr)
    assert error["error"] == "ConfigError" and error["fields"]["key"] == "offsets[0]"
    assert source.client.connector_status(source.name)["connector"]["state"] == "RUNNING"


def test_loggers_get_and_set(source: Source) -> None:
    logger = "org.apache.kafka.connect.file"
    try:
        changed = source.ikkai("loggers", logger, "--level", "debug", "-o", "json")
        assert changed.returncode == 0, changed.stderr
        assert logger in json.loads(changed.stdout)["changed"]
        assert source.client.logger(logger)["level"] == "DEBUG"
        listed = source.ikkai("loggers", logger)
        assert listed.returncode == 0 and listed.stdout.splitlines()[1].split() == [logger, "DEBUG"]
        bad = source.ikkai("loggers", logger, "--level", "LOUD")
        assert bad.returncode == 2
    finally:
        connect_ops.set_logger(source.client, logger, "INFO", "worker")
    assert source.client.logger(logger)["level"] == "INFO"


def test_shell_completion_offers_bundle_and_connector_names(source: Source) -> None:
    import subprocess

    def complete(*words: str) -> list[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")}
        env.update(_IKKAI_COMPLETE="bash_complete", COMP_WORDS=" ".join(("ikkai", *words)), COMP_CWORD=str(len(words)))
        result = subprocess.run(
            [str(IKKAI)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
        return [line.split(",", 1)[1] for line in result.stdout.splitlines() if "," in line]

    assert complete("bundle", "apply", "pay") == ["payments-ingest"]
    prefix = source.name[: len("test-connect-ops.") + 4]
    assert complete("connect", "describe", "--connect-url", source.url, prefix) == [source.name]
    assert complete("connect", "describe", "--connect-url", "http://127.0.0.1:9", "x") == []  # unreachable: nothing
