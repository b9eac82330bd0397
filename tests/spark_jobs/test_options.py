"""The jobs' options: each option fills the dataclass field of its name, parsed typed, nothing touched while parsing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from spark_jobs.enrich.job import EnrichOptions
from spark_jobs.enrich.job import main as enrich_main
from spark_jobs.infer.job import InferOptions
from spark_jobs.infer.job import main as infer_main
from spark_jobs.options import JobOptions

JOBS = [(enrich_main, EnrichOptions), (infer_main, InferOptions)]


@pytest.mark.parametrize(("command", "options"), JOBS, ids=["enrich", "infer"])
def test_the_options_are_the_fields(command: click.Command, options: type[JobOptions]) -> None:
    names = {param.name for param in command.params if param.name != "help"}
    assert names == {field.name for field in dataclasses.fields(options)}
    assert {field.name for field in dataclasses.fields(JobOptions)} < names  # the shared ones are every job's


@pytest.mark.parametrize(("command", "options"), JOBS, ids=["enrich", "infer"])
def test_the_command_lines_defaults_are_the_fields_defaults(command: click.Command, options: type[Any]) -> None:
    with command.make_context(command.name or "job", []) as context:
        assert options(**context.params) == options()


def test_a_command_line_is_parsed_typed() -> None:
    with infer_main.make_context("infer", ["--checkpoint", "hdfs://nn/cp", "--start-offsets", "0:120,1:80",
                                           "--max-offsets-per-trigger", "7", "--continuous"]) as context:  # fmt: skip
        given = InferOptions(**context.params)
    assert given.checkpoint == "hdfs://nn/cp"  # a URI kept as written
    assert given.start_offsets == {0: 120, 1: 80}
    assert given.max_offsets_per_trigger == 7 and given.continuous and given.query_name == "infer"
    assert InferOptions(shadow=True).query_name == "infer.shadow"
    assert isinstance(EnrichOptions(checkpoint=Path("cp")).checkpoint, Path)


def test_create_topics_without_partitions_is_refused_before_kafka() -> None:
    result = CliRunner().invoke(enrich_main, ["--bootstrap", "127.0.0.1:9", "--create-topics"])
    assert result.exit_code == 2 and "--create-topics needs --partitions" in result.output


def test_the_default_batch_bound_is_the_floor_rate_worst_case() -> None:
    from spark_jobs.options import default_max_offsets_per_trigger, measured_max_offsets_per_trigger

    assert default_max_offsets_per_trigger() == 25_000  # 60 s: 15 s at 5,000 records/s, 3 outputs per input
    assert default_max_offsets_per_trigger(2000) == measured_max_offsets_per_trigger(5_000, 3, 2000) == 833


@pytest.mark.parametrize(
    ("rate", "outputs", "timeout_ms", "output_bytes", "bound"),
    [
        (20_000, 1.25, 60_000, 0, 240_000),  # a measured rate: a quarter of the timeout at it
        (20_000, 1.25, 60_000, 500, 100_663),  # and the batch's worst partition in one transaction of 60 MiB
        (20_000, 2.5, 60_000, 0, 120_000),  # twice the outputs per input: half the inputs
        (20_000, 1.25, 6_000, 0, 24_000),  # a tenth of the timeout: a tenth of the batch
        (50, 3, 1_000, 0, 100),  # never under 100
    ],
)
def test_a_batch_bound_follows_the_measured_rate_the_outputs_the_timeout_and_the_bytes(
    rate: float, outputs: float, timeout_ms: int, output_bytes: float, bound: int
) -> None:
    from spark_jobs.options import measured_max_offsets_per_trigger

    assert measured_max_offsets_per_trigger(rate, outputs, timeout_ms, output_bytes) == bound


@pytest.mark.parametrize(("rate", "outputs", "output_bytes"), [(0, 1, 0), (1000, 0, 0), (1000, 1, -1)])
def test_a_rate_that_bounds_nothing_is_refused(rate: float, outputs: float, output_bytes: float) -> None:
    from spark_jobs.options import measured_max_offsets_per_trigger

    with pytest.raises(ValueError, match="does not bound a batch"):
        measured_max_offsets_per_trigger(rate, outputs, 60_000, output_bytes)
