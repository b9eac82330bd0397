"""The CLI's error contract: one line on stderr that says what to do, exit code 1, nothing on stdout."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from ikkai.settings import jars_dir
from tests.cli.cli_runner import run_ikkai


def assert_one_line_error(result: object, *fragments: str) -> str:
    assert result.returncode == 1, result  # type: ignore[attr-defined]
    assert result.stdout == ""  # type: ignore[attr-defined]
    lines = [line for line in result.stderr.splitlines() if line.startswith("ikkai:")]  # type: ignore[attr-defined]
    assert len(lines) == 1, result.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("ikkai: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_half_an_external_cluster_is_refused(tmp_path: Path) -> None:
    result = run_ikkai("stack", "status", env={"IKKAI_HOME": str(tmp_path), "IKKAI_BOOTSTRAP_SERVERS": "k:9092"})
    assert_one_line_error(result, "IKKAI_CONNECT_URL", "set both")


def test_a_taken_port_is_a_one_line_error_and_nothing_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_ikkai(
            "stack", "up", "--broker-port", str(port),
            env={"IKKAI_HOME": str(tmp_path), "IKKAI_JARS_DIR": str(jars_dir())},
        )  # fmt: skip
    assert_one_line_error(result, f"127.0.0.1:{port} is already in use", "--broker-port")
    assert not (tmp_path / "kafka").exists()


def test_docker_runtime_without_an_engine_says_to_use_the_embedded_stack(tmp_path: Path) -> None:
    if Path("/var/run/docker.sock").exists():
        pytest.skip("this machine has a Docker socket; the no-engine path cannot be shown here")
    result = run_ikkai("stack", "--runtime", "docker", "status", env={"IKKAI_HOME": str(tmp_path)})
    line = assert_one_line_error(result, "no Docker engine", "--runtime local")
    suggested = re.search(r"`ikkai ([^`]+)`", line)
    assert suggested is not None, line
    assert run_ikkai(*suggested.group(1).split(), "--help").returncode == 0, line  # a command that exists


def test_status_of_a_never_started_stack_exits_3_with_a_table(tmp_path: Path) -> None:
    result = run_ikkai("stack", "status", env={"IKKAI_HOME": str(tmp_path)})
    assert result.returncode == 3, result.stderr
    assert "stopped" in result.stdout
    assert "broker" in result.stdout and "connect" in result.stdout


def test_env_before_up_explains_what_to_do(tmp_path: Path) -> None:
    result = run_ikkai("stack", "env", env={"IKKAI_HOME": str(tmp_path)})
    assert_one_line_error(result, "ikkai stack up")


def test_down_of_an_external_cluster_stops_nothing_and_says_so_once(tmp_path: Path) -> None:
    env = {"IKKAI_HOME": str(tmp_path), "IKKAI_BOOTSTRAP_SERVERS": "k:9092", "IKKAI_CONNECT_URL": "http://c:8083"}
    result = run_ikkai("stack", "down", env=env)
    assert result.returncode == 0, result.stderr
    assert "external cluster: nothing to stop" in result.stderr
    assert "process(es)" not in result.stderr, "no process of this machine was the external cluster's"


def test_up_prints_the_spark_web_uis_of_a_cluster_stack() -> None:
    from cli.stack import _endpoint_data, endpoints_text
    from ikkai.settings import Endpoints

    class ClusterStack:
        def spark_master_url(self) -> str:
            return "spark://127.0.0.1:7077"

        def spark_ui_urls(self) -> list[str]:
            return ["http://127.0.0.1:8080", "http://127.0.0.1:8081"]

    data = _endpoint_data(Endpoints("127.0.0.1:9092", "http://127.0.0.1:8083", "local"), ClusterStack())  # type: ignore[arg-type]
    assert data["spark_ui_urls"] == ["http://127.0.0.1:8080", "http://127.0.0.1:8081"]
    assert "spark_ui_urls      http://127.0.0.1:8080,http://127.0.0.1:8081" in endpoints_text(data)
