"""The reconciler: validate → plan → apply → wait → (rollback) → prune, against one Connect cluster.

The I/O shell around the pure parts (connectors.render, connectors.lint, deploy.plan). Reads
live state in one call (``GET /connectors?expand=status&expand=info``), validates only new or
changed connectors, writes only what drifted, so an unchanged bundle is applied with zero
write calls. Nothing is written unless every connector of the bundle renders, lints and
validates. After writing it waits until each connector *and every task* reached the target
state; when one does not, the previous configs are restored and the failure reported with
the task's trace. A trace or validation message may quote a config value (a JDBC URL with its
password, say): literal secrets and URL credentials are cut out of it where it enters ikkai's data
(``ApplyFailed``, ``status_rows``, the validation errors), so every output gets it redacted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from connectors.lint import Finding, PluginCatalog, PluginInfo, lint_bundle, require_clean
from connectors.render import RenderedBundle
from connectors.secrets import REDACTED, is_placeholder, secret_keys
from deploy.connect_ops import shown_trace
from deploy.connect_rest import ConnectClient, ConnectRestError
from deploy.connector_status import failure, reached, trace_summary
from deploy.plan import (
    CONNECT_STATE,
    CREATE,
    DELETE,
    UPDATE,
    ConnectorPlan,
    Plan,
    connector_plan,
    owned_leftovers,
    prune_plan,
)
from ikkai.contract.masking import mask_card_numbers
from ikkai.errors import IkkaiError
from ikkai.redaction import redact_urls

STABLE_POLLS = 3  # a state counts once seen this many polls in a row (status lags a config write)
HEARTBEAT = 10.0  # seconds between "still waiting" lines when no state changed

Progress = Callable[[str], None]  # receives one line of progress for a person (the CLI writes it to stderr)


class ValidationFailed(IkkaiError):
    """Connect rejected the config of one or more connectors; nothing was written."""

    def __init__(self, bundle: str, errors: Mapping[str, tuple[tuple[str, str], ...]]) -> None:
        lines = [f"{name}: {key}: {message}" for name, pairs in errors.items() for key, message in pairs]
        super().__init__(
            f"bundle {bundle}: Connect rejected {len(lines)} setting(s); nothing was written: " + "; ".join(lines),
            fix="fix the values or templates named above",
        )
        self.bundle = bundle
        self.errors = dict(errors)


class ApplyFailed(IkkaiError):
    """A connector or task did not reach its target state; the previous configs were restored."""

    def __init__(self, connector: str, state: str, trace: str, rolled_back: list[str]) -> None:
        trace = mask_card_numbers(redact_urls(trace))  # a task's trace may quote a record's card number
        first = trace_summary(trace) or "no trace"
        super().__init__(
            f"connector {connector} is {state} after apply: {first}; "
            f"rolled back: {', '.join(rolled_back) or 'nothing'}",
            fix="see `ikkai bundle status` for the full trace, fix the config and apply again",
        )
        self.connector = connector
        self.state = state
        self.trace = trace
        self.rolled_back = rolled_back


@dataclass(frozen=True)
class LiveConnector:
    config: Mapping[str, str]
    status: Mapping[str, Any]

    @property
    def state(self) -> str | None:
        return self.status.get("connector", {}).get("state")  # type: ignore[no-any-return]

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return list(self.status.get("tasks") or [])


@dataclass
class ApplyResult:
    plan: Plan
    written: list[str] = field(default_factory=list)  # connectors whose config or state was written
    deleted: list[str] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.as_dict(), "written": self.written, "deleted": self.deleted, "states": self.states}


class Reconciler:
    def __init__(
        self,
        client: ConnectClient,
        *,
        wait_timeout: float = 120.0,
        poll_interval: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        progress: Progress | None = None,
    ) -> None:
        self.client = client
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.sleep = sleep
        self.progress = progress

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    # -- reads ---------------------------------------------------------------------------------

    def catalog(self, rendered: RenderedBundle) -> PluginCatalog:
        """Kind and PASSWORD-typed keys of every connector class the bundle uses."""
        kinds = {p["class"]: p.get("type", "unknown") for p in self.client.connector_plugins()}
        plugins = {}
        for cls in sorted({c.connector_class for c in rendered.connectors if c.connector_class}):
            if cls not in kinds:
                plugins[cls] = PluginCatalog().info(cls)  # judged by its name; validation reports it missing
                continue
            defs = self.client.plugin_config_defs(cls)
            passwords = frozenset(d["name"] for d in defs if d.get("type") == "PASSWORD")
            plugins[cls] = PluginInfo(kind=str(kinds[cls]), password_keys=passwords)
        return PluginCatalog(plugins)

    def live(self) -> dict[str, LiveConnector]:
        expanded = self.client.connectors_expanded()
        return {
            name: LiveConnector(config=entry.get("info", {}).get("config", {}), status=entry.get("status", {}))
            for name, entry in expanded.items()
        }

    def lint(self, rendered: RenderedBundle, catalog: PluginCatalog | None = None) -> list[Finding]:
        return lint_bundle(rendered, catalog if catalog is not None else self.catalog(rendered))

    # -- plan ----------------------------------------------------------------------------------

    def plan(self, rendered: RenderedBundle, *, prune: bool = False) -> Plan:
        """Lint (raises on open findings), diff against live, validate what would be written."""
        catalog = self.catalog(rendered)
        require_clean(rendered, lint_bundle(rendered, catalog))
        live = self.live()
        plans: list[ConnectorPlan] = []
        for c in rendered.connectors:
            current = live.get(c.name)
            passwords = catalog.info(c.connector_class).password_keys
            p = connector_plan(
                c.name,
                c.config,
                c.state,
                current.config if current else None,
                current.state if current else None,
                passwords,
            )
            if p.action in (CREATE, UPDATE):
                errors = self._validate(c.connector_class, c.config, passwords)
                p = ConnectorPlan(**{**p.__dict__, "validation_errors": errors})
            if current is not None:
                failed = tuple(sorted(t.get("id", -1) for t in current.tasks if t.get("state") == "FAILED"))
                p = ConnectorPlan(**{**p.__dict__, "failed_tasks": failed})
            plans.append(p)
        leftovers = owned_leftovers(live, rendered.owner_prefix, {c.name for c in rendered.connectors})
        if prune:
            plans += [prune_plan(n, live[n].config, live[n].state) for n in leftovers]
        ordered = tuple(sorted(plans, key=lambda p: p.name))
        return Plan(rendered.name, rendered.env, ordered, unpruned=() if prune else tuple(leftovers))

    def _validate(self, cls: str, config: Mapping[str, str], passwords: frozenset[str]) -> tuple[tuple[str, str], ...]:
        if not cls:
            return (("connector.class", "missing: the template must set connector.class"),)
        try:
            result = self.client.validate_config(cls, config)
        except ConnectRestError as exc:
            if exc.status in (400, 404, 500):
                return (("connector.class", redact_urls(exc.connect_message)),)
            raise
        hidden = [config[k] for k in secret_keys(config, passwords) if config[k] and not is_placeholder(config[k])]
        return validation_errors(result, hidden)

    # -- apply ---------------------------------------------------------------------------------

    def apply(self, rendered: RenderedBundle, *, prune: bool = False) -> ApplyResult:
        plan = self.plan(rendered, prune=prune)
        invalid = {c.name: c.validation_errors for c in plan.connectors if c.validation_errors}
        if invalid:
            raise ValidationFailed(rendered.name, invalid)
        result = ApplyResult(plan=plan)
        live = self.live() if plan.pending else {}
        previous = {c.name: live.get(c.name) for c in plan.connectors}
        touched: list[ConnectorPlan] = []
        # Task configs before an update: their change shows Connect has taken the new config,
        # so the RUNNING (or FAILED) status of the old tasks is not mistaken for the new ones'.
        tasks_before = {p.name: self.client.connector_tasks(p.name) for p in plan.connectors if p.action == UPDATE}
        try:
            for p in plan.connectors:
                if p.action == DELETE or not p.pending:
                    continue
                touched.append(p)
                config = rendered.connector(p.name).config
                if p.action == CREATE and p.target_state != "running":
                    # Created in its target state: a stopped CDC source must not start a snapshot first.
                    self.client.create_connector(p.name, config, CONNECT_STATE[p.target_state or "running"])
                else:
                    if p.action in (CREATE, UPDATE):
                        self.client.put_connector_config(p.name, config)
                    self._drive_state(p)
                target = CONNECT_STATE[p.target_state or "running"]
                self._say(f"{p.name}: {'created' if p.action == CREATE else 'written'}, target {target}")
                result.written.append(p.name)
            if touched:
                result.states.update(self._wait(touched, tasks_before))
        except ApplyFailed as failed:
            self._say(f"{failed.connector}: {failed.state}; rolling back {', '.join(p.name for p in touched)}")
            rolled_back = self._rollback(touched, previous)
            trace = _cut_secrets(failed.trace, rendered)
            raise ApplyFailed(failed.connector, failed.state, trace, rolled_back) from None
        for p in plan.connectors:
            if p.action == DELETE:
                self.client.delete_connector(p.name)
                result.deleted.append(p.name)
            elif p.name not in result.states:
                note = f" (FAILED tasks: {', '.join(map(str, p.failed_tasks))})" if p.failed_tasks else ""
                result.states[p.name] = (p.live_state or "UNKNOWN") + note
        return result

    def _drive_state(self, p: ConnectorPlan) -> None:
        if p.target_state == "paused" and p.live_state != "PAUSED":
            self.client.pause_connector(p.name)
        elif p.target_state == "stopped" and p.live_state != "STOPPED":
            self.client.stop_connector(p.name)
        elif p.target_state == "running" and p.live_state in ("PAUSED", "STOPPED"):
            self.client.resume_connector(p.name)

    def _wait(self, touched: list[ConnectorPlan], tasks_before: Mapping[str, Any]) -> dict[str, str]:
        """Poll every touched connector at once (one expanded GET per poll) until all reached their target.

        An updated connector's status counts only once its task configs changed (Connect took the
        new config) or ``settle`` seconds passed, whichever is first.
        """
        started = time.monotonic()
        deadline = started + self.wait_timeout
        settle = min(10.0, self.wait_timeout / 2)
        good = dict.fromkeys((p.name for p in touched), 0)
        bad = dict(good)
        stale = {name for name in tasks_before if name in good}
        statuses: dict[str, Mapping[str, Any]] = {}
        said: dict[str, str] = {}
        last_said = started
        self._say(f"waiting up to {self.wait_timeout:g}s for {len(touched)} connector(s) and their tasks")
        while True:
            live = self.live()
            for p in touched:
                assert p.target_state is not None
                if p.name in stale:
                    now_tasks = self._tasks_or_none(p.name)
                    if time.monotonic() - started < settle and now_tasks in (None, tasks_before[p.name]):
                        continue
                    stale.discard(p.name)
                status = statuses[p.name] = live[p.name].status if p.name in live else {}
                line = _status_line(status)
                if said.get(p.name) != line:
                    said[p.name] = line
                    last_said = time.monotonic()
                    self._say(f"{p.name}: {line}")
                good[p.name] = good[p.name] + 1 if reached(p.target_state, status) else 0
                failed = failure(status)
                bad[p.name] = bad[p.name] + 1 if failed else 0
                if failed and bad[p.name] >= STABLE_POLLS:
                    raise ApplyFailed(p.name, failed[0], failed[1], [])
            if all(n >= STABLE_POLLS for n in good.values()):
                return {p.name: CONNECT_STATE[p.target_state or "running"] for p in touched}
            if time.monotonic() >= deadline:
                break
            if time.monotonic() - last_said >= HEARTBEAT:
                last_said = time.monotonic()
                waiting = [p.name for p in touched if good[p.name] < STABLE_POLLS]
                elapsed = last_said - started
                self._say(f"still waiting for {', '.join(waiting)} ({elapsed:.0f}s of {self.wait_timeout:g}s)")
            self.sleep(self.poll_interval)
        late = next(p for p in touched if good[p.name] < STABLE_POLLS)
        status = statuses.get(late.name, {})
        state = status.get("connector", {}).get("state", "absent")
        raise ApplyFailed(
            late.name,
            f"{state}, not {CONNECT_STATE[late.target_state or 'running']} after {self.wait_timeout:.0f}s",
            (failure(status) or ("", ""))[1],
            [],
        )

    def _tasks_or_none(self, name: str) -> Any:
        try:
            return self.client.connector_tasks(name)
        except ConnectRestError as exc:
            if exc.status in (404, 409):  # gone, or a rebalance is rewriting the tasks right now
                return None
            raise

    def _rollback(self, touched: list[ConnectorPlan], previous: Mapping[str, LiveConnector | None]) -> list[str]:
        restored = []
        for p in touched:
            before = previous.get(p.name)
            try:
                if before is None:
                    self.client.delete_connector(p.name)
                else:
                    if p.action == UPDATE:
                        self.client.put_connector_config(p.name, before.config)
                    if before.state == "PAUSED":
                        self.client.pause_connector(p.name)
                    elif before.state == "STOPPED":
                        self.client.stop_connector(p.name)
                    elif p.target_state != "running":
                        self.client.resume_connector(p.name)
            except ConnectRestError:
                continue  # reported by omission: the connector is not in the rolled-back list
            restored.append(p.name)
        return restored

    # -- day-2 operations ----------------------------------------------------------------------

    def status(self, rendered: RenderedBundle) -> list[dict[str, Any]]:
        return status_rows(rendered, self.live())

    def restart(self, rendered: RenderedBundle, *, failed_only: bool) -> list[str]:
        live = self.live()
        restarted = []
        for c in rendered.connectors:
            current = live.get(c.name)
            if current is None:
                continue
            if failed_only and not failure(current.status):
                continue
            self.client.restart_connector(c.name, include_tasks=True, only_failed=failed_only)
            restarted.append(c.name)
        return restarted

    def delete(self, rendered: RenderedBundle) -> list[str]:
        live = set(self.client.connectors())
        deleted = []
        for c in rendered.connectors:
            if c.name in live:
                self.client.delete_connector(c.name)
                deleted.append(c.name)
        return deleted


def validation_errors(answer: Mapping[str, Any], hidden: Collection[str]) -> tuple[tuple[str, str], ...]:
    """(key, message) of each error in Connect's validate answer, sorted; a message may quote a value, so
    the literal secret values ``hidden`` and URL credentials are cut out of it. Pure."""
    errors = []
    for entry in answer.get("configs", []):
        for message in entry.get("value", {}).get("errors") or []:
            for secret in hidden:
                message = message.replace(secret, REDACTED)
            errors.append((entry["value"]["name"], redact_urls(message)))
    return tuple(sorted(errors))


def status_rows(rendered: RenderedBundle, live: Mapping[str, LiveConnector]) -> list[dict[str, Any]]:
    """The bundle's connectors (and live leftovers under its prefix): state, worker, tasks, traces. Pure."""
    names = sorted({c.name for c in rendered.connectors} | {n for n in live if n.startswith(rendered.owner_prefix)})
    # A trace may quote a config value (a JDBC URL, say): literal secrets are cut out of it.
    hidden = [
        v for c in rendered.connectors for k in secret_keys(c.config) if (v := c.config[k]) and not is_placeholder(v)
    ]
    states = {c.name: c.state for c in rendered.connectors}
    return [_status_row(name, live.get(name), name in states, states.get(name), hidden) for name in names]


