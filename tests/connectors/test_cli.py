"""``ikkai bundle`` verbs that need no cluster: render and lint --offline, their output and exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

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
