"""Waiting on the real Kafka Connect worker in tests."""

from __future__ import annotations

import time

from deploy.connect_rest import ConnectClient, ConnectRestError


def wait_running(client: ConnectClient, name: str, timeout: float = 90) -> dict[str, object]:
    """Connector and every task RUNNING; a FAILED task fails the test at once with its trace."""
    deadline = time.monotonic() + timeout
    status: dict[str, object] = {}
    while time.monotonic() < deadline:
        try:
            status = client.connector_status(name)
        except ConnectRestError as exc:
            if not exc.not_found:
                raise
        else:
            tasks: list[dict[str, str]] = status.get("tasks") or []  # type: ignore[assignment]
            failed = [t for t in tasks if t["state"] == "FAILED"]
            if failed:
                raise AssertionError(f"{name} task failed: {failed[0].get('trace', '')[:2000]}")
            connector: dict[str, str] = status["connector"]  # type: ignore[assignment]
            if connector["state"] == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks):
                return status
        time.sleep(0.5)
    raise AssertionError(f"{name} not RUNNING after {timeout}s: {status}")
