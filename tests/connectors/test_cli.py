"""``ikkai bundle`` verbs that need no cluster: render and lint (offline by default), their output and exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.cli.cli_runner import run_ikkai


def test_render_redacts_literal_secrets_and_keeps_placeholders(shipped_bundle: Callable[[str, str], Path]) -> None:
    folder = shipped_bundle("postgres-cdc", "cli-test.")
    result = run_ikkai("bundle", "render", str(folder), "-o", "json", "--set", "database.password=hunter2")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)["connectors"][0]["config"]
    assert config["database.password"] == "<redacted>" and "hunter2" not in result.stdout
    placeholder = run_ikkai("bundle", "render", str(folder), "-o", "json")
    assert json.loads(placeholder.stdout)["connectors"][0]["config"]["database.password"].startswith("${file:")


def test_lint_offline_fails_on_a_literal_password_and_names_the_fix(shipped_bundle: Callable[[str, str], Path]) -> None:
    folder = shipped_bundle("postgres-cdc", "cli-test.")
    result = run_ikkai("bundle", "lint", str(folder), "--offline", "--set", "database.password=hunter2")
    assert result.returncode == 1
    assert "secret-placeholder" in result.stdout and "fix: reference it through a config provider" in result.stdout
    assert "hunter2" not in result.stdout + result.stderr
    clean = run_ikkai("bundle", "lint", "payments-ingest", "--offline", "-o", "json")
    assert clean.returncode == 0 and json.loads(clean.stdout)["errors"] == 0


def test_errors_are_one_line_on_stderr_with_exit_1() -> None:
    result = run_ikkai("bundle", "render", "no-such-bundle")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and "shipped bundles: " in result.stderr


def test_errors_with_o_json_are_one_json_object_on_stderr_with_the_same_exit_code() -> None:
    result = run_ikkai("bundle", "render", "payments-ingest", "--set", "partitons=6", "-o", "json")
    assert result.returncode == 1 and result.stdout == ""
    error = json.loads(result.stderr)
    assert error["error"] == "BundleError"
    assert error["fields"] == {
        "bundle": "payments-ingest",
        "file": "--set",
        "line": None,
        "problem": error["fields"]["problem"],
    }
    assert error["fields"]["problem"].startswith("partitons is used by no template")
    assert error["fix"].startswith("did you mean partitions?")
    usage = run_ikkai("bundle", "render", "-o", "json")  # a usage error: exit 2 as in text mode
    assert usage.returncode == 2 and json.loads(usage.stderr)["error"] == "MissingParameter"


def test_lint_asks_no_cluster_unless_online(tmp_path: Path) -> None:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({"dev": {"connect_url": "http://127.0.0.1:9"}}))  # nothing listens there
    env = {"IKKAI_CLUSTERS": str(clusters)}
    offline = run_ikkai("bundle", "lint", "payments-ingest", "-o", "json", env=env)
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout)["offline"] is True
    online = run_ikkai("bundle", "lint", "payments-ingest", "--online", "-o", "json", env=env)
    assert online.returncode == 1 and json.loads(online.stderr)["error"] == "ConnectUnreachable"
