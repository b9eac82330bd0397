"""Day-2 operations on any connector of a Connect cluster, bundle or not (``ikkai connect``).

List, describe (config with secrets masked, status, tasks, topics), offsets get / reset / alter
(KIP-875) and logger levels. Each returns plain JSON-able data; text renderings are in
deploy.connect_output. Offsets change only while a connector is STOPPED: ``change_offsets`` stops
it, waits until Connect reports it stopped, changes the offsets and brings it back to the state it
was in (RUNNING, PAUSED, or left STOPPED), saying each step through ``progress``.

A trace or message from Connect may quote a config value (a JDBC URL with its password, say): it is
redacted where it enters that data (``shown_trace``: literal secrets and URL credentials), so text
and ``-o json`` alike print it redacted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from connectors.secrets import REDACTED, is_placeholder, redact, secret_keys
from deploy.connect_rest import ConnectClient, ConnectRestError
from deploy.connector_status import trace_summary
from deploy.errors import ConnectorNotFound, ConnectorStateError
from ikkai.contract.masking import masked_prefix
from ikkai.errors import ConfigError
from ikkai.redaction import redact_urls

MAX_TRACE_CHARS = 4096  # what a view, `bundle status` or `connect describe` shows of a trace's summary

Progress = Callable[[str], None]
LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
SCOPES = ("worker", "cluster")


def _quiet(line: str) -> None:
    return None


def _tasks_summary(tasks: list[dict[str, Any]]) -> str:
    if not tasks:
        return "0"
    running = sum(1 for t in tasks if t.get("state") == "RUNNING")
    return f"{running}/{len(tasks)} RUNNING" + ("" if running == len(tasks) else " (" + _task_states(tasks) + ")")


def _task_states(tasks: list[dict[str, Any]]) -> str:
    return " ".join(f"{t.get('id')}:{t.get('state')}" for t in tasks)


def list_data(client: ConnectClient) -> dict[str, Any]:
    """Every connector of the cluster with its type, class, state and tasks (one request)."""
    rows = []
    for name, entry in sorted(client.connectors_expanded().items()):
        status, info = entry.get("status", {}), entry.get("info", {})
        tasks = list(status.get("tasks") or [])
        rows.append(
            {
                "name": name,
                "type": info.get("type") or status.get("type"),
                "class": (info.get("config") or {}).get("connector.class", ""),
                "state": status.get("connector", {}).get("state"),
                "tasks": [{"id": t.get("id"), "state": t.get("state")} for t in tasks],
                "tasks_summary": _tasks_summary(tasks),
            }
        )
    return {"connect_url": client.url, "connectors": rows}


def require_connector(client: ConnectClient, name: str) -> dict[str, Any]:
    """The connector's status; ``ConnectorNotFound`` (naming the ones that exist) when there is none."""
    try:
        return client.connector_status(name)
    except ConnectRestError as exc:
        if exc.not_found:
            raise ConnectorNotFound(name, client.url, sorted(client.connectors())) from None
        raise


def password_keys(client: ConnectClient, connector_class: str) -> frozenset[str]:
    """Keys the plugin types PASSWORD; none when the plugin cannot be asked (names still mark secrets)."""
    try:
        definitions = client.plugin_config_defs(connector_class)
    except ConnectRestError as exc:
        if exc.status is None:
            raise
        return frozenset()
    return frozenset(d["name"] for d in definitions if d.get("type") == "PASSWORD")


def shown_trace(trace: str | None, hidden: Collection[str] = ()) -> str | None:
    """What ikkai shows of a Connect trace: its summary, with the literal secret values ``hidden`` and the
    credentials of any URL in it (``ikkai.redaction``) replaced by ``REDACTED``, card numbers masked to their
    last four (``ikkai.contract.masking``: a task's trace may quote a record) and cut to ``MAX_TRACE_CHARS``. Pure."""
    summary = trace_summary(trace)
    if summary is None:
        return None
    for secret in hidden:
        summary = summary.replace(secret, REDACTED)
    return masked_prefix(redact_urls(summary), MAX_TRACE_CHARS)


def describe_data(client: ConnectClient, name: str) -> dict[str, Any]:
    """Config (secrets masked: PASSWORD-typed keys and keys named like secrets), status, tasks and topics."""
    status = require_connector(client, name)
    info = client.connector_info(name)
    passwords = password_keys(client, (info.get("config") or {}).get("connector.class", ""))
    return describe_view(name, status, info, passwords, client.connector_topics(name))


def describe_view(
    name: str, status: Mapping[str, Any], info: Mapping[str, Any], passwords: Collection[str], topics: Collection[str]
) -> dict[str, Any]:
    """``describe_data`` from Connect's answers: status, info, the plugin's PASSWORD keys, the topics. Pure."""
    config = info.get("config") or {}
    hidden = [v for k in secret_keys(config, passwords) if (v := config[k]) and not is_placeholder(v)]
    connector = status.get("connector", {})
    return {
        "name": name,
        "type": info.get("type") or status.get("type"),
        "class": config.get("connector.class", ""),
        "state": connector.get("state"),
        "worker": connector.get("worker_id"),
        "trace": shown_trace(connector.get("trace"), hidden),
        "config": dict(sorted(redact(config, passwords).items())),
        "tasks": [
            {
                "id": t.get("id"),
                "state": t.get("state"),
                "worker": t.get("worker_id"),
                "trace": shown_trace(t.get("trace"), hidden),
            }
            for t in status.get("tasks") or []
        ],
        "topics": sorted(topics),
    }


