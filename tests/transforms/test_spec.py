"""Pipeline specs: everything wrong fails at start-up with the file, the step and what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from transforms import TransformPipeline, TransformSpecError, load_spec, parse_spec

SPEC = """\
# the payments pipeline
transforms:
  - name: amount_to_minor_units
    params: {amount: amount, currency: currency, output: amount_minor}
  - name: mask_card_number
    params:
      column: card_number
  - name: normalize_country
    params: {column: country}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


def test_a_spec_names_its_steps_in_order_with_parameters(tmp_path: Path) -> None:
    pipeline = load_spec(write(tmp_path, SPEC))
    assert isinstance(pipeline, TransformPipeline)
    assert pipeline.names == ["amount_to_minor_units", "mask_card_number", "normalize_country"]
    assert pipeline.steps[1].params == {"column": "card_number"}
    assert [step.line for step in pipeline.steps] == [3, 5, 8]


def test_an_empty_list_is_a_pipeline_that_changes_nothing() -> None:
    assert parse_spec({"transforms": []}, "inline").names == []
    assert parse_spec({"transforms": None}, "inline").names == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            SPEC.replace("mask_card_number", "mask_pan"),
            "pipeline.yaml line 5: transforms[1] mask_pan: unknown transform 'mask_pan': "
            "the registered transforms are:",
        ),
        (
            SPEC.replace("column: card_number", "colum: card_number"),
            "pipeline.yaml line 5: transforms[1] mask_card_number: unknown parameter 'colum': "
            "mask_card_number takes (column: input column)",
        ),
        (
            SPEC.replace("output: amount_minor", "output: 7"),
            "pipeline.yaml line 3: transforms[0] amount_to_minor_units: parameter 'output' must be an output column, "
            "got 7: set output to a column name (a non-empty string)",
        ),
        (
            SPEC.replace(", currency: currency", ""),
            "pipeline.yaml line 3: transforms[0] amount_to_minor_units: missing parameter 'currency' (input column)",
        ),
        (SPEC + "version: 2\n", "pipeline.yaml: transforms: unknown top-level key(s): version"),
        ("steps: []\n", "pipeline.yaml: transforms: unknown top-level key(s): steps"),
        ("{}\n", "pipeline.yaml: transforms: no `transforms:` list"),
        ("- mask_card_number\n", "pipeline.yaml: transforms: the spec must be a mapping with `transforms:`"),
        ("transforms: mask_card_number\n", "pipeline.yaml: transforms: `transforms` must be a list, got str"),
        ("transforms:\n  - mask_card_number\n", "pipeline.yaml line 2: transforms[0]: a step must be a mapping"),
        ("transforms:\n  - params: {}\n", "pipeline.yaml line 2: transforms[0]: the step has no `name`"),
        (
            "transforms:\n  - {name: normalize_country, params: {column: c}, when: x}\n",
            "pipeline.yaml line 2: transforms[0] normalize_country: unknown key(s) when: "
            "a step has only name and params",
        ),
        (
            "transforms:\n  - {name: normalize_country, params: [c]}\n",
            "pipeline.yaml line 2: transforms[0] normalize_country: `params` must be a mapping",
        ),
        ("transforms: [\n", "pipeline.yaml line 2: transforms: not valid YAML"),
    ],
)
def test_a_bad_spec_fails_at_load_with_file_step_and_fix(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TransformSpecError) as caught:
        load_spec(path)
    rendered = str(caught.value).replace(str(path), "pipeline.yaml")
    assert rendered.startswith(message)
    assert caught.value.fix


def test_a_missing_spec_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(TransformSpecError, match="cannot read the spec"):
        load_spec(tmp_path / "nope.yaml")


def test_parse_spec_names_its_source_in_errors() -> None:
    with pytest.raises(TransformSpecError, match=r"^enrich config: transforms\[0\] nope: unknown transform"):
        parse_spec({"transforms": [{"name": "nope"}]}, "enrich config")


def test_apply_runs_the_steps_in_order(spark: Any, tmp_path: Path) -> None:
    pipeline = load_spec(write(tmp_path, SPEC))
    raw = spark.createDataFrame(
        [("p1", "12.34", "EUR", "4111-1111-1111-1111", " de ")],
        "payment_id string, amount string, currency string, card_number string, country string",
    )
    expected = spark.createDataFrame(
        [("p1", "12.34", "EUR", "************1111", "DE", 1234)],
        "payment_id string, amount string, currency string, card_number string, country string, amount_minor bigint",
    )
    assertDataFrameEqual(pipeline.apply(raw), expected)


def test_a_missing_input_column_fails_before_spark_runs_naming_column_and_step(spark: Any, tmp_path: Path) -> None:
    pipeline = load_spec(write(tmp_path, SPEC))
    raw = spark.createDataFrame([("12.34", "EUR", " de ")], "amount string, currency string, country string")
    with pytest.raises(TransformSpecError) as caught:
        pipeline.apply(raw)
    error = caught.value
    assert (error.index, error.transform, error.line) == (1, "mask_card_number", 5)
    assert "input column 'card_number' (parameter column) is not in the DataFrame" in str(error)
    assert "amount, currency, country, amount_minor" in str(error)  # what the step saw, after step 0
