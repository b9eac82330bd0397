"""What ``apply`` would change: desired connector configs against live ones. Pure.

Live configs are normalized before comparing (Connect adds ``name``; every value is compared
as a string; ``${file:…}`` placeholders are compared literally, never resolved). Secret values
are redacted in everything a plan can print, and so are credentials inside URLs, in config values
and in Connect's validation messages (which may quote a value: ``ikkai.redaction``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.secrets import redact_value
from ikkai.redaction import redact_urls

SERVER_ADDED_KEYS = frozenset({"name"})
CREATE, UPDATE, DELETE, UNCHANGED = "create", "update", "delete", "unchanged"
# Connect's connector state for each target state of a bundle.
CONNECT_STATE = {"running": "RUNNING", "paused": "PAUSED", "stopped": "STOPPED"}


@dataclass(frozen=True)
class KeyChange:
    key: str
    live: str | None  # None: the key is not set live
    desired: str | None  # None: apply removes the key

    def as_dict(self) -> dict[str, str | None]:
        return {"key": self.key, "live": self.live, "desired": self.desired}


@dataclass(frozen=True)
class ConnectorPlan:
    name: str
    action: str  # create | update | delete | unchanged
    connector_class: str
    target_state: str | None  # running | paused | stopped; None for delete
    live_state: str | None  # Connect's state (RUNNING, PAUSED, STOPPED, FAILED, ...), None when absent
    changes: tuple[KeyChange, ...] = ()
    validation_errors: tuple[tuple[str, str], ...] = ()  # (key, message)
    failed_tasks: tuple[int, ...] = ()  # live tasks in FAILED state: for `restart --failed`, not a config write

    @property
    def state_change(self) -> bool:
        if self.target_state is None or self.action == DELETE:
            return False
        wanted = CONNECT_STATE[self.target_state]
        if self.live_state is None:
            return wanted != "RUNNING"
        if wanted == "RUNNING":
            return self.live_state in ("PAUSED", "STOPPED")
        return self.live_state != wanted

    @property
    def pending(self) -> bool:
        return self.action != UNCHANGED or self.state_change

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action": self.action,
            "class": self.connector_class,
            "target_state": self.target_state,
            "live_state": self.live_state,
            "state_change": self.state_change,
            "changes": [c.as_dict() for c in self.changes],
            "validation_errors": [{"key": k, "message": redact_urls(m)} for k, m in self.validation_errors],
            "failed_tasks": list(self.failed_tasks),
        }


@dataclass(frozen=True)
class Plan:
    bundle: str
    env: str
    connectors: tuple[ConnectorPlan, ...] = field(default_factory=tuple)
    unpruned: tuple[str, ...] = ()  # owned connectors no longer in the bundle; apply --prune deletes them

    @property
    def pending(self) -> bool:
        return any(c.pending for c in self.connectors)

    @property
    def valid(self) -> bool:
        return not any(c.validation_errors for c in self.connectors)

    def counts(self) -> dict[str, int]:
        result = {action: 0 for action in (CREATE, UPDATE, DELETE, UNCHANGED)}
        for c in self.connectors:
            result[c.action] += 1
        return result

    def as_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "env": self.env,
            "pending": self.pending,
            "valid": self.valid,
            "summary": self.counts(),
            "connectors": [c.as_dict() for c in self.connectors],
            "unpruned": list(self.unpruned),
        }


def normalize(config: Mapping[str, Any]) -> dict[str, str]:
    """The part of a config that is ours to compare: server-added keys dropped, values as strings."""
    return {k: str(v) for k, v in config.items() if k not in SERVER_ADDED_KEYS}


def diff_config(
    desired: Mapping[str, str], live: Mapping[str, Any] | None, password_keys: Collection[str] = ()
) -> tuple[KeyChange, ...]:
    """Changed keys, sorted, with secret values redacted on both sides."""
    want = normalize(desired)
    have = normalize(live or {})
    changes = []
    for key in sorted(set(want) | set(have)):
        if want.get(key) != have.get(key):
            changes.append(
                KeyChange(
                    key,
                    redact_value(key, have.get(key), password_keys),
                    redact_value(key, want.get(key), password_keys),
                )
            )
    return tuple(changes)


def connector_plan(
    name: str,
    desired: Mapping[str, str],
    target_state: str,
    live_config: Mapping[str, Any] | None,
    live_state: str | None,
    password_keys: Collection[str] = (),
) -> ConnectorPlan:
    changes = diff_config(desired, live_config, password_keys)
    action = CREATE if live_config is None else UPDATE if changes else UNCHANGED
    return ConnectorPlan(
        name=name,
        action=action,
        connector_class=desired.get("connector.class", ""),
        target_state=target_state,
        live_state=live_state,
        changes=changes,
    )


def prune_plan(name: str, live_config: Mapping[str, Any], live_state: str | None) -> ConnectorPlan:
    return ConnectorPlan(
        name=name,
        action=DELETE,
        connector_class=str(live_config.get("connector.class", "")),
        target_state=None,
        live_state=live_state,
    )


def owned_leftovers(live_names: Collection[str], owner_prefix: str, bundle_names: Collection[str]) -> list[str]:
    """Connectors ``--prune`` may delete: carrying the bundle's owner prefix and no longer in the bundle."""
    return sorted(n for n in live_names if n.startswith(owner_prefix) and n not in bundle_names)
