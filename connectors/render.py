"""Render a bundle for one environment: each template becomes one connector config (string → string).

Pure apart from reading the bundle folder. Jinja2 runs with StrictUndefined, so a missing
value is an error that names the template file, the line and the value, never an empty string.

A template is code written by a bundle's author, and render, lint, plan and ``ikkai serve`` all
run it (a bundle from a pull request, linted in CI, included). It therefore runs in Jinja's
``ImmutableSandboxedEnvironment``: it may read values and use Jinja's filters and tests, but not
reach Python internals (``cycler.__init__.__globals__.os`` ...) nor change the values it is given;
trying is a ``BundleError`` naming the template and line. ``connectors.template_sandbox`` confines
it further: it reads only the bundle's own template files (no link followed, no values file), and
its work, output size and time are bounded (``RenderBounds``); every error a template causes is one
``BundleError`` line naming the template.
"""

from __future__ import annotations

import difflib
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
from connectors.secrets import DEFAULT_PROVIDERS, parse_providers, redact
from connectors.template_sandbox import BoundedSandbox, RenderBounds, RenderStopped, TemplateRefused
from connectors.values import ValueLayers, existing_keys, set_path, value_layers

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
    config_providers: tuple[str, ...] = DEFAULT_PROVIDERS  # the placeholders the env's workers resolve

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


_PROBE = "ikkai-probe-\u2063"  # a text no bundle uses: rendered somewhere only if a template reads the key


def render_bundle(bundle: ConnectorBundle, env: str, overrides: Iterable[str] = ()) -> RenderedBundle:
    """Render every connector of ``bundle`` for ``env``; each ``--set`` override must change something.

    An override that changes the values but leaves every rendered config as it was is used by no
    template (a typo, most often): that is an error naming the key and the keys that do exist.
    """
    overrides = tuple(overrides)
    # Each check renders the bundle again: the files and each --set are read once, the templates compiled once.
    layers = value_layers(bundle.folder, bundle.name, env, bundle.manifest.defaults)
    jinja = BoundedSandbox(bundle.folder, RenderBounds())
    jinja.filters["tojson"] = _tojson
    rendered = _render(bundle, layers, jinja, overrides)
    after = layers.with_sets(overrides)
    for index, assignment in enumerate(overrides):
        others = overrides[:index] + overrides[index + 1 :]
        before = layers.with_sets(others)
        if before == after:
            continue  # sets what was there already: harmless
        try:
            unchanged = _render(bundle, layers, jinja, others) == rendered
            path = set_path(assignment, bundle.name)
            parent, keys = existing_keys(before, path)
            if unchanged and (len(parent) < len(path) - 1 or path[-1] not in keys):
                # A new key may equal a template's own default (``default("POST")``): a value no one
                # would choose shows whether a template reads it.
                probe = (*others, f"{'.'.join(path)}={_PROBE}")
                unchanged = _render(bundle, layers, jinja, probe) == rendered
        except BundleError:
            continue  # without it, or with another value, the bundle does not render: it is needed
        if unchanged:
            raise _unused_override(bundle.name, assignment, before)
    return rendered


def _unused_override(bundle: str, assignment: str, values: Mapping[str, Any]) -> BundleError:
    path = set_path(assignment, bundle)
    parent, keys = existing_keys(values, path)
    keys = [k for k in keys if k != "env"] if not parent else keys
    dotted = ".".join(path)
    typed = path[len(parent)]
    close = [] if typed in keys else difflib.get_close_matches(typed, keys, n=1)
    under = f"values under {'.'.join(parent)}" if parent else "values"
    hint = f"did you mean {'.'.join((*parent, close[0]))}? " if close else ""
    declared = typed in keys
    return BundleError(
        bundle,
        "--set",
        f"{dotted} is {'declared but ' if declared else ''}used by no template of the bundle "
        "(the rendered configs are the same without it)",
        fix=f"{hint}{under}: {', '.join(keys) or 'none'}",
    )


