"""Defining and registering transforms (pure: no Spark runs)."""

from __future__ import annotations

from typing import Any

import pytest

from ikkai.errors import ConfigError
from transforms import (
    CURRENCY_EXPONENTS,
    Example,
    InputColumn,
    OutputColumn,
    TransformDefinitionError,
    TransformSpecError,
    define,
    registered,
)
from transforms.registry import TransformRegistry

EXAMPLE = Example(params={"column": "c"}, schema="c string", rows=[{"c": "x"}], expected=[{"c": "x"}])


def identity(df: Any, *, column: InputColumn, times: int = 1, label: str = "x") -> Any:
    """Return the DataFrame unchanged."""
    return df


def test_the_shipped_transforms_are_registered_with_docs_params_and_examples() -> None:
    shipped = registered()
    assert {"amount_to_minor_units", "mask_card_number", "merchant_category", "normalize_country"} <= set(shipped)
    minor = shipped["amount_to_minor_units"]
    assert [(p.name, p.type_name, p.required) for p in minor.params] == [
        ("amount", "input column", True),
        ("currency", "input column", True),
        ("output", "output column", True),
    ]
    for transform in shipped.values():
        assert transform.summary and transform.examples


def test_parameters_come_from_the_signature_with_types_and_defaults() -> None:
    transform = define(identity, examples=[EXAMPLE])
    assert transform.name == "identity"
    assert transform.signature() == "column: input column, times: int = 1, label: str = 'x'"
    assert transform.bind({"column": "c"}, source="t") == {"column": "c", "times": 1, "label": "x"}
    assert transform.input_columns({"column": "c", "times": 1, "label": "x"}) == [("column", "c")]


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"column": "c", "colour": "red"}, "unknown parameter 'colour'"),
        ({}, "missing parameter 'column' (input column)"),
        ({"column": 3}, "parameter 'column' must be an input column, got 3"),
        ({"column": " "}, "parameter 'column' must be an input column"),
        ({"column": "c", "times": "2"}, "parameter 'times' must be an int, got '2'"),
        ({"column": "c", "times": True}, "parameter 'times' must be an int, got True"),
    ],
)
def test_bad_parameters_name_the_step_and_what_is_wrong(params: dict[str, object], problem: str) -> None:
    transform = define(identity, examples=[EXAMPLE])
    with pytest.raises(TransformSpecError) as caught:
        transform.bind(params, source="pipeline.yaml", index=2, line=7)
    error = caught.value
    assert isinstance(error, ConfigError)
    assert (error.spec, error.index, error.transform, error.line) == ("pipeline.yaml", 2, "identity", 7)
    assert str(error).startswith(f"pipeline.yaml line 7: transforms[2] identity: {problem}")
    assert error.fix


def no_docstring(df: Any, *, column: InputColumn) -> Any:
    return df


def positional_param(df: Any, column: InputColumn) -> Any:
    """Has a positional parameter."""
    return df


def untyped_param(df: Any, *, column: list[str]) -> Any:
    """Has a parameter of a type a spec cannot give."""
    return df


def bad_default(df: Any, *, output: OutputColumn = 3) -> Any:  # type: ignore[assignment]
    """Has a default of the wrong type."""
    return df


@pytest.mark.parametrize(
    ("function", "examples", "problem"),
    [
        (no_docstring, [EXAMPLE], "it has no docstring"),
        (positional_param, [EXAMPLE], "parameter 'column' must be keyword-only"),
        (untyped_param, [EXAMPLE], "parameter 'column' has type list[str]"),
        (bad_default, [EXAMPLE], "the default of 'output' is not an output column"),
        (identity, [], "it has no examples"),
        (identity, [Example({"col": "c"}, "c string", [], [])], "examples[0]: unknown parameter 'col'"),
        (identity, [Example({"column": "d"}, "c string", [{"c": 1}], [{"c": 1}])], "lacks input column 'd'"),
        (identity, [Example({"column": "c"}, "c string", [{"c": 1}], [])], "examples[0]: no expected rows"),
    ],
)
def test_a_badly_defined_transform_fails_when_defined(function: Any, examples: list[Example], problem: str) -> None:
    with pytest.raises(TransformDefinitionError, match=problem.replace("[", r"\[").replace("(", r"\(")) as caught:
        define(function, examples=examples)
    assert caught.value.transform == function.__name__
    assert caught.value.fix


def other(df: Any, *, column: InputColumn) -> Any:
    """Another function."""
    return df


def test_a_name_can_be_registered_by_one_function_only() -> None:
    registry = TransformRegistry()
    registry.add(define(identity, examples=[EXAMPLE], name="same"))
    registry.add(define(identity, examples=[EXAMPLE], name="same"))  # the same function again: a re-import
    with pytest.raises(TransformDefinitionError, match=r"already taken by tests\.transforms\.test_registry\.identity"):
        registry.add(define(other, examples=[EXAMPLE], name="same"))
    assert list(registry.all()) == ["same"]


def test_currency_exponents_follow_iso_4217() -> None:
    assert CURRENCY_EXPONENTS["JPY"] == 0
    assert CURRENCY_EXPONENTS["EUR"] == CURRENCY_EXPONENTS["USD"] == CURRENCY_EXPONENTS["GBP"] == 2
    assert CURRENCY_EXPONENTS["KWD"] == CURRENCY_EXPONENTS["BHD"] == 3
    assert "XAU" not in CURRENCY_EXPONENTS and "XTS" not in CURRENCY_EXPONENTS
    assert all(len(code) == 3 and code.isupper() for code in CURRENCY_EXPONENTS)
    with pytest.raises(TypeError):
        CURRENCY_EXPONENTS["XYZ"] = 2  # type: ignore[index]