def unbundled_rows(live: Mapping[str, LiveConnector], bundled: Collection[str]) -> list[dict[str, Any]]:
    """The live connectors no bundle names (created by hand, or by a bundle that does not render here), as
    ``status_rows`` shapes a row; URL credentials cut out of their traces. Pure."""
    return [_status_row(name, live[name], False, None, []) for name in sorted(set(live) - set(bundled))]


def _status_row(
    name: str, current: LiveConnector | None, in_bundle: bool, target: str | None, hidden: Sequence[str]
) -> dict[str, Any]:
    tasks = current.tasks if current else []
    return {
        "name": name,
        "in_bundle": in_bundle,
        "target_state": target,
        "state": current.state if current else "ABSENT",
        "worker": (current.status.get("connector", {}).get("worker_id") if current else None),
        "trace": shown_trace(current.status.get("connector", {}).get("trace") if current else None, hidden),
        "tasks": [
            {"id": t.get("id"), "state": t.get("state"), "worker": t.get("worker_id"),
             "trace": shown_trace(t.get("trace"), hidden)}
            for t in tasks
        ],
    }  # fmt: skip


def _status_line(status: Mapping[str, Any]) -> str:
    """``connector RUNNING, tasks 0:RUNNING 1:UNASSIGNED``: what a person watching apply needs."""
    if not status:
        return "not in Connect's status yet"
    tasks = " ".join(f"{t.get('id')}:{t.get('state')}" for t in status.get("tasks") or []) or "none yet"
    return f"connector {status.get('connector', {}).get('state', '?')}, tasks {tasks}"


def _cut_secrets(trace: str, rendered: RenderedBundle) -> str:
    """A trace may quote a config value (a JDBC URL, say): literal secrets are cut out of it (its URL
    credentials are, by ``ApplyFailed``)."""
    for c in rendered.connectors:
        for key in secret_keys(c.config):
            value = c.config[key]
            if value and not is_placeholder(value):
                trace = trace.replace(value, REDACTED)
    return trace
