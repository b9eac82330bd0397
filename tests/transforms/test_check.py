"""The determinism check: passes on the shipped transforms, fails on each way a transform can go wrong."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from transforms import CheckResult, Example, InputColumn, OutputColumn, check_transforms, define, registered
from transforms.check import python_nondeterminism

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