def offsets_data(client: ConnectClient, name: str) -> dict[str, Any]:
    """``{"connector": name, "offsets": [{"partition": {...}, "offset": {...}}]}``: the shape ``alter`` takes."""
    require_connector(client, name)
    return {"connector": name, "offsets": list(client.connector_offsets(name).get("offsets") or [])}


def read_offsets_file(path: Path) -> dict[str, Any]:
    """The body of ``PATCH /connectors/{name}/offsets`` from a file, checked before the connector is stopped."""
    import json

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(str(path), "(file)", f"cannot be read: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from exc
    example = (
        'as `ikkai connect offsets get NAME -o json` prints it: {"offsets": [{"partition": {...}, "offset": {...}}]}'
    )
    if not isinstance(data, dict) or not isinstance(data.get("offsets"), list) or not data["offsets"]:
        raise ConfigError(str(path), "offsets", "must be a non-empty list under the key offsets", fix=example)
    for i, entry in enumerate(data["offsets"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("partition"), dict) or "offset" not in entry:
            raise ConfigError(
                str(path), f"offsets[{i}]", "needs a partition mapping and an offset (a mapping, or null)", fix=example
            )
        if entry["offset"] is not None and not isinstance(entry["offset"], dict):
            raise ConfigError(str(path), f"offsets[{i}].offset", "must be a mapping or null", fix=example)
    return {"offsets": data["offsets"]}


def change_offsets(
    client: ConnectClient,
    name: str,
    offsets: Mapping[str, Any] | None,
    *,
    progress: Progress = _quiet,
    stop_timeout: float = 60.0,
    poll_interval: float = 0.5,
) -> dict[str, Any]:
    """Alter (``offsets`` given) or reset (None) a connector's offsets, stopping it first as KIP-875 requires.

    The connector is brought back to the state it was in, even when Connect refuses the change.
    """
    status = require_connector(client, name)
    before = str(status.get("connector", {}).get("state"))
    verb = "reset" if offsets is None else "alter"
    if before != "STOPPED":
        progress(f"{name}: {before}; stopping it (Connect changes offsets only of a STOPPED connector, KIP-875)")
        client.stop_connector(name)
        _wait_stopped(client, name, before, stop_timeout, poll_interval, progress)
    try:
        progress(f"{name}: STOPPED; {'resetting' if offsets is None else 'altering'} its offsets")
        answer = (
            client.reset_connector_offsets(name) if offsets is None else client.alter_connector_offsets(name, offsets)
        )
    finally:
        restored = _restore(client, name, before, progress)
    return {
        "connector": name,
        "action": verb,
        "message": redact_urls((answer or {}).get("message", "")),
        "state_before": before,
        "state_after": restored,
    }


def _wait_stopped(
    client: ConnectClient, name: str, before: str, timeout: float, interval: float, progress: Progress
) -> None:
    deadline = time.monotonic() + timeout
    state, tasks = before, []
    while time.monotonic() < deadline:
        status = client.connector_status(name)
        state, tasks = str(status.get("connector", {}).get("state")), list(status.get("tasks") or [])
        if state == "STOPPED" and not tasks:
            return
        time.sleep(interval)
    _restore(client, name, before, progress)
    raise ConnectorStateError(
        name,
        state + (f" with tasks {_task_states(tasks)}" if tasks else ""),
        "STOPPED",
        f"it did not stop within {timeout:g}s; its offsets were not changed and its state was restored",
        fix=f"see `ikkai connect describe {name}`, then try again",
    )


def _restore(client: ConnectClient, name: str, before: str, progress: Progress) -> str:
    """Back to the state before the offsets changed: PAUSED is paused again, STOPPED stays, anything else runs."""
    if before == "STOPPED":
        return "STOPPED"
    if before == "PAUSED":
        progress(f"{name}: pausing it again (it was PAUSED)")
        client.pause_connector(name)
        return "PAUSED"
    progress(f"{name}: resuming it (it was {before})")
    client.resume_connector(name)
    return "RUNNING"


def loggers_data(client: ConnectClient) -> dict[str, Any]:
    """The loggers with an explicit level on the worker that answers."""
    loggers = client.loggers()
    return {
        "connect_url": client.url,
        "loggers": [
            {"logger": n, "level": v.get("level"), "last_modified": v.get("last_modified")}
            for n, v in sorted(loggers.items())
        ],
    }


def set_logger(client: ConnectClient, name: str, level: str, scope: str) -> dict[str, Any]:
    level = level.upper()
    if level not in LEVELS:
        raise ConfigError("--level", level, "is not a log level", fix=f"one of {', '.join(LEVELS)}")
    changed = client.set_logger_level(name, level, scope=scope)
    return {"logger": name, "level": level, "scope": scope, "changed": sorted(changed)}
