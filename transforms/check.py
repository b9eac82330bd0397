"""``ikkai transforms check``: is every transform deterministic and does it do what its examples say?

For each example of each transform:
1. run it on the example rows in one partition, and again on the rows in reverse order spread
   over several partitions by a shuffle; the two outputs must be the same rows;
2. the output must be exactly the example's expected rows (order ignored);
3. the analyzed Spark plan must hold no non-deterministic expression: anything Spark itself calls
   non-deterministic (rand, uuid, shuffle, monotonically_increasing_id, a Python UDF marked
   ``asNondeterministic``) and the clock functions, which Spark calls deterministic only because
   it fixes them once per query (current_timestamp, now, current_date, localtimestamp, ...).
Besides, the transform's Python code (and the functions and UDFs it calls in its own module) must
not read the clock or randomness: the modules ``time``, ``random``, ``uuid``, ``secrets``,
``datetime``'s ``now``/``today``, or ``pyspark.sql.functions``' random and clock functions. A
Python UDF that is non-deterministic in another way shows up as outputs that differ between
runs, when the examples exercise it.

``check_columns`` is the static half of a spec's check: given the columns a job hands its
transforms, every step's input columns must be among them or written by an earlier step. It runs
before Spark starts, so a spec that would fail the job's first batch fails the check at once.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from transforms.errors import TransformSpecError
from transforms.registry import Example, Transform, registered
from transforms.spec import TransformPipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SHUFFLED_PARTITIONS = 3

CLOCK_EXPRESSIONS = frozenset(
    {"CurrentTimestamp", "Now", "CurrentDate", "CurrentTime", "LocalTimestamp", "CurrentBatchTimestamp"}
)
"""Spark expressions that read the clock; Spark marks them deterministic (folded per query), ikkai does not."""
NONDETERMINISTIC_EXPRESSIONS = CLOCK_EXPRESSIONS | {
    "Rand",
    "Randn",
    "Uniform",
    "RandStr",
    "Uuid",
    "Shuffle",
    "MonotonicallyIncreasingID",
    "SparkPartitionID",
    "InputFileName",
    "InputFileBlockStart",
    "InputFileBlockLength",
}
NONDETERMINISTIC_MODULES = frozenset({"time", "random", "uuid", "secrets"})
CLOCK_NAMES = frozenset({"now", "today", "utcnow"})
NONDETERMINISTIC_FUNCTIONS = frozenset(
    {
        "rand",
        "randn",
        "uniform",
        "randstr",
        "uuid",
        "shuffle",
        "current_timestamp",
        "current_date",
        "current_time",
        "localtimestamp",
        "now",
        "monotonically_increasing_id",
        "spark_partition_id",
        "input_file_name",
    }
)


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one transform: ``ok`` when ``problems`` is empty."""

    transform: str
    examples: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"transform": self.transform, "ok": self.ok, "examples": self.examples, "problems": list(self.problems)}


def check_transforms(
    spark: SparkSession, transforms: Mapping[str, Transform] | Iterable[Transform] | None = None
) -> list[CheckResult]:
    """Check the given transforms (default: every registered one), in name order."""
    chosen = registered() if transforms is None else transforms
    listed = list(chosen.values()) if isinstance(chosen, Mapping) else list(chosen)
    return [check_transform(spark, transform) for transform in sorted(listed, key=lambda t: t.name)]


def check_columns(pipeline: TransformPipeline, columns: Iterable[str], *, given_by: str, fix: str) -> None:
    """Fail when a step reads a column that is neither among ``columns`` nor written by an earlier step.

    ``columns`` are what the job hands its transform stage, ``given_by`` names the job in the
    message and ``fix`` says how to get a column the job does not have yet. Only names are
    checked, from the spec: no Spark, no data. The ``TransformSpecError`` names the spec, line,
    step, parameter and column, what the job gives and what earlier steps add.
    """
    given = list(dict.fromkeys(columns))
    written: dict[str, None] = {}  # columns earlier steps add, in order
    for step in pipeline.steps:
        for param, column in step.transform.input_columns(step.params):
            if column in given or column in written:
                continue
            added = f"; earlier steps add {', '.join(written)}" if written else ""
            raise TransformSpecError(
                pipeline.source,
                f"input column {column!r} (parameter {param}) is not a column {given_by} gives its transforms, "
                f"which are: {', '.join(given)}{added}",
                f"set {param} to one of those columns, or add a step before this one that writes {column!r}; {fix}",
                index=step.index,
                transform=step.name,
                line=step.line,
            )
        written.update(
            (column, None) for _, column in step.transform.output_columns(step.params) if column not in given
        )


def check_transform(spark: SparkSession, transform: Transform) -> CheckResult:
    problems = [f"its Python code {reason}" for reason in python_nondeterminism(transform.function)]
    for number, example in enumerate(transform.examples):
        label = f"examples[{number}]"
        try:
            problems += [f"{label}: {problem}" for problem in _check_example(spark, transform, example)]
        except Exception as exc:  # noqa: BLE001 - any failure of a data engineer's code is a check failure
            problems.append(f"{label}: failed: {type(exc).__name__}: {_first_line(exc)}")
    return CheckResult(transform.name, len(transform.examples), tuple(dict.fromkeys(problems)))


