"""Render a bundle for one environment: each template becomes one connector config (string → string).

Pure apart from reading the bundle folder. Jinja2 runs with StrictUndefined, so a missing
value is an error that names the template file, the line and the value, never an empty string.
"""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from connectors.errors import BundleError
from connectors.manifest import BundleManifest, ConnectorSpec, load_manifest
from connectors.secrets import redact
from connectors.values import layered_values

_UNDEFINED = re.compile(r"'([^']+)' is undefined|has no attribute '([^']+)'")


@dataclass(frozen=True)
class ConnectorBundle:
    folder: Path
    manifest: BundleManifest

    @property
    def name(self) -> str:
        return self.manifest.name


@dataclass(frozen=True, repr=False)
class RenderedConnector:
    name: str  # full connector name, owner prefix included
    spec: ConnectorSpec
    config: Mapping[str, str]

    def __repr__(self) -> str:  # secrets never reach a log line or a traceback through repr
        return f"RenderedConnector(name={self.name!r}, state={self.spec.state!r}, config={redact(self.config)!r})"

    @property
    def connector_class(self) -> str:
        return self.config.get("connector.class", "")

    @property
    def state(self) -> str:
        return self.spec.state


@dataclass(frozen=True)
class RenderedBundle:
    bundle: ConnectorBundle
    env: str
    connectors: tuple[RenderedConnector, ...]

    @property
    def name(self) -> str:
        return self.bundle.name

    @property
    def owner_prefix(self) -> str:
        return self.bundle.manifest.owner_prefix

    def connector(self, name: str) -> RenderedConnector:
        return next(c for c in self.connectors if c.name == name)


def load_bundle(folder: Path) -> ConnectorBundle:
    folder = folder.resolve()
    return ConnectorBundle(folder=folder, manifest=load_manifest(folder))


def render_bundle(bundle: ConnectorBundle, env: str, overrides: Iterable[str] = ()) -> RenderedBundle:
    values = layered_values(bundle.folder, bundle.name, env, bundle.manifest.defaults, overrides)
    jinja = jinja2.Environment(  # noqa: S701 - renders JSON configs, not HTML
        loader=jinja2.FileSystemLoader(str(bundle.folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    jinja.filters["tojson"] = _tojson
    rendered = []
    for spec in bundle.manifest.connectors:
        name = bundle.manifest.connector_name(spec)
        text = _render_template(
            jinja, bundle, spec.template, {**values, "connector": spec.name, "connector_name": name}, env
        )
        config = _parse_config(text, bundle.name, spec.template)
        config["name"] = name
        rendered.append(RenderedConnector(name=name, spec=spec, config=config))
    return RenderedBundle(bundle=bundle, env=env, connectors=tuple(rendered))


def _render_template(
    jinja: jinja2.Environment, bundle: ConnectorBundle, template: str, values: Mapping[str, Any], env: str
) -> str:
    try:
        return jinja.get_template(template).render(values)
    except jinja2.TemplateNotFound as exc:
        raise BundleError(
            bundle.name,
            template,
            "template not found",
            fix=f"create it or fix the path in bundle.yaml ({bundle.folder})",
        ) from exc
    except jinja2.TemplateSyntaxError as exc:
        raise BundleError(bundle.name, template, f"template syntax error: {exc.message}", line=exc.lineno) from exc
    except jinja2.UndefinedError as exc:
        match = _UNDEFINED.search(exc.message or "")
        missing = (match.group(1) or match.group(2)) if match else None
        problem = f"undefined variable '{missing}'" if missing else f"undefined value: {exc.message}"
        raise BundleError(
            bundle.name,
            template,
            problem,
            line=_template_line(exc, bundle.folder / template),
            fix=f"define it in values/{env}.yaml, the bundle defaults or --set",
        ) from exc
    except (TypeError, ValueError, ArithmeticError, jinja2.TemplateError) as exc:
        raise BundleError(
            bundle.name,
            template,
            f"bad value: {exc}",
            line=_template_line(exc, bundle.folder / template),
            fix="check the values the template uses",
        ) from exc


def _tojson(value: Any) -> str:
    """JSON for a value; an undefined one raises UndefinedError (with its name) instead of a TypeError."""
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    return json.dumps(value)


def _template_line(exc: BaseException, path: Path) -> int | None:
    """The template line Jinja's rewritten traceback points at (the last frame in that file)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return lines[-1] if lines else None


def _parse_config(text: str, bundle: str, template: str) -> dict[str, str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(
            bundle,
            template,
            f"renders to invalid JSON: {exc.msg} (rendered line {exc.lineno})",
            fix="quote string values with the tojson filter, e.g. {{ topic | tojson }}",
        ) from exc
    if not isinstance(data, dict):
        raise BundleError(bundle, template, "must render to one JSON object of connector config keys")
    config: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, bool):
            config[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            config[key] = str(value)
        else:
            raise BundleError(
                bundle,
                template,
                f"key {key!r}: {type(value).__name__} is not a config value",
                fix="Connect configs are strings, numbers or booleans",
            )
    return config
