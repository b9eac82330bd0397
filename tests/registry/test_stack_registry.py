"""``ikkai stack --registry``: what a home that runs the local schema registry shows and exports.

Nothing is started here: the home's state files say the stack was started with ``--registry``
(as ``ikkai stack up --registry`` writes them), and the CLI must show and export the registry
from them. Starting the registry for real is ``tests/stack/test_schema_registry.py``'s business.
"""

from __future__ import annotations

import json
from pathlib import Path

from stack.schema_registry import REGISTRY, ccompat_url
from tests.cli.cli_runner import run_ikkai

PORT = 1  # nothing listens there: the stack and its registry are down


def started_with_registry(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    state = {"ports": {"broker": 2, "controller": 3, "connect": 4}, "brokers": 1, "secure": False, "registry": True}
    (home / "stack.json").write_text(json.dumps(state))
    (home / f"{REGISTRY}.json").write_text(json.dumps({"port": PORT}))
    return home


def test_env_exports_the_registry_that_switches_the_wire_format(tmp_path: Path) -> None:
    home = started_with_registry(tmp_path / "home")
    result = run_ikkai("stack", "--home", str(home), "env")
    assert result.returncode == 0, result.stderr
    assert f"export IKKAI_SCHEMA_REGISTRY_URL={ccompat_url(PORT)}" in result.stdout.splitlines()


def test_status_lists_the_registry_as_a_component_of_the_stack(tmp_path: Path) -> None:
    home = started_with_registry(tmp_path / "home")
    result = run_ikkai("stack", "--home", str(home), "status", "-o", "json")
    assert result.returncode == 3, result.stderr  # not running
    status = json.loads(result.stdout)
    assert status["schema_registry_url"] == ccompat_url(PORT)
    registry = [c for c in status["components"] if c["name"] == REGISTRY]
    assert registry == [{"name": REGISTRY, "pids": [], "healthy": False, "log": str(home / "logs" / f"{REGISTRY}.log")}]


def test_a_home_without_the_registry_exports_no_registry(tmp_path: Path) -> None:
    home = started_with_registry(tmp_path / "home")
    state = json.loads((home / "stack.json").read_text())
    (home / "stack.json").write_text(json.dumps({**state, "registry": False}))
    env = run_ikkai("stack", "--home", str(home), "env")
    assert env.returncode == 0 and "IKKAI_SCHEMA_REGISTRY_URL" not in env.stdout
    status = run_ikkai("stack", "--home", str(home), "status", "-o", "json")
    assert REGISTRY not in [c["name"] for c in json.loads(status.stdout)["components"]]
