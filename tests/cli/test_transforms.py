"""``ikkai transforms list|check``: the check fails on a deliberately non-deterministic transform, passes on ours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from cli.app import cli
from spark_jobs.enrich.records import TRANSFORM_COLUMNS
from tests.cli.cli_runner import ROOT, run_ikkai
from transforms import TransformSpecError, registered

KEEP = ("IKKAI_HOME", "IKKAI_JARS_DIR")  # where `ikkai setup` put Spark's jars
SHIPPED = ["amount_to_minor_units", "mask_card_number", "merchant_category", "normalize_country"]


def test_list_shows_every_transform_with_its_parameters() -> None:
    result = CliRunner().invoke(cli, ["transforms", "list", "-o", "json"])
    assert result.exit_code == 0, result.output
    listed = {t["name"]: t for t in json.loads(result.output)["transforms"]}
    assert set(SHIPPED) <= set(listed)
    assert [p["name"] for p in listed["merchant_category"]["params"]] == ["code_column", "output"]
    assert listed["mask_card_number"]["module"] == "transforms.payments"
    text = CliRunner().invoke(cli, ["transforms", "list"]).output
    assert text.splitlines()[0].split() == ["TRANSFORM", "PARAMS", "SUMMARY"]
    assert "amount_to_minor_units  amount, currency, output" in text


def test_check_fails_on_a_nondeterministic_transform_and_passes_the_shipped_ones() -> None:
    """As a user runs it: the ``ikkai`` script in the repo root, the fixture module loaded with --module."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_") or k in KEEP}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ikkai")), "transforms", "check", "-o", "json",
         "--module", "tests.transforms.nondeterministic"],
        capture_output=True, text=True, timeout=600, env=environment, cwd=ROOT, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    verdicts = {r["transform"]: r for r in report["results"]}
    assert report["passed"] is False
    assert not verdicts["stamp_processing_time"]["ok"]
    assert any("CurrentTimestamp" in problem for problem in verdicts["stamp_processing_time"]["problems"])
    assert [name for name, r in verdicts.items() if r["ok"]] == SHIPPED
    assert "stamp_processing_time" not in registered()  # the fixture never leaks into this process


def test_check_with_a_spec_checks_the_transforms_it_names(spark: Any, tmp_path: Path) -> None:
    spec = tmp_path / "pipeline.yaml"
    spec.write_text("transforms:\n  - {name: mask_card_number, params: {column: card_number}}\n")
    result = CliRunner().invoke(cli, ["transforms", "check", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].split()[:3] == ["mask_card_number", "ok", "1"]
    assert lines[-1] == "transforms check: passed"
    assert spark.range(1).count() == 1  # the shared test session is still usable afterwards


def test_check_with_a_bad_spec_fails_before_spark_starts(tmp_path: Path) -> None:
    spec = tmp_path / "pipeline.yaml"
    spec.write_text("transforms:\n  - {name: mask_pan}\n")
    result = CliRunner().invoke(cli, ["transforms", "check", "--spec", str(spec)])
    assert isinstance(result.exception, TransformSpecError)
    assert "unknown transform 'mask_pan'" in str(result.exception)


def test_an_unimportable_module_is_a_one_line_error() -> None:
    result = run_ikkai("transforms", "list", "--module", "tests.transforms.no_such_module")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "ikkai: error: --module: tests.transforms.no_such_module: cannot import the transforms module"
    )


def test_modules_named_in_the_environment_are_registered_for_every_reader() -> None:
    env = {"IKKAI_TRANSFORM_MODULES": "tests.transforms.nondeterministic"}
    listed = run_ikkai("transforms", "list", "-o", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "stamp_processing_time" in {t["name"] for t in json.loads(listed.stdout)["transforms"]}
    spec = {"transforms": [{"name": "stamp_processing_time", "params": {"output": "t"}}]}
    loaded = subprocess.run(  # what a job sees: registered() through parse_spec/load_spec
        [sys.executable, "-c", f"import transforms; print(transforms.parse_spec({spec!r}, 'job').names)"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, **env}, check=False,
    )  # fmt: skip
    assert loaded.stdout.strip() == "['stamp_processing_time']", loaded.stderr


def test_check_fails_at_once_when_a_step_reads_a_column_the_enrich_job_does_not_parse(tmp_path: Path) -> None:
    spec = tmp_path / "pipeline.yaml"
    spec.write_text("transforms:\n  - {name: normalize_country, params: {column: ip_country}}\n")
    result = CliRunner().invoke(cli, ["transforms", "check", "--spec", str(spec)])
    error = result.exception
    assert isinstance(error, TransformSpecError)
    assert (error.spec, error.line, error.index, error.transform) == (str(spec), 2, 0, "normalize_country")
    message = str(error)
    assert "input column 'ip_country' (parameter column) is not a column the enrich job gives its transforms" in message
    assert f"which are: {', '.join(name for name, _ in TRANSFORM_COLUMNS)}: set column to one of those" in message
    assert "spark_jobs/enrich/parse.py" in message  # what to do about a raw field the job does not parse
    assert "local Spark" not in result.output  # it failed before Spark started


def test_check_without_a_spec_validates_the_enrich_jobs_spec_first(monkeypatch: Any, tmp_path: Path) -> None:
    broken = tmp_path / "enrich_transforms.yaml"
    broken.write_text("transforms:\n  - {name: mask_card_number, params: {column: pan}}\n")
    monkeypatch.setattr("spark_jobs.enrich.job.TRANSFORMS_SPEC", broken)
    result = CliRunner().invoke(cli, ["transforms", "check"])
    assert isinstance(result.exception, TransformSpecError)
    assert str(result.exception).startswith(f"{broken} line 2: transforms[0] mask_card_number: input column 'pan'")
