"""``ikkai transforms list|check``: what transforms exist, and are they deterministic and true to their examples.

    ikkai transforms list [-o json]
    ikkai transforms check [--spec FILE] [--module MOD ...] [-o json]   # exit 1 if any transform fails

A spec (``--spec``, else the enrich job's own ``spark_jobs/enrich/transforms.yaml``) is validated
first, before Spark starts: its transforms and parameters, and that every step reads only columns
the enrich job gives its transforms (``spark_jobs.enrich.records.TRANSFORM_COLUMNS``) or an earlier
step writes. Without ``--spec`` every registered transform is then checked, with it the spec's.

``--module`` (repeatable) imports more Python modules first (from installed packages or the current
directory), so transforms registered outside ``transforms/`` are listed and checked too. Modules in
IKKAI_TRANSFORM_MODULES (space-separated) are always loaded, here and in the jobs (``registered()``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from cli.output import emit, output_option, say
from transforms.check import CheckResult, check_transforms
from transforms.registry import Transform, load_modules, registered
from transforms.spec import TransformPipeline

module_option = click.option(
    "--module", "modules", multiple=True, metavar="MODULE",
    help="Import this Python module first, registering its transforms (repeatable); see also IKKAI_TRANSFORM_MODULES.",
)  # fmt: skip


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def transforms() -> None:
    """Data-engineer transforms: list them, check them (determinism and examples)."""


def _describe(transform: Transform) -> dict[str, Any]:
    return {
        "name": transform.name,
        "module": transform.module,
        "summary": transform.summary,
        "doc": transform.doc,
        "examples": len(transform.examples),
        "params": [
            {
                "name": p.name,
                "type": p.type_name,
                "required": p.required,
                **({} if p.required else {"default": p.default}),
            }
            for p in transform.params
        ],
    }


def _list_text(data: dict[str, Any]) -> str:
    rows = [(t["name"], ", ".join(p["name"] for p in t["params"]), t["summary"]) for t in data["transforms"]]
    name_width = max([len("TRANSFORM"), *(len(r[0]) for r in rows)])
    param_width = max([len("PARAMS"), *(len(r[1]) for r in rows)])
    lines = [f"{'TRANSFORM':<{name_width}}  {'PARAMS':<{param_width}}  SUMMARY"]
    lines += [f"{name:<{name_width}}  {params:<{param_width}}  {summary}" for name, params, summary in rows]
    return "\n".join(lines)


@transforms.command("list")
@module_option
@output_option
def list_transforms(modules: tuple[str, ...], output: str) -> None:
    """Every registered transform: name, parameters, what it does."""
    load_modules(modules, source="--module")
    emit({"transforms": [_describe(t) for t in registered().values()]}, output, _list_text)


def _check_text(data: dict[str, Any]) -> str:
    width = max([len("TRANSFORM"), *(len(r["transform"]) for r in data["results"])])
    lines = [f"{'TRANSFORM':<{width}}  {'RESULT':<6}  EXAMPLES  DETAIL"]
    for result in data["results"]:
        verdict = "ok" if result["ok"] else "FAILED"
        problems = result["problems"] or ["deterministic; matches its examples"]
        lines.append(f"{result['transform']:<{width}}  {verdict:<6}  {result['examples']:>8}  {problems[0]}")
        lines += [f"{'':<{width}}  {'':<6}  {'':>8}  {problem}" for problem in problems[1:]]
    lines.append("transforms check: " + ("passed" if data["passed"] else "FAILED"))
    return "\n".join(lines)


@transforms.command()
@click.option(
    "--spec", type=click.Path(dir_okay=False, path_type=Path),
    help="Validate this enrich pipeline spec (transforms, parameters, columns) and check only the transforms it "
    "names [default: validate the enrich job's spec, check every registered transform].",
)  # fmt: skip
@module_option
@output_option
def check(spec: Path | None, modules: tuple[str, ...], output: str) -> None:
    """Run every transform on its examples twice (1 and several partitions); fail on differences or non-determinism.

    Exit 1 when any transform fails, with one line per reason.
    """
    load_modules(modules, source="--module")
    pipeline = _enrich_spec(spec)
    chosen = registered() if spec is None else {step.name: step.transform for step in pipeline.steps}
    data: dict[str, Any] = {"spec": {"path": pipeline.source, "steps": pipeline.names}}
    say(f"checking {len(chosen)} transform(s) on a local Spark")
    results = _run_checks(chosen)
    data.update({"passed": all(r.ok for r in results), "results": [r.as_dict() for r in results]})
    emit(data, output, _check_text)
    if not data["passed"]:
        sys.exit(1)


def _enrich_spec(spec: Path | None) -> TransformPipeline:
    """The spec, loaded and checked against the columns the enrich job gives its transforms (no Spark yet)."""
    from spark_jobs.enrich.job import TRANSFORMS_SPEC, load_enrich_spec

    return load_enrich_spec(TRANSFORMS_SPEC if spec is None else spec)


def _run_checks(chosen: dict[str, Transform]) -> list[CheckResult]:
    from pyspark.sql import SparkSession

    from spark_jobs.session import spark_session

    owned = SparkSession.getActiveSession() is None
    spark = spark_session(
        "ikkai-transforms-check", conf={"spark.sql.shuffle.partitions": "3", "spark.ui.showConsoleProgress": "false"}
    )
    try:
        return check_transforms(spark, chosen)
    finally:
        if owned:
            spark.stop()
