"""A pipeline spec: which transforms a job runs, in order, with which parameters.

    transforms:
      - name: amount_to_minor_units
        params: {amount: amount, currency: currency, output: amount_minor}
      - name: mask_card_number
        params: {column: card_number}

Everything is checked when the spec is loaded (job start-up): the file's shape, that every
transform exists, and every parameter's name and type. Missing input columns are checked when
the pipeline is applied to a DataFrame, from its schema, before Spark runs anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from transforms.errors import TransformSpecError
from transforms.registry import Transform, registered, require_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SPEC_KEYS = ("transforms",)
STEP_KEYS = ("name", "params")
_SHAPE = "write `transforms:` as a list of `- name: <transform>` with optional `params: {...}`"


@dataclass(frozen=True)
class TransformStep:
    """One step: a transform with its bound (checked, defaults filled in) parameters."""

    index: int
    transform: Transform
    params: Mapping[str, object]
    line: int | None = None

    @property
    def name(self) -> str:
        return self.transform.name

    def apply(self, df: DataFrame, source: str) -> DataFrame:
        require_columns(df, self.transform, self.params, source=source, index=self.index, line=self.line)
        return self.transform.function(df, **self.params)


@dataclass(frozen=True)
class TransformPipeline:
    """The steps of a spec, validated. ``apply`` runs them in order; it only builds a plan, Spark runs later."""

    source: str
    steps: tuple[TransformStep, ...]

    @property
    def names(self) -> list[str]:
        return [step.name for step in self.steps]

    def apply(self, df: DataFrame) -> DataFrame:
        for step in self.steps:
            df = step.apply(df, self.source)
        return df


def load_spec(path: str | Path) -> TransformPipeline:
    """Read and validate a spec file; a ``TransformSpecError`` names the file, step and what to fix."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TransformSpecError(source, f"cannot read the spec: {exc.strerror or exc}", "check the path") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TransformSpecError(
            source,
            f"not valid YAML: {getattr(exc, 'problem', None) or exc}",
            "fix the YAML syntax",
            line=mark.line + 1 if mark is not None else None,
        ) from exc
    return _parse(data, source, _step_lines(text))


def parse_spec(data: object, source: str) -> TransformPipeline:
    """Validate an already-parsed spec (e.g. embedded in a job's config); ``source`` names it in errors."""
    return _parse(data, source, [])


def _parse(data: object, source: str, lines: Sequence[int]) -> TransformPipeline:
    if not isinstance(data, Mapping):
        raise TransformSpecError(source, f"the spec must be a mapping with `transforms:`, got {_kind(data)}", _SHAPE)
    unknown = [str(key) for key in data if key not in SPEC_KEYS]
    if unknown:
        raise TransformSpecError(
            source, f"unknown top-level key(s): {', '.join(unknown)}", f"the only key is {', '.join(SPEC_KEYS)}"
        )
    if "transforms" not in data:
        raise TransformSpecError(source, "no `transforms:` list", _SHAPE)
    items = data["transforms"]
    if items is None:
        items = []
    if not isinstance(items, list):
        raise TransformSpecError(source, f"`transforms` must be a list, got {_kind(items)}", _SHAPE)
    known = registered()
    steps = []
    for index, item in enumerate(items):
        line = lines[index] if index < len(lines) else None
        steps.append(_step(item, index, line, source, known))
    return TransformPipeline(source, tuple(steps))


def _step(item: object, index: int, line: int | None, source: str, known: Mapping[str, Transform]) -> TransformStep:
    def error(problem: str, fix: str, transform: str | None = None) -> TransformSpecError:
        return TransformSpecError(source, problem, fix, index=index, transform=transform, line=line)

    if not isinstance(item, Mapping):
        raise error(f"a step must be a mapping, got {_kind(item)}", _SHAPE)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise error("the step has no `name`" if name is None else f"`name` must be a string, got {name!r}", _SHAPE)
    unknown = [str(key) for key in item if key not in STEP_KEYS]
    if unknown:
        raise error(f"unknown key(s) {', '.join(unknown)}", f"a step has only {' and '.join(STEP_KEYS)}", name)
    transform = known.get(name)
    if transform is None:
        raise error(
            f"unknown transform {name!r}",
            f"the registered transforms are: {', '.join(known)} (see `ikkai transforms list`)",
            name,
        )
    params = item.get("params")
    if params is None:
        params = {}
    if not isinstance(params, Mapping) or not all(isinstance(key, str) for key in params):
        raise error(f"`params` must be a mapping of names to values, got {_kind(params)}", _SHAPE, name)
    bound = transform.bind(params, source=source, index=index, line=line)
    return TransformStep(index, transform, bound, line)


def _step_lines(text: str) -> list[int]:
    """The 1-based line of each item under ``transforms:``, for error messages; empty if the shape is off."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "transforms" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _kind(value: object) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:80]