def _render(
    bundle: ConnectorBundle, layers: ValueLayers, jinja: BoundedSandbox, overrides: tuple[str, ...]
) -> RenderedBundle:
    values = layers.with_sets(overrides)
    env = layers.env
    rendered = []
    for spec in bundle.manifest.connectors:
        name = bundle.manifest.connector_name(spec)
        text = _render_template(
            jinja, bundle, spec.template, {**values, "connector": spec.name, "connector_name": name}, env
        )
        config = _parse_config(text, bundle.name, spec.template)
        config["name"] = name
        rendered.append(RenderedConnector(name=name, spec=spec, config=config))
    return RenderedBundle(
        bundle=bundle, env=env, connectors=tuple(rendered), config_providers=_providers(values, bundle.name, env)
    )


def _providers(values: Mapping[str, Any], bundle: str, env: str) -> tuple[str, ...]:
    """The value ``config_providers``: which config providers' placeholders this environment's workers resolve."""
    providers = parse_providers(values.get("config_providers", DEFAULT_PROVIDERS))
    if providers is None:
        raise BundleError(
            bundle,
            f"values/{env}.yaml",
            f"config_providers is {values.get('config_providers')!r}, not a list of config provider names",
            fix="name the providers in the Connect worker's config.providers, e.g. config_providers: [secrets, env]",
        )
    return providers


def _render_template(
    jinja: BoundedSandbox, bundle: ConnectorBundle, template: str, values: Mapping[str, Any], env: str
) -> str:
    try:
        return jinja.render(jinja.get_template(template), dict(values))
    except Exception as exc:  # a template is a bundle author's code: whatever it raises is its error
        problem, fix = _template_problem(exc, bundle, env)
        if isinstance(exc, jinja2.TemplateSyntaxError):
            line: int | None = exc.lineno
        else:
            line = _template_line(exc, bundle.folder / template)
        raise BundleError(bundle.name, template, problem, line=line, fix=fix) from exc


def _template_problem(exc: Exception, bundle: ConnectorBundle, env: str) -> tuple[str, str | None]:
    """What went wrong while rendering, and what to do, as one line each."""
    if isinstance(exc, TemplateRefused):
        return (
            f"{exc.reason}; a template reads only the bundle's own template files",
            "keep included templates as plain files inside the bundle (no links); values come as variables",
        )
    if isinstance(exc, RenderStopped):
        return (
            f"rendering stopped: {exc.what}",
            "a connector config is a few kB: look for a loop, a macro calling itself or a repeated text",
        )
    if isinstance(exc, RecursionError):
        return (
            "the template recurses too deep",
            "give the macro that calls itself an end (or include a template that does not include this one)",
        )
    if isinstance(exc, jinja2.TemplateNotFound):
        return "template not found", f"create it or fix the path in bundle.yaml ({bundle.folder})"
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"template syntax error: {exc.message}", None
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return (
            f"the template reaches for {_unsafe_name(exc)}, which the sandbox refuses",
            "remove that expression: a template may only read values and use Jinja's filters and tests",
        )
    if isinstance(exc, jinja2.UndefinedError):
        match = _UNDEFINED.search(exc.message or "")
        missing = (match.group(1) or match.group(2)) if match else None
        problem = f"undefined variable '{missing}'" if missing else f"undefined value: {_one_line(exc)}"
        return problem, f"define it in values/{env}.yaml, the bundle defaults or --set"
    if isinstance(exc, (TypeError, ValueError, ArithmeticError, jinja2.TemplateError)):
        return f"bad value: {_one_line(exc)}", "check the values the template uses"
    return (
        f"the template failed: {type(exc).__name__}: {_one_line(exc)}",
        "check the values the template uses and the filters it applies to them",
    )


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unsafe_name(exc: jinja2.exceptions.SecurityError) -> str:
    """What the sandbox refused, from its message (Jinja gives no field for it)."""
    match = re.search(r"attribute '([^']+)' of '([^']+)' object", str(exc))
    return f"'{match.group(1)}' of a '{match.group(2)}' object" if match else str(exc).rstrip(".")


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
