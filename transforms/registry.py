"""The transform registry: a data engineer's ``DataFrame -> DataFrame`` function, its name, parameters and examples.

A transform is a plain function ``f(df, *, param: type, ...) -> DataFrame``. Its keyword-only
parameters, with their annotations and defaults, *are* its declared parameters; the types a
spec may give are ``str``, ``int``, ``float``, ``bool`` and the two column types below, which
are strings that name a column. ``InputColumn`` parameters name columns the transform reads:
a pipeline checks they exist before Spark runs anything. ``@register`` checks the definition
(docstring, signature, examples) when the module is imported, so a broken transform fails
loudly at start-up, not in the middle of a stream.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from ikkai.errors import ConfigError
from transforms.errors import TransformDefinitionError, TransformSpecError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

InputColumn = Annotated[str, "input column"]
"""A parameter that names a column the transform reads; it must exist in the DataFrame."""
OutputColumn = Annotated[str, "output column"]
"""A parameter that names a column the transform writes (added, or replaced if it exists)."""

PARAM_TYPES: dict[object, str] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    InputColumn: "input column",
    OutputColumn: "output column",
}

_NO_DEFAULT = inspect.Parameter.empty
TransformFunction = TypeVar("TransformFunction", bound=Callable[..., Any])
SHIPPED_MODULES = ("transforms.payments",)
"""Modules under transforms/ whose transforms are always registered; add a new one here."""
MODULES_ENV = "IKKAI_TRANSFORM_MODULES"
"""Space-separated modules with more transforms (outside transforms/), loaded by ``registered()``."""


@dataclass(frozen=True)
class Param:
    """One declared parameter: its name, type and default (``inspect.Parameter.empty`` when required)."""

    name: str
    type: object
    default: object = _NO_DEFAULT

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT

    @property
    def type_name(self) -> str:
        return PARAM_TYPES[self.type]

    @property
    def is_input_column(self) -> bool:
        return self.type == InputColumn

    @property
    def is_output_column(self) -> bool:
        return self.type == OutputColumn

    def accepts(self, value: object) -> bool:
        if self.type in (InputColumn, OutputColumn, str):  # Annotated types compare by value
            return isinstance(value, str) and (self.type is str or value.strip() != "")
        if self.type is bool:
            return isinstance(value, bool)
        if self.type is float:
            return isinstance(value, int | float) and not isinstance(value, bool)
        return isinstance(value, int) and not isinstance(value, bool)

    def describe(self) -> str:
        default = "" if self.required else f" = {self.default!r}"
        return f"{self.name}: {self.type_name}{default}"


@dataclass(frozen=True)
class Example:
    """Input rows (with their Spark DDL schema), the parameters, and the rows the transform must produce.

    ``expected`` lists every output column of every output row; row order does not matter.
    """

    params: Mapping[str, object]
    schema: str
    rows: Sequence[Mapping[str, object]]
    expected: Sequence[Mapping[str, object]]


@dataclass(frozen=True)
class Transform:
    """A registered transform. Call it like the function: ``transform(df, column="card_number")``."""

    name: str
    function: Callable[..., DataFrame]
    params: tuple[Param, ...]
    examples: tuple[Example, ...]
    doc: str = field(repr=False)

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0].strip()

    @property
    def module(self) -> str:
        return str(self.function.__module__)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def signature(self) -> str:
        return ", ".join(p.describe() for p in self.params)

    def bind(
        self, params: Mapping[str, object], *, source: str, index: int | None = None, line: int | None = None
    ) -> dict[str, object]:
        """The parameters with defaults filled in; ``TransformSpecError`` if one is unknown, missing or mistyped."""

        def error(problem: str, fix: str) -> TransformSpecError:
            return TransformSpecError(source, problem, fix, index=index, transform=self.name, line=line)

        declared = f"{self.name} takes ({self.signature()})"
        for key in params:
            if self.param(key) is None:
                raise error(f"unknown parameter {key!r}", f"{declared}")
        bound: dict[str, object] = {}
        for param in self.params:
            if param.name not in params:
                if param.required:
                    raise error(f"missing parameter {param.name!r} ({param.type_name})", f"{declared}")
                bound[param.name] = param.default
                continue
            value = params[param.name]
            if not param.accepts(value):
                wanted = "a column name (a non-empty string)" if param.type_name.endswith("column") else None
                raise error(
                    f"parameter {param.name!r} must be {_a(param.type_name)}, got {value!r}",
                    f"set {param.name} to {wanted or _a(param.type_name)}",
                )
            bound[param.name] = value
        return bound

    def input_columns(self, bound: Mapping[str, object]) -> list[tuple[str, str]]:
        """(parameter, column) for every column the transform reads."""
        return [(p.name, str(bound[p.name])) for p in self.params if p.is_input_column]

    def output_columns(self, bound: Mapping[str, object]) -> list[tuple[str, str]]:
        """(parameter, column) for every column the transform writes (adds, or replaces in place)."""
        return [(p.name, str(bound[p.name])) for p in self.params if p.is_output_column]

    def __call__(self, df: DataFrame, **params: object) -> DataFrame:
        bound = self.bind(params, source="call")
        require_columns(df, self, bound, source="call")
        return self.function(df, **bound)


def require_columns(
    df: DataFrame,
    transform: Transform,
    bound: Mapping[str, object],
    *,
    source: str,
    index: int | None = None,
    line: int | None = None,
) -> None:
    """Fail before Spark runs anything when a column the transform reads is not in ``df`` (schema only)."""
    columns = df.columns
    for param, column in transform.input_columns(bound):
        if column not in columns:
            raise TransformSpecError(
                source,
                f"input column {column!r} (parameter {param}) is not in the DataFrame, which has: {', '.join(columns)}",
                f"set {param} to one of those columns, or add a step before this one that produces {column!r}",
                index=index,
                transform=transform.name,
                line=line,
            )


def _a(type_name: str) -> str:
    return ("an " if type_name[0] in "aeiou" else "a ") + type_name


class TransformRegistry:
    """Transforms by name. ``transforms.register`` adds to the default one, which the CLI and pipelines read."""

    def __init__(self) -> None:
        self._transforms: dict[str, Transform] = {}

    def add(self, transform: Transform) -> Transform:
        existing = self._transforms.get(transform.name)
        if existing is not None and _qualified(existing.function) != _qualified(transform.function):
            raise TransformDefinitionError(
                transform.name,
                f"the name is already taken by {_qualified(existing.function)}",
                f"give {_qualified(transform.function)} another name: @register(name=...)",
            )
        self._transforms[transform.name] = transform
        return transform

    def get(self, name: str) -> Transform | None:
        return self._transforms.get(name)

    def all(self) -> dict[str, Transform]:
        return dict(sorted(self._transforms.items()))


REGISTRY = TransformRegistry()


def define(function: Callable[..., DataFrame], *, examples: Sequence[Example], name: str | None = None) -> Transform:
    """Build a ``Transform`` from a function without registering it (tests use this; ``register`` calls it)."""
    transform_name = name or function.__name__
    fail = _failer(transform_name)
    doc = inspect.getdoc(function)
    if not doc or not doc.strip():
        raise fail("it has no docstring", "say what it does, its parameters and its null/edge-case rules")
    params = _params(function, fail)
    transform = Transform(transform_name, function, params, tuple(examples), doc)
    if not examples:
        raise fail("it has no examples", "give @register(examples=[Example(params, schema, rows, expected)])")
    for number, example in enumerate(examples):
        source = f"{transform_name} examples[{number}]"
        try:
            bound = transform.bind(example.params, source=source)
        except TransformSpecError as exc:
            raise fail(f"examples[{number}]: {exc.problem}", exc.fix or "fix the example's params") from exc
        for param, column in transform.input_columns(bound):
            for row in example.rows:
                if column not in row:
                    raise fail(
                        f"examples[{number}]: a row lacks input column {column!r} (parameter {param})",
                        "give every example row every column the transform reads",
                    )
        if not example.expected and example.rows:
            raise fail(f"examples[{number}]: no expected rows", "list the rows the transform must produce")
    return transform


def register(
    *, examples: Sequence[Example], name: str | None = None
) -> Callable[[TransformFunction], TransformFunction]:
    """Register the decorated function as a transform (named after the function unless ``name`` is given).

    The function is returned unchanged, so it stays a plain function for its unit test.
    """

    def decorate(function: TransformFunction) -> TransformFunction:
        REGISTRY.add(define(function, examples=examples, name=name))
        return function

    return decorate


def registered() -> dict[str, Transform]:
    """Every registered transform by name, sorted: the shipped ones and those of ``$IKKAI_TRANSFORM_MODULES``.

    The job and ``ikkai transforms check`` both read the transforms here, so they see the same ones.
    """
    load_modules(SHIPPED_MODULES, source="transforms")
    load_modules(os.environ.get(MODULES_ENV, "").split(), source=MODULES_ENV)
    return REGISTRY.all()


def load_modules(modules: Iterable[str], *, source: str) -> None:
    """Import modules so their ``@register`` calls run; like ``python -m``, the current directory is searched too."""
    for module in modules:
        try:
            _import(module)
        except ImportError as exc:
            raise ConfigError(
                source,
                module,
                f"cannot import the transforms module: {exc}",
                "give a dotted module name importable from here, e.g. tests.transforms.nondeterministic",
            ) from exc


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError:
        if "" in sys.path or os.getcwd() in sys.path:
            raise
        sys.path.append(os.getcwd())  # last, so it never shadows an installed package
        importlib.import_module(module)


def _failer(name: str) -> Callable[[str, str], TransformDefinitionError]:
    def fail(problem: str, fix: str) -> TransformDefinitionError:
        return TransformDefinitionError(name, problem, fix)

    return fail


def _params(function: Callable[..., Any], fail: Callable[[str, str], TransformDefinitionError]) -> tuple[Param, ...]:
    shape = "write it as def f(df: DataFrame, *, param: type, ...) -> DataFrame"
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except NameError as exc:
        raise fail(f"an annotation cannot be resolved ({exc})", "import the annotated types at module level") from exc
    parameters = list(inspect.signature(function).parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise fail("its first parameter must be the input DataFrame", shape)
    params = []
    for parameter in parameters[1:]:
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise fail(f"parameter {parameter.name!r} must be keyword-only", shape)
        kind = hints.get(parameter.name)
        if kind not in PARAM_TYPES:
            raise fail(
                f"parameter {parameter.name!r} has type {kind!r}",
                "use one of: str, int, float, bool, InputColumn, OutputColumn",
            )
        param = Param(parameter.name, kind, parameter.default)
        if not param.required and not param.accepts(param.default):
            raise fail(f"the default of {parameter.name!r} is not {_a(param.type_name)}", "fix the default")
        params.append(param)
    return tuple(params)


def _qualified(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"
