"""`ikkai stack up | status | down` on a stack of its own: idempotent up, crash recovery, no leftovers."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from ikkai.settings import jars_dir
from stack.processes import stack_processes
from tests.cli.cli_runner import run_ikkai

pytestmark = pytest.mark.integration


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    yield home
    run_ikkai("stack", "down", env=env_for(home))
    for pids in stack_processes(home.resolve()).values():  # never leak a JVM, even when a test failed
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


def env_for(home: Path) -> dict[str, str]:
    return {"IKKAI_HOME": str(home), "IKKAI_JARS_DIR": str(jars_dir())}


def up(home: Path) -> dict[str, str]:
    result = run_ikkai("stack", "up", "-o", "json", env=env_for(home))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_up_twice_down_and_crash_recovery(home: Path) -> None:
    first = up(home)
    assert first["runtime"] == "local"
    assert first["bootstrap_servers"].startswith("127.0.0.1:")
    live = stack_processes(home.resolve())
    assert {k: len(v) for k, v in live.items()} == {"broker": 1, "connect": 1}

    second = up(home)
    assert second == first, "a second up must be a no-op that prints the same endpoints"
    assert stack_processes(home.resolve()) == live, "a second up must not start anything"

    status = run_ikkai("stack", "status", "-o", "json", env=env_for(home))
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["state"] == "running"
    assert {c["name"]: c["pids"] for c in report["components"]} == {k: v for k, v in live.items()}

    # log4j2 really writes through the slf4j binding: the broker and worker logs have content.
    assert "Kafka Server started" in (home / "logs" / "broker.log").read_text()
    assert "Kafka Connect started" in (home / "logs" / "connect.log").read_text()

    # A crashed worker is detected by the next `up`, which cleans up and brings everything back.
    os.kill(live["connect"][0], signal.SIGKILL)
    degraded = run_ikkai("stack", "status", "-o", "json", env=env_for(home))
    assert degraded.returncode == 3
    assert json.loads(degraded.stdout)["state"] == "degraded"
    recovered = run_ikkai("stack", "up", "-o", "json", env=env_for(home))
    assert recovered.returncode == 0, recovered.stderr
    assert "not healthy" in recovered.stderr
    assert json.loads(recovered.stdout) == first, "ports are reused, so endpoints stay stable"
    after = stack_processes(home.resolve())
    assert {k: len(v) for k, v in after.items()} == {"broker": 1, "connect": 1}
    assert after["connect"] != live["connect"]

    down = run_ikkai("stack", "down", env=env_for(home))
    assert down.returncode == 0, down.stderr
    assert stack_processes(home.resolve()) == {}
    for pid in after["broker"] + after["connect"]:
        assert not Path(f"/proc/{pid}").exists() or "ikkai.stack" not in Path(f"/proc/{pid}/cmdline").read_text(
            errors="replace"
        )
