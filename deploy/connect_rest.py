"""A thin client for the Kafka Connect REST API: one method per endpoint, one error mapping.

Retries what Connect documents as transient: 409 (a rebalance is in progress), 408, 429 and
5xx, with jittered exponential backoff inside a deadline. Everything else becomes a
``ConnectRestError`` that renders as ``METHOD PATH returned STATUS: message``. Validation is the exception:
a 5xx from ``PUT .../config/validate`` is the plugin's own failure on that config (a config provider that
cannot read its file answers 500 in milliseconds, every time), so it is raised at once, never retried for
the deadline; only 408, 409 and 429 are retried there (``VALIDATE_RETRIED``).

Reaching the worker is judged apart from its answers. Connecting has its own short timeout
(``connect_timeout``, default 1 s) and reading its own (``read_timeout``). A worker that was
never reached (refused, unknown host, no answer to connect) raises ``ConnectUnreachable`` at
once: nothing is retried for a minute in silence (nor is a first request that got no answer
within ``read_timeout``). Once the client has had one answer, a lost connection is taken for a
worker restarting and retried inside ``retry_deadline``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import requests
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from ikkai.errors import IkkaiError
from ikkai.settings import ConnectAuth

RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
VALIDATE_RETRIED = frozenset({408, 409, 429})  # a validate 5xx is the plugin failing on the config: shown at once
CONNECT_TIMEOUT = 1.0  # seconds to open a TCP connection: a LAN or VPN hop takes milliseconds
READ_TIMEOUT = 30.0  # seconds for an answer once connected: validation of a big config can take a while


class ConnectRestError(IkkaiError):
    def __init__(self, method: str, path: str, status: int | None, message: str, url: str) -> None:
        outcome = f"returned {status}" if status is not None else "failed"
        super().__init__(f"{method} {path} {outcome}: {message}", fix=None if status else f"is Connect up at {url}?")
        self.method = method
        self.path = path
        self.status = status
        self.connect_message = message
        self.url = url

    @property
    def not_found(self) -> bool:
        return self.status == 404


class ConnectAccessDenied(ConnectRestError):
    """The worker answered 401 or 403 (its basic-auth REST extension) or refused the TLS handshake."""

    def __init__(self, method: str, path: str, url: str, problem: str, *, cluster: str | None, fix: str) -> None:
        IkkaiError.__init__(
            self, f"Kafka Connect at {url}{f' ({cluster})' if cluster else ''}: {problem} ({method} {path})", fix=fix
        )
        self.method = method
        self.path = path
        self.status = None
        self.connect_message = problem
        self.url = url
        self.cluster = cluster


class ConnectUnreachable(ConnectRestError):
    """No TCP connection to the Connect worker could be opened: refused, unknown host or no answer in time.

    ``reason`` is ``connection refused``, ``unknown host``, ``connect timeout`` or ``cannot connect: …``;
    ``cluster`` names the environment the URL belongs to, when the caller knows it.
    """

    def __init__(
        self, method: str, path: str, url: str, reason: str, *, cluster: str | None = None, timeout: float
    ) -> None:
        detail = f"no answer within {timeout:g}s" if reason == "connect timeout" else reason
        IkkaiError.__init__(
            self,
            f"Kafka Connect at {url}{f' ({cluster})' if cluster else ''} is unreachable: {detail} ({method} {path})",
            fix=f"check that a Connect worker listens there (curl {url}/; `ikkai stack status` for the embedded "
            "stack) or point at another one with --connect-url or connect_url in the clusters file",
        )
        self.method = method
        self.path = path
        self.status = None
        self.connect_message = reason
        self.url = url
        self.reason = reason
        self.cluster = cluster
        self.timeout = timeout


def backoff_delays(
    attempts: int, base: float = 0.25, cap: float = 5.0, rng: random.Random | None = None
) -> list[float]:
    """Full-jitter exponential backoff: attempt k waits uniform(0, min(cap, base * 2**k))."""
    rng = rng or random.Random()  # noqa: S311 - jitter spreads retries; it guards nothing
    return [rng.uniform(0, min(cap, base * 2**k)) for k in range(attempts)]


class ConnectClient:
    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        retry_deadline: float = 60.0,
        cluster: str | None = None,
        auth: ConnectAuth | None = None,
    ) -> None:
        """``auth``: basic-auth user, the CA of the worker's certificate, a client certificate (``ConnectAuth``)."""
        self.url = url.rstrip("/")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.retry_deadline = retry_deadline
        self.cluster = cluster  # e.g. "env dev": named in the error when the worker cannot be reached
        self.session = requests.Session()
        self.auth = auth or ConnectAuth()
        # Per request, not on the session: requests lets REQUESTS_CA_BUNDLE override a session's verify.
        self._options: dict[str, Any] = self.auth.requests_options()
        self.calls: list[tuple[str, str]] = []  # (method, path) of every request sent, for audits and tests
        self.reached = False  # True once the worker answered; only then is a lost connection retried

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
        return self._call("PUT", path, json=dict(config), retried=VALIDATE_RETRIED)  # type: ignore[no-any-return]

    def connector_info(self, name: str) -> dict[str, Any]:
        """Name, config, tasks and type of one connector."""
        return self._call("GET", f"/connectors/{_seg(name)}")  # type: ignore[no-any-return]

    def connector_topics(self, name: str) -> list[str]:
        """The topics the connector used since it was created or its topics reset (KIP-558)."""
        body = self._call("GET", f"/connectors/{_seg(name)}/topics") or {}
        return list(body.get(name, {}).get("topics") or [])

    def connector_offsets(self, name: str) -> dict[str, Any]:
        """``{"offsets": [{"partition": {...}, "offset": {...}}]}`` (KIP-875)."""
        return self._call("GET", f"/connectors/{_seg(name)}/offsets")  # type: ignore[no-any-return]

    def alter_connector_offsets(self, name: str, offsets: Mapping[str, Any]) -> dict[str, Any]:
        """PATCH the offsets (KIP-875); Connect refuses unless the connector is STOPPED."""
        return self._call("PATCH", f"/connectors/{_seg(name)}/offsets", json=dict(offsets))  # type: ignore[no-any-return]

    def reset_connector_offsets(self, name: str) -> dict[str, Any]:
        """DELETE every offset of the connector (KIP-875); Connect refuses unless it is STOPPED."""
        return self._call("DELETE", f"/connectors/{_seg(name)}/offsets")  # type: ignore[no-any-return]

    def loggers(self) -> dict[str, dict[str, Any]]:
        """Every logger with an explicit level on the worker that answers: ``{name: {level, last_modified}}``."""
        return self._call("GET", "/admin/loggers")  # type: ignore[no-any-return]

    def logger(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/admin/loggers/{_seg(name)}")  # type: ignore[no-any-return]

    def set_logger_level(self, name: str, level: str, *, scope: str = "worker") -> list[str]:
        """Set a logger's level on the worker that answers (``worker``) or on every worker (``cluster``, KIP-976).

        Returns the loggers whose level changed (worker scope); cluster scope is asynchronous: [].
        """
        body = self._call("PUT", f"/admin/loggers/{_seg(name)}?scope={scope}", json={"level": level})
        return list(body) if isinstance(body, list) else []

    @property
    def writes(self) -> list[tuple[str, str]]:
        """Requests sent that change the cluster (everything but reads and validation)."""
        return [(m, p) for m, p in self.calls if m != "GET" and not p.endswith("/config/validate")]

    # -- transport -----------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, json: Any = None, retried: frozenset[int] = RETRIED_STATUSES) -> Any:
        deadline = time.monotonic() + self.retry_deadline
        delays = iter(backoff_delays(30))
        timeout = (self.connect_timeout, self.read_timeout)
        while True:
            self.calls.append((method, path))
            try:
                response = self.session.request(method, self.url + path, json=json, timeout=timeout, **self._options)
            except requests.exceptions.SSLError as exc:
                refused_alert = _client_certificate_alert(exc)
                raise ConnectAccessDenied(
                    method,
                    path,
                    self.url,
                    f"TLS failed: the worker refused the client certificate (TLS alert {refused_alert})"
                    if refused_alert
                    else f"TLS failed: {_ssl_reason(exc)}",
                    cluster=self.cluster,
                    fix=(
                        'use a client certificate signed by a CA the worker\'s truststore holds ("client_cert" in '
                        "the credentials file: IKKAI_CONNECT_CREDENTIALS, or the clusters file's credentials)"
                        if refused_alert
                        else 'name the CA that signed the worker\'s certificate ("ca" in the credentials file: '
                        "IKKAI_CONNECT_CREDENTIALS, or the clusters file's credentials)"
                    ),
                ) from None
            except (requests.ConnectionError, requests.Timeout) as exc:
                reason = unreachable_reason(exc)
                if reason is not None and not self.reached:
                    raise ConnectUnreachable(
                        method, path, self.url, reason, cluster=self.cluster, timeout=self.connect_timeout
                    ) from None
                what = reason or (f"no answer within {self.read_timeout:g}s" if isinstance(exc, requests.Timeout)
                                  else f"connection lost ({type(exc).__name__})")  # fmt: skip
                error = ConnectRestError(method, path, None, what, self.url)
                if not self.reached:
                    raise error from None  # it took the connection and said nothing: not a restart either
                status = None
            else:
                self.reached = True
                if response.status_code < 300:
                    return response.json() if response.content else None
                if response.status_code in (401, 403):
                    who = f"as {self.auth.username!r}" if self.auth.username else "without credentials"
                    raise ConnectAccessDenied(
                        method,
                        path,
                        self.url,
                        f"{response.status_code} {response.reason}: refused {who}",
                        cluster=self.cluster,
                        fix="check the user and password in the credentials file (IKKAI_CONNECT_CREDENTIALS, or "
                        "the clusters file's credentials) against the worker's basic-auth users",
                    )
                status = response.status_code
                error = ConnectRestError(method, path, status, _message(response), self.url)
            retriable = status is None or status in retried  # None: no answer (worker restarting)
            delay = next(delays, None)
            if not retriable or delay is None or time.monotonic() + delay > deadline:
                raise error
            time.sleep(delay)


# TLS alerts the worker sends when it does not accept the client certificate it was shown
CLIENT_CERTIFICATE_ALERTS = ("ALERT_CERTIFICATE_UNKNOWN", "ALERT_UNKNOWN_CA", "ALERT_BAD_CERTIFICATE",
                             "ALERT_CERTIFICATE_REQUIRED", "ALERT_UNSUPPORTED_CERTIFICATE")  # fmt: skip


def _client_certificate_alert(exc: BaseException) -> str | None:
    """``certificate unknown``, ``unknown ca``, ...: the worker did not accept our client certificate; else None."""
    text = str(exc)
    alert = next((alert for alert in CLIENT_CERTIFICATE_ALERTS if alert in text), None)
    return alert.removeprefix("ALERT_").replace("_", " ").lower() if alert else None


def _ssl_reason(exc: BaseException) -> str:
    text = str(exc)
    return "certificate verify failed" if "CERTIFICATE_VERIFY_FAILED" in text else text.rsplit(": ", 1)[-1][:200]


def unreachable_reason(exc: BaseException) -> str | None:
    """Why no connection could be opened (``refused``, ``unknown host``, ``connect timeout``), or None when
    one was opened and then lost or timed out reading: a worker that answered before may be restarting."""
    if isinstance(exc, requests.ConnectTimeout):
        return "connect timeout"
    chain: list[BaseException] = []
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if any(current is seen for seen in chain):
            continue
        chain.append(current)
        linked = [*current.args, getattr(current, "reason", None), current.__cause__, current.__context__]
        pending += [e for e in linked if isinstance(e, BaseException)]
    if any(isinstance(e, NameResolutionError) for e in chain):
        return "unknown host"
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused"
    opening = next((e for e in chain if isinstance(e, NewConnectionError)), None)
    if opening is not None:  # no route to host, network unreachable, ...
        return "cannot connect: " + str(opening).rsplit(": ", 1)[-1]
    if any(isinstance(e, ConnectTimeoutError) for e in chain):
        return "connect timeout"
    return None


def _seg(name: str) -> str:
    return quote(name, safe="")


def _message(response: requests.Response) -> str:
    """Connect's JSON ``message``; for an HTML page (the worker's web server is up, its REST resources are not yet:
    a worker starting or restarting), a sentence saying so instead of the page."""
    try:
        body = response.json()
        return str(body.get("message") or body)
    except ValueError:
        text = response.text.strip()
        if "html" in response.headers.get("Content-Type", "").lower() or text[:1] == "<":
            answered = f"{response.status_code} {response.reason}"
            return f"the worker answered with a web page, not its REST API ({answered}): it is starting or restarting"
        return text[:300] or response.reason