def _check_example(spark: SparkSession, transform: Transform, example: Example) -> list[str]:
    bound = transform.bind(example.params, source=f"{transform.name} example")
    rows = [tuple(row.get(field) for field in _field_names(spark, example.schema)) for row in example.rows]
    single = spark.createDataFrame(rows, example.schema).coalesce(1)
    spread = spark.createDataFrame(list(reversed(rows)), example.schema).repartition(SHUFFLED_PARTITIONS)
    problems: list[str] = []
    first = transform(single, **bound)
    second = transform(spread, **bound)
    problems += [f"uses {found}" for found in plan_nondeterminism(first)]
    got, again = _canonical(first), _canonical(second)
    if got != again:
        difference = _difference(got, again, "1 partition gave", f"{SHUFFLED_PARTITIONS} gave")
        problems.append(f"output differs between 1 partition and {SHUFFLED_PARTITIONS}: {difference}")
    expected = sorted(repr(sorted(dict(row).items())) for row in example.expected)
    if got != expected:
        problems.append(f"output is not the expected rows: {_difference(expected, got, 'expected', 'got')}")
    return problems


def plan_nondeterminism(df: DataFrame) -> list[str]:
    """Non-deterministic and clock expressions in ``df``'s analyzed plan, innermost only, e.g. ``Rand rand(42)``."""
    found: list[str] = []
    _walk_plan(df._jdf.queryExecution().analyzed(), found)
    return list(dict.fromkeys(found))


def _walk_plan(plan: Any, found: list[str]) -> None:
    for expression in _scala_list(plan.expressions()):
        _walk_expression(expression, found)
    for child in _scala_list(plan.children()):
        _walk_plan(child, found)


def _walk_expression(expression: Any, found: list[str]) -> bool:
    """Record offending leaves; True when this expression is non-deterministic."""
    children = [_walk_expression(child, found) for child in _scala_list(expression.children())]
    name = str(expression.getClass().getSimpleName())
    nondeterministic = not expression.deterministic() or name in NONDETERMINISTIC_EXPRESSIONS
    if nondeterministic and (name in NONDETERMINISTIC_EXPRESSIONS or not any(children)):
        found.append(f"non-deterministic {name} ({str(expression.toString())[:80]})")
    return nondeterministic


def _scala_list(sequence: Any) -> list[Any]:
    iterator = sequence.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items


def python_nondeterminism(function: Callable[..., Any]) -> list[str]:
    """Reasons the function's code reads the clock or randomness (looking into same-module helpers and UDFs)."""
    reasons: list[str] = []
    _inspect_function(function, reasons, set())
    return list(dict.fromkeys(reasons))


def _inspect_function(function: Any, reasons: list[str], seen: set[int]) -> None:
    function = getattr(function, "func", function)  # a pyspark UDF wraps the Python function in .func
    code = getattr(function, "__code__", None)
    if code is None or id(code) in seen:
        return
    seen.add(id(code))
    names = _code_names(code)
    scope = dict(getattr(function, "__globals__", {}))
    for cell, var in zip(function.__closure__ or (), code.co_freevars, strict=False):
        try:
            scope[var] = cell.cell_contents
        except ValueError:  # an empty cell: the variable was never assigned
            continue
    for name in sorted(names):
        value = scope.get(name)
        module = value.__name__ if isinstance(value, types.ModuleType) else str(getattr(value, "__module__", ""))
        root = module.split(".")[0]
        if root in NONDETERMINISTIC_MODULES:
            reasons.append(f"uses {module}.{'' if isinstance(value, types.ModuleType) else name}".rstrip("."))
        elif root == "datetime" and names & CLOCK_NAMES:
            reasons.append(f"reads the clock through datetime ({', '.join(sorted(names & CLOCK_NAMES))})")
        elif name in NONDETERMINISTIC_FUNCTIONS and (value is None or module.startswith("pyspark")):
            reasons.append(f"calls {name}()")
        elif module == function.__module__ and (callable(value) or hasattr(value, "func")):
            _inspect_function(value, reasons, seen)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_freevars)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


def _field_names(spark: SparkSession, schema: str) -> list[str]:
    return [str(field.name) for field in spark.createDataFrame([], schema).schema.fields]


def _canonical(df: DataFrame) -> list[str]:
    return sorted(repr(sorted(row.asDict(recursive=True).items())) for row in df.collect())


def _difference(left: Sequence[str], right: Sequence[str], left_label: str, right_label: str) -> str:
    """The first row only one side has, from each side (rows are canonical strings)."""
    only_left = [row for row in left if row not in right]
    only_right = [row for row in right if row not in left]
    parts = []
    for label, rows in ((left_label, only_left), (right_label, only_right)):
        if rows:
            parts.append(f"{label} {rows[0]}" + (f" (+{len(rows) - 1} more)" if len(rows) > 1 else ""))
    return "; ".join(parts) or f"{left_label} {len(left)} rows, {right_label} {len(right)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "(no message)"
