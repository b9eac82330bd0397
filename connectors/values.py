"""The values a template sees: platform defaults → bundle defaults → values/<env>.yaml → ``--set``.

Later layers win key by key; nested mappings merge, everything else is replaced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def parse_set(assignments: Iterable[str], bundle: str) -> dict[str, Any]:
    """``a.b=3`` → ``{"a": {"b": 3}}``; the value is read as YAML (3 is a number, true a boolean,
    ``[{name: payments, key: payment_id}]`` a list); mappings and what YAML cannot read stay strings."""
    result: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key.strip():
            raise BundleError(bundle, "--set", f"{assignment!r} is not key=value", fix="e.g. --set partitions=6")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, dict):  # "a: b" or "{x}" is text someone typed, not a mapping
            value = raw
        node = result
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return result


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


def layered_values(
    folder: Path, bundle: str, env: str, defaults: Mapping[str, Any], overrides: Iterable[str] = ()
) -> dict[str, Any]:
    env_file = folder / "values" / f"{env}.yaml"
    if not env_file.is_file():
        known = sorted(p.stem for p in (folder / "values").glob("*.yaml"))
        raise BundleError(
            bundle, f"values/{env}.yaml", "not found", fix=f"environments of this bundle: {', '.join(known) or 'none'}"
        )
    values = load_yaml_mapping(PLATFORM_DEFAULTS, bundle, "platform defaults")
    values = merge(values, defaults)
    values = merge(values, load_yaml_mapping(env_file, bundle, f"values/{env}.yaml"))
    values = merge(values, parse_set(overrides, bundle))
    values["env"] = env
    return values
