"""``bundle.yaml``: what a bundle contains, as typed frozen objects that reject unknown keys.

```yaml
name: payments-ingest
owner: payments-team (#payments-oncall)   # optional: who to ask; shown on the page and by `bundle render`/`plan`
owner_prefix: payments-ingest.      # every connector name starts with it; --prune touches nothing else
defaults: {partitions: 3}           # bundle defaults, below values/<env>.yaml and --set
connectors:
  - name: payments-file-source      # the connector is called <owner_prefix><name>
    template: templates/file-source.json.j2
    state: running                  # running | paused | stopped
    waivers:
      - check: source-exactly-once
        reason: the file source replays from its offset anyway; see ADR 7
```

``owner`` is a team or a contact, free text of at most ``OWNER_MAX`` printable characters on one line: it
is shown to people (the operator page, the CLI's output), never used to decide anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from connectors.errors import BundleError

MANIFEST = "bundle.yaml"
STATES = ("running", "paused", "stopped")
BUNDLE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # a bundle's name (and a connector name prefix's start)
ENVIRONMENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")  # dev, prod, …: values/<env>.yaml, a token's scope, a URL
OWNER_MAX = 100  # characters: a team's name and a channel or an address fit; a paragraph does not


@dataclass(frozen=True)
class Waiver:
    """A policy check switched off for one connector, with the reason written down."""

    check: str
    reason: str


@dataclass(frozen=True)
class ConnectorSpec:
    name: str  # short name inside the bundle
    template: str  # path relative to the bundle folder
    state: str = "running"
    waivers: tuple[Waiver, ...] = ()

    def waiver(self, check: str) -> Waiver | None:
        return next((w for w in self.waivers if w.check == check), None)


@dataclass(frozen=True)
class BundleManifest:
    name: str
    owner_prefix: str
    connectors: tuple[ConnectorSpec, ...]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    owner: str = ""  # a team or contact; "" when the manifest names none

    def connector_name(self, spec: ConnectorSpec) -> str:
        return self.owner_prefix + spec.name


def load_manifest(folder: Path) -> BundleManifest:
    path = folder / MANIFEST
    bundle = folder.name
    if not path.is_file():
        raise BundleError(bundle, MANIFEST, "not found", fix=f"a bundle folder needs {MANIFEST} ({folder})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise BundleError(
            bundle, MANIFEST, f"not valid YAML: {getattr(exc, 'problem', exc)}", line=mark.line + 1 if mark else None
        ) from exc
    return parse_manifest(data, bundle)


def parse_manifest(data: Any, bundle: str) -> BundleManifest:
    required, optional = {"name", "owner_prefix", "connectors"}, {"defaults", "description", "owner"}
    top = _mapping(data, bundle, "the file", required=required, optional=optional)
    name = _text(top["name"], bundle, "name")
    prefix = _text(top["owner_prefix"], bundle, "owner_prefix")
    if not BUNDLE_NAME.match(prefix) or prefix[-1] not in ".-_":
        raise _bad(
            bundle,
            "owner_prefix",
            f"{prefix!r} must be lower-case and end with '.', '-' or '_'",
            "e.g. owner_prefix: payments-ingest.",
        )
    raw_connectors = top["connectors"]
    if not isinstance(raw_connectors, list) or not raw_connectors:
        raise _bad(bundle, "connectors", "must be a non-empty list", "list at least one connector")
    specs = tuple(_connector(item, bundle, i) for i, item in enumerate(raw_connectors))
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise _bad(bundle, f"connectors[{spec.name}]", "appears twice", "connector names must be unique")
        seen.add(spec.name)
    defaults = top.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise _bad(bundle, "defaults", "must be a mapping", "e.g. defaults: {partitions: 3}")
    return BundleManifest(
        name=name,
        owner_prefix=prefix,
        connectors=specs,
        defaults=defaults,
        description=str(top.get("description") or ""),
        owner=_owner(top["owner"], bundle) if "owner" in top else "",
    )


def _owner(value: Any, bundle: str) -> str:
    fix = f"name a team or a contact in at most {OWNER_MAX} characters, e.g. owner: payments-team"
    if not isinstance(value, str) or not value.strip():
        raise _bad(bundle, "owner", "must be a non-empty string", fix)
    owner = value.strip()
    if len(owner) > OWNER_MAX:
        raise _bad(bundle, "owner", f"is {len(owner)} characters long, more than {OWNER_MAX}", fix)
    if not owner.isprintable():
        raise _bad(bundle, "owner", "must be printable text on one line (no control characters)", fix)
    return owner


def _connector(item: Any, bundle: str, index: int) -> ConnectorSpec:
    where = f"connectors[{index}]"
    data = _mapping(item, bundle, where, required={"name", "template"}, optional={"state", "waivers"})
    name = _text(data["name"], bundle, f"{where}.name")
    if not BUNDLE_NAME.match(name):
        raise _bad(bundle, f"{where}.name", f"{name!r} is not a valid name", "use lower-case letters, digits, . _ -")
    state = str(data.get("state") or "running")
    if state not in STATES:
        raise _bad(bundle, f"{where}.state", f"{state!r} is not one of {', '.join(STATES)}", None)
    waivers = []
    for j, raw in enumerate(data.get("waivers") or []):
        w = _mapping(raw, bundle, f"{where}.waivers[{j}]", required={"check", "reason"}, optional=set())
        reason = str(w["reason"] or "").strip()
        if len(reason) < 10:
            raise _bad(
                bundle,
                f"{where}.waivers[{j}].reason",
                "a waiver needs a written reason",
                "say why the check does not apply to this connector",
            )
        waivers.append(Waiver(check=_text(w["check"], bundle, f"{where}.waivers[{j}].check"), reason=reason))
    return ConnectorSpec(
        name=name, template=_text(data["template"], bundle, f"{where}.template"), state=state, waivers=tuple(waivers)
    )


def _mapping(data: Any, bundle: str, where: str, *, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _bad(bundle, where, "must be a mapping", None)
    unknown = sorted(set(data) - required - optional)
    if unknown:
        allowed = ", ".join(sorted(required | optional))
        raise _bad(bundle, where, f"unknown key {unknown[0]!r}", f"allowed keys: {allowed}")
    missing = sorted(required - set(data))
    if missing:
        raise _bad(bundle, where, f"missing key {missing[0]!r}", None)
    return data


def _text(value: Any, bundle: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(bundle, where, "must be a non-empty string", None)
    return value.strip()


def _bad(bundle: str, where: str, problem: str, fix: str | None) -> BundleError:
    return BundleError(bundle, MANIFEST, f"{where}: {problem}", fix=fix)
