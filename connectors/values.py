"""The values a template sees: platform defaults → bundle defaults → values/<env>.yaml → ``--set``.

Later layers win key by key; nested mappings merge, everything else is replaced. The two lower
layers *declare* the values: an environment file or ``--set`` that gives a declared value
another type (text for a number, a number for a list, ...) is an error naming the value, the
type declared and where. ``--set`` of a value declared as text keeps the text as typed
(``--set version=1.10`` stays ``"1.10"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from connectors.errors import BundleError

PLATFORM_DEFAULTS = Path(__file__).with_name("platform.yaml")


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def set_path(assignment: str, bundle: str) -> tuple[str, ...]:
    """The value path ``--set a.b=3`` names: ``("a", "b")``."""
    key, sep, _ = assignment.partition("=")
    if not sep or not key.strip():
        raise BundleError(bundle, "--set", f"{assignment!r} is not key=value", fix="e.g. --set partitions=6")
    return tuple(key.strip().split("."))


def parse_set(
    assignments: Iterable[str],
    bundle: str,
    declared: Mapping[str, Any] | None = None,
    read: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``a.b=3`` → ``{"a": {"b": 3}}``; the value is read as YAML (3 is a number, true a boolean,
    ``[{name: payments, key: payment_id}]`` a list); mappings and what YAML cannot read stay strings.
    A value ``declared`` as text stays the text as typed. ``read`` keeps each text's YAML reading for the
    next call (``render_bundle`` sets the same values many times)."""
    result: dict[str, Any] = {}
    read = {} if read is None else read
    for assignment in assignments:
        path = set_path(assignment, bundle)
        raw = assignment.partition("=")[2]
        if raw not in read:
            read[raw] = _read_set_value(raw)
        value = read[raw]
        if isinstance(value, dict):  # "a: b" or "{x}" is text someone typed, not a mapping
            value = raw
        if isinstance(lookup(declared or {}, path), str) and isinstance(value, (bool, int, float)):
            value = raw  # text was declared: 1.10 stays "1.10", true stays "true"
        node = result
        *parents, leaf = path
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise BundleError(
                    bundle, "--set", f"{assignment!r}: {part} was set to a single value by an earlier --set"
                )
            node = child
        node[leaf] = value
    return result


def _read_set_value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


_MISSING = object()


def lookup(values: Mapping[str, Any], path: Iterable[str]) -> Any:
    """The value at ``path`` (``("a", "b")`` is ``values["a"]["b"]``), or a private sentinel when absent."""
    node: Any = values
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def present(values: Mapping[str, Any], path: Iterable[str]) -> bool:
    return lookup(values, path) is not _MISSING


def kind(value: Any) -> str:
    """A value's type in the words of a values file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _fits(declared: Any, value: Any) -> bool:
    if declared is None or value is None:
        return True  # declared without a type (null), or cleared on purpose
    if isinstance(declared, bool) or isinstance(value, bool):
        return isinstance(declared, bool) and isinstance(value, bool)
    if isinstance(declared, (int, float)):
        return isinstance(value, (int, float))
    if isinstance(declared, str):
        return isinstance(value, (str, int, float))  # an unquoted number renders the same text
    if isinstance(declared, Mapping):
        return isinstance(value, Mapping)
    if isinstance(declared, list):
        return isinstance(value, list)
    return True


def check_types(
    values: Mapping[str, Any],
    declarations: Iterable[tuple[str, Mapping[str, Any]]],
    bundle: str,
    label: str,
    _path: tuple[str, ...] = (),
) -> None:
    """Every value of ``values`` that a declaration gives a type must have that type.

    ``declarations`` are (where, values) pairs, the nearest first: ("bundle defaults", ...),
    ("platform defaults", ...). ``label`` names the layer being checked (values/dev.yaml, --set).
    """
    declarations = list(declarations)
    for key, value in values.items():
        path = (*_path, str(key))
        where, declared = next(((w, lookup(d, path)) for w, d in declarations if present(d, path)), (None, _MISSING))
        if where is None:
            continue
        if not _fits(declared, value):
            dotted = ".".join(path)
            shown = "" if isinstance(declared, (Mapping, list)) else f" ({declared!r})"
            raise BundleError(
                bundle,
                label,
                f"{dotted} is {kind(value)} ({value!r}), but the {where} declare it as {kind(declared)}{shown}",
                fix=f"give {dotted} {kind(declared)}"
                + (" (quote text in YAML: '...')" if isinstance(declared, str) else ""),
            )
        if isinstance(value, Mapping) and isinstance(declared, Mapping):
            check_types(value, declarations, bundle, label, path)


def existing_keys(values: Mapping[str, Any], path: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The deepest mapping on ``path`` that exists in ``values``, and its keys: what a typo could have meant."""
    node: Any = values
    found: tuple[str, ...] = ()
    for part in path[:-1]:
        child = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(child, Mapping):
            break
        node = child
        found = (*found, part)
    return found, sorted(str(k) for k in node) if isinstance(node, Mapping) else []


def load_yaml_mapping(path: Path, bundle: str, label: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise BundleError(
            bundle, label, f"not valid YAML: {getattr(exc, 'problem', exc)}", line=mark.line + 1 if mark else None
        ) from exc
    if not isinstance(data, dict):
        raise BundleError(bundle, label, "must be a mapping of value names to values")
    return data


@dataclass(frozen=True)
class ValueLayers:
    """One bundle's values for one environment before ``--set``: its files read and checked once."""

    bundle: str
    env: str
    files: dict[str, Any]  # platform defaults, bundle defaults, then the environment's file
    declarations: list[tuple[str, Mapping[str, Any]]]
    declared: dict[str, Any]  # platform and bundle defaults: what a --set value is typed against
    read: dict[str, Any] = field(default_factory=dict)  # each --set text's YAML reading

    def with_sets(self, overrides: Iterable[str] = ()) -> dict[str, Any]:
        set_values = parse_set(overrides, self.bundle, declared=self.declared, read=self.read)
        check_types(set_values, self.declarations, self.bundle, "--set")
        values = merge(self.files, set_values)
        values["env"] = self.env
        return values


def value_layers(folder: Path, bundle: str, env: str, defaults: Mapping[str, Any]) -> ValueLayers:
    env_file = folder / "values" / f"{env}.yaml"
    if not env_file.is_file():
        known = sorted(p.stem for p in (folder / "values").glob("*.yaml"))
        raise BundleError(
            bundle, f"values/{env}.yaml", "not found", fix=f"environments of this bundle: {', '.join(known) or 'none'}"
        )
    for linked in (folder / "values", env_file):
        if linked.is_symlink():  # it could be another bundle's prod values, or any file of this machine
            raise BundleError(
                bundle, f"values/{env}.yaml", f"{linked.relative_to(folder)} is a symbolic link",
                fix="keep each environment's values as a plain file in the bundle's values folder",
            )  # fmt: skip
    platform = load_yaml_mapping(PLATFORM_DEFAULTS, bundle, "platform defaults")
    declarations = [("bundle defaults", defaults), ("platform defaults", platform)]
    env_values = load_yaml_mapping(env_file, bundle, f"values/{env}.yaml")
    check_types(env_values, declarations, bundle, f"values/{env}.yaml")
    files = merge(merge(platform, defaults), env_values)
    return ValueLayers(bundle, env, files, declarations, merge(platform, defaults))


def layered_values(
    folder: Path, bundle: str, env: str, defaults: Mapping[str, Any], overrides: Iterable[str] = ()
) -> dict[str, Any]:
    return value_layers(folder, bundle, env, defaults).with_sets(overrides)
