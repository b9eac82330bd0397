"""A thin client for the Kafka Connect REST API: one method per endpoint, one error mapping.

Retries what Connect documents as transient: 409 (a rebalance is in progress), 408, 429 and
5xx, with jittered exponential backoff inside a deadline. Everything else becomes a
``ConnectRestError`` that renders as ``METHOD PATH returned STATUS: message``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import requests

from ikkai.errors import IkkaiError

RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


class ConnectRestError(IkkaiError):
    def __init__(self, method: str, path: str, status: int | None, message: str, url: str) -> None:
        outcome = f"returned {status}" if status is not None else "failed"
        super().__init__(f"{method} {path} {outcome}: {message}", fix=None if status else f"is Connect up at {url}?")
        self.method = method
        self.path = path
        self.status = status
        self.connect_message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404


def backoff_delays(
    attempts: int, base: float = 0.25, cap: float = 5.0, rng: random.Random | None = None
) -> list[float]:
    """Full-jitter exponential backoff: attempt k waits uniform(0, min(cap, base * 2**k))."""
    rng = rng or random.Random()  # noqa: S311 - jitter spreads retries; it guards nothing
    return [rng.uniform(0, min(cap, base * 2**k)) for k in range(attempts)]


class ConnectClient:
    def __init__(self, url: str, *, timeout: float = 30.0, retry_deadline: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retry_deadline = retry_deadline
        self.session = requests.Session()
        self.calls: list[tuple[str, str]] = []  # (method, path) of every request sent, for audits and tests

    # -- endpoints -----------------------------------------------------------------------------

    def root(self) -> dict[str, Any]:
        return self._call("GET", "/")  # type: ignore[no-any-return]

    def connector_plugins(self) -> list[dict[str, Any]]:
        return self._call("GET", "/connector-plugins")  # type: ignore[no-any-return]

    def connectors(self) -> list[str]:
        return self._call("GET", "/connectors")  # type: ignore[no-any-return]

    def connector_config(self, name: str) -> dict[str, str]:
        return self._call("GET", f"/connectors/{_seg(name)}/config")  # type: ignore[no-any-return]

    def put_connector_config(self, name: str, config: Mapping[str, str]) -> dict[str, Any]:
        return self._call("PUT", f"/connectors/{_seg(name)}/config", json=dict(config))  # type: ignore[no-any-return]

    def connector_status(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/connectors/{_seg(name)}/status")  # type: ignore[no-any-return]

    def delete_connector(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{_seg(name)}")

    def create_connector(self, name: str, config: Mapping[str, str], initial_state: str = "RUNNING") -> dict[str, Any]:
        """POST /connectors with ``initial_state`` (RUNNING, PAUSED or STOPPED; Connect 3.7+, KIP-980)."""
        body = {"name": name, "config": dict(config), "initial_state": initial_state}
        return self._call("POST", "/connectors", json=body)  # type: ignore[no-any-return]

    def connectors_expanded(self) -> dict[str, dict[str, Any]]:
        """Every connector with its status and info (config, type, tasks) in one call."""
        return self._call("GET", "/connectors?expand=status&expand=info")  # type: ignore[no-any-return]

    def connector_tasks(self, name: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/connectors/{_seg(name)}/tasks")  # type: ignore[no-any-return]

    def pause_connector(self, name: str) -> None:
        self._call("PUT", f"/connectors/{_seg(name)}/pause")

    def resume_connector(self, name: str) -> None:
        self._call("PUT", f"/connectors/{_seg(name)}/resume")

    def stop_connector(self, name: str) -> None:
        self._call("PUT", f"/connectors/{_seg(name)}/stop")

    def restart_connector(self, name: str, *, include_tasks: bool = False, only_failed: bool = False) -> Any:
        query = f"?includeTasks={str(include_tasks).lower()}&onlyFailed={str(only_failed).lower()}"
        return self._call("POST", f"/connectors/{_seg(name)}/restart{query}")

    def restart_task(self, name: str, task: int) -> None:
        self._call("POST", f"/connectors/{_seg(name)}/tasks/{task}/restart")

    def plugin_config_defs(self, connector_class: str) -> list[dict[str, Any]]:
        """The plugin's config definitions (name, type — PASSWORD marks secrets —, default, docs)."""
        return self._call("GET", f"/connector-plugins/{_seg(connector_class)}/config")  # type: ignore[no-any-return]

    def validate_config(self, connector_class: str, config: Mapping[str, str]) -> dict[str, Any]:
        """Connect's own validation: ``error_count`` and per-key ``configs[].value.errors``. Writes nothing."""
        path = f"/connector-plugins/{_seg(connector_class)}/config/validate"
        return self._call("PUT", path, json=dict(config))  # type: ignore[no-any-return]

    @property
    def writes(self) -> list[tuple[str, str]]:
        """Requests sent that change the cluster (everything but reads and validation)."""
        return [(m, p) for m, p in self.calls if m != "GET" and not p.endswith("/config/validate")]

    # -- transport -----------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, json: Any = None) -> Any:
        deadline = time.monotonic() + self.retry_deadline
        delays = iter(backoff_delays(30))
        while True:
            self.calls.append((method, path))
            try:
                response = self.session.request(method, self.url + path, json=json, timeout=self.timeout)
            except requests.ConnectionError as exc:
                error = ConnectRestError(method, path, None, type(exc).__name__, self.url)
                status = None
            else:
                if response.status_code < 300:
                    return response.json() if response.content else None
                status = response.status_code
                error = ConnectRestError(method, path, status, _message(response), self.url)
            retriable = status is None or status in RETRIED_STATUSES  # None: no answer (worker restarting)
            delay = next(delays, None)
            if not retriable or delay is None or time.monotonic() + delay > deadline:
                raise error
            time.sleep(delay)


def _seg(name: str) -> str:
    return quote(name, safe="")


def _message(response: requests.Response) -> str:
    try:
        body = response.json()
        return str(body.get("message") or body)
    except ValueError:
        return response.text.strip()[:300] or response.reason
