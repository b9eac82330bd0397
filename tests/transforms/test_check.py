"""The determinism check: passes on the shipped transforms, fails on each way a transform can go wrong."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from transforms import (
    CheckResult,
    Example,
    InputColumn,
    OutputColumn,
    TransformSpecError,
    check_transforms,
    define,
    load_spec,
    parse_spec,
    registered,
)
from transforms.check import check_columns, python_nondeterminism

ROWS = [{"payment_id": f"p{i}"} for i in range(6)]


def example(expected_extra: object = None, output: str = "out") -> Example:
    return Example(
        params={"output": output},
        schema="payment_id string",
        rows=ROWS,
        expected=[{**row, output: expected_extra} for row in ROWS],
    )


def with_rand(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """Seeded, yet still depends on the partitioning."""
    return df.withColumn(output, F.rand(42))


def with_clock(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """Stamps the processing date."""
    return df.withColumn(output, F.current_date())


def with_sql_uuid(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """Hides uuid() in a SQL string, where no Python name gives it away."""
    return df.withColumn(output, F.expr("uu" + "id()"))


def _jitter(value: str) -> str:
    return f"{value}-{random.random()}"  # noqa: S311 - the point of the fixture


def with_random_udf(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """A Python UDF calling a same-module helper that uses the random module."""
    return df.withColumn(output, F.udf(_jitter, "string")(F.col("payment_id")))


def first_two(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """Keeps whichever two rows come first: depends on the partitioning, with no suspicious expression."""
    return df.limit(2).withColumn(output, F.lit(None).cast("string"))


def wrong_example(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """Deterministic, but its example promises something else."""
    return df.withColumn(output, F.lit("a"))


def broken(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """Refers to a column that does not exist."""
    return df.withColumn(output, F.col("no_such_column"))


def upper_id(df: DataFrame, *, column: InputColumn) -> DataFrame:
    """Deterministic and honest."""
    return df.withColumn(column, F.upper(column))


def check(spark: Any, function: Any, examples: list[Example]) -> CheckResult:
    (result,) = check_transforms(spark, [define(function, examples=examples)])
    return result


def test_the_shipped_transforms_pass(spark: Any) -> None:
    results = check_transforms(spark)
    assert [r.transform for r in results] == sorted(registered())
    assert [r.problems for r in results if not r.ok] == []
    assert all(r.examples >= 1 for r in results)


def test_an_honest_transform_passes(spark: Any) -> None:
    expected = [{"payment_id": row["payment_id"].upper()} for row in ROWS]
    result = check(spark, upper_id, [Example({"column": "payment_id"}, "payment_id string", ROWS, expected)])
    assert result.ok, result.problems


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type")  # pyspark reads _jitter's type hints
@pytest.mark.parametrize(
    ("function", "reason"),
    [
        (with_rand, "uses non-deterministic Rand"),
        (with_clock, "uses non-deterministic CurrentDate"),
        (with_sql_uuid, "uses non-deterministic Uuid"),
        (with_random_udf, "its Python code uses random"),
        (first_two, "output differs between 1 partition and 3"),
        (wrong_example, "output is not the expected rows: expected"),
        (broken, "failed: AnalysisException"),
    ],
)
def test_a_bad_transform_fails_with_its_reason(spark: Any, function: Any, reason: str) -> None:
    result = check(spark, function, [example()])
    assert not result.ok
    assert any(reason in problem for problem in result.problems), result.problems


def test_the_python_scan_sees_clock_and_random_through_helpers_and_closures() -> None:
    def reads_clock(df: DataFrame) -> DataFrame:
        return df.withColumn("t", F.lit(time.time()))

    def calls_spark_clock(df: DataFrame) -> DataFrame:
        return df.withColumn("t", F.current_timestamp())

    assert python_nondeterminism(reads_clock) == ["uses time"]
    assert python_nondeterminism(calls_spark_clock) == ["calls current_timestamp()"]
    assert python_nondeterminism(with_random_udf) == ["uses random"]
    assert python_nondeterminism(upper_id) == []
    assert all(python_nondeterminism(t.function) == [] for t in registered().values())


SPEC = """\
transforms:
  - name: amount_to_minor_units
    params: {amount: amount, currency: currency, output: amount_minor}
  - name: normalize_country
    params: {column: amount_minor}
"""


def test_a_step_may_read_what_the_job_gives_or_an_earlier_step_writes() -> None:
    pipeline = parse_spec(yaml.safe_load(SPEC), "spec.yaml")
    check_columns(pipeline, ["amount", "currency"], given_by="the job", fix="parse it first")


def test_a_step_reading_a_column_nobody_gives_fails_naming_step_column_and_fix(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("column: amount_minor", "column: country"))
    with pytest.raises(TransformSpecError) as caught:
        check_columns(load_spec(spec), ["amount", "currency"], given_by="the job", fix="parse it first")
    error = caught.value
    assert (error.index, error.transform, error.line) == (1, "normalize_country", 4)
    assert str(error) == (
        f"{spec} line 4: transforms[1] normalize_country: input column 'country' (parameter column) is not a "
        "column the job gives its transforms, which are: amount, currency; earlier steps add amount_minor: "
        "set column to one of those columns, or add a step before this one that writes 'country'; parse it first"
    )


def test_a_column_written_only_by_a_later_step_is_missing() -> None:
    minor = {"amount": "amount", "currency": "currency", "output": "amount_minor"}
    swapped = {"transforms": [{"name": "normalize_country", "params": {"column": "amount_minor"}},
                              {"name": "amount_to_minor_units", "params": minor}]}  # fmt: skip
    with pytest.raises(TransformSpecError, match=r"transforms\[0\] normalize_country: input column 'amount_minor'"):
        check_columns(parse_spec(swapped, "job"), ["amount", "currency"], given_by="the job", fix="parse it first")
