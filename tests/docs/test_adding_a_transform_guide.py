"""docs/adding-a-transform.md followed literally: its code blocks, written where it says, work end to end.

The guide marks its blocks with ``<!-- guide-step: KIND [ARG] -->``; this test reads them, so when
the guide changes the test follows. In a temporary folder standing for the repository root it
writes the transform module, the shipped spec with the guide's step appended, and a copy of the
schema catalog with the newest ``payment_event`` version plus the guide's field (the repository's
catalog is never touched); runs the guide's ``ikkai transforms check`` and compares what it prints with what the guide
shows, for the working spec and for the guide's example of a step that reads a column the job does
not parse; and (integration) runs the enrich job as the guide says on a few raw payments and reads
``events.payments`` read_committed for the new field.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from demo.infer_process import InferProcess
from demo.raw_payments import EVENT, RawLine, encode_line, format_event_time, produce_lines
from ikkai.contract.codec import CATALOG_VAR, SchemaCatalog, SingleObjectCodec, schemas_dir
from ikkai.contract.compatibility import check_catalog
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich.job import TRANSFORMS_SPEC
from spark_jobs.enrich.records import TRANSFORM_COLUMNS
from stack.kit.topic_io import by_partition, create_topic, flat, unique
from tests.cli.cli_runner import IKKAI
from tests.spark_jobs.enrich.test_parse import VALID
from tests.spark_jobs.enrich_process import EnrichTopics
from transforms import registered

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "adding-a-transform.md"
KEEP = ("IKKAI_HOME", "IKKAI_JARS_DIR")  # where `ikkai setup` put Spark's jars
_STEP = re.compile(r"<!-- guide-step: ([\w-]+)(?: (\S+))? -->\n```[a-z]*\n(.*?)```", re.DOTALL)
_TABLE = re.compile(r"<!-- guide-table: transform-columns -->\n((?:\|.*\n)+)")
_VARIANT = re.compile(r"e\.g\. `(params: \{[^`]*\})`")
_PARAMS = re.compile(r"params: \{[^}]*\}")


@dataclass(frozen=True)
class Step:
    kind: str
    arg: str
    body: str


def guide_text() -> str:
    return GUIDE.read_text(encoding="utf-8")


def guide_steps() -> dict[str, Step]:
    steps = [Step(kind, arg, body) for kind, arg, body in _STEP.findall(guide_text())]
    by_kind = {step.kind: step for step in steps}
    assert len(by_kind) == len(steps), "each guide-step kind appears once"
    return by_kind


@dataclass(frozen=True)
class Workspace:
    """A folder standing for the repository root, as the guide leaves it."""

    root: Path
    spec: Path
    catalog: Path
    event_schema: str
    event_version: int
    field: Mapping[str, object]


def follow_the_guide(root: Path) -> Workspace:
    """Steps 1-3: the module, the spec step, the new schema version, written where the guide says."""
    steps = guide_steps()
    module = steps["module"]
    (root / module.arg).write_text(module.body, encoding="utf-8")
    spec_step = steps["spec-step"]
    spec = root / spec_step.arg
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(TRANSFORMS_SPEC.read_text(encoding="utf-8") + spec_step.body, encoding="utf-8")
    catalog = root / "schemas"
    shutil.copytree(schemas_dir(), catalog)
    name = steps["schema-field"].arg
    field = json.loads(steps["schema-field"].body)
    newest = SchemaCatalog.from_dir(catalog).get(name)
    schema = {**newest.schema, "fields": [*newest.schema["fields"], field]}
    (catalog / name / f"v{newest.version + 1}.avsc").write_text(json.dumps(schema, indent=2), encoding="utf-8")
    return Workspace(root, spec, catalog, name, newest.version + 1, field)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return follow_the_guide(tmp_path)


def exports(block: str) -> dict[str, str]:
    pairs = [line.removeprefix("export ").split("=", 1) for line in block.splitlines() if line.startswith("export ")]
    return {name: value for name, value in pairs}


def commands(block: str) -> list[list[str]]:
    """The block's command lines, ``ikkai`` and ``python`` as the venv's (the guide runs them from .venv/bin)."""
    programs = {"ikkai": str(IKKAI), "python": sys.executable}
    lines = [shlex.split(line) for line in block.splitlines() if line.strip() and not line.startswith(("export ", "#"))]
    return [[programs.get(words[0], words[0]), *words[1:]] for words in lines]


def run_check_block(workspace: Workspace) -> subprocess.CompletedProcess[str]:
    """Step 5 as a user types it, in the workspace, with the guide's exports."""
    block = guide_steps()["check"].body
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_") or k in KEEP}
    environment.update(exports(block))
    (command,) = commands(block)
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=environment, cwd=workspace.root, check=False
    )


def test_the_guide_lists_the_columns_the_job_gives_its_transforms() -> None:
    (table,) = _TABLE.findall(guide_text())
    rows = [[cell.strip().strip("`") for cell in line.strip().strip("|").split("|")] for line in table.splitlines()]
    assert [(name, kind) for name, kind, _ in rows[2:]] == list(TRANSFORM_COLUMNS)


def test_the_guide_adds_a_backward_compatible_schema_version(workspace: Workspace) -> None:
    catalog = SchemaCatalog.from_dir(workspace.catalog)
    check_catalog(catalog)
    newest = catalog.get(workspace.event_schema)
    assert newest.version == workspace.event_version
    assert newest.schema["fields"][-1] == workspace.field


def test_the_guides_check_passes_and_prints_what_the_guide_shows(workspace: Workspace) -> None:
    result = run_check_block(workspace)
    assert result.returncode == 0, result.stderr
    assert result.stdout == guide_steps()["check-output"].body
    assert "is_weekend" not in registered()  # the guide's module never leaks into this process


def test_a_step_reading_a_column_the_job_does_not_parse_fails_at_once_as_the_guide_shows(
    workspace: Workspace,
) -> None:
    (variant,) = _VARIANT.findall(guide_text())
    step = guide_steps()["spec-step"].body
    text = workspace.spec.read_text(encoding="utf-8")
    assert text.endswith(step)
    workspace.spec.write_text(text.removesuffix(step) + _PARAMS.sub(variant, step), encoding="utf-8")
    result = run_check_block(workspace)
    assert result.returncode == 1
    assert result.stderr == guide_steps()["unparsed-column-error"].body
    assert result.stdout == ""  # no Spark started, no verdicts printed


PARTITIONS = 1
DAYS = {  # event time → is_weekend, per the guide's example (UTC days)
    "2026-01-02T23:59:59.999Z": False,  # Friday
    "2026-01-03T00:00:00.000Z": True,  # Saturday
    "2026-01-04T12:30:00.000Z": True,  # Sunday
    "2026-01-05T00:00:00.000Z": False,  # Monday
}


def raw_lines() -> list[RawLine]:
    """One valid raw payment per day above, in event-time order (none late, none a duplicate)."""
    lines = []
    for number, event_time in enumerate(DAYS):
        payment_id = f"pay-guide-{number}"
        value = encode_line({**VALID, "event_id": f"evt-guide-{number}", "payment_id": payment_id,
                             "event_time": event_time})  # fmt: skip
        lines.append(RawLine(payment_id.encode(), value, kafka_partition(payment_id.encode(), PARTITIONS), EVENT,
                             f"evt-guide-{number}", True))  # fmt: skip
    return lines


class GuideEnrichProcess(InferProcess):
    """The guide's ``python -m spark_jobs.enrich ...`` with the workspace's schema catalog in place of the shipped one.

    The catalog ships inside the package, which this test must not edit, so the job runs with
    ``IKKAI_SCHEMA_CATALOG`` naming the workspace's copy: the driver and the Python workers (which
    inherit the environment) load the same catalog, as they must (a codec pickles as the catalog's
    digest and is refused by a process holding another); everything else is the job as the guide runs it.
    """

    def __init__(self, catalog: Path, module: str, args: list[str]) -> None:
        # The workspace stands for the checkout but holds only what the guide writes, so its
        # spark_jobs/enrich/ folder (the spec) would shadow the package as a namespace package once
        # ``-m`` puts the working folder first on sys.path; in a real checkout it is the package.
        self._start([sys.executable, "-m", module, *args], env={CATALOG_VAR: str(catalog), "PYTHONSAFEPATH": "1"})


@pytest.mark.integration
def test_the_guides_field_reaches_events_payments(
    cluster: KafkaContext, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 6: the job run as the guide says writes the new schema version, with the transform's value."""
    name = unique("guide")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"masterdata.merchants.{name}",
                          f"masterdata.customers.{name}")  # fmt: skip
    create_topic(cluster, topics.input, PARTITIONS)
    produce_lines(cluster, topics.input, raw_lines())
    for variable, value in exports(guide_steps()["check"].body).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.chdir(workspace.root)
    (command,) = commands(guide_steps()["run"].body)
    assert command[:3] == [sys.executable, "-m", "spark_jobs.enrich"]
    job = GuideEnrichProcess(workspace.catalog, command[2], [
        *command[3:], "--bootstrap", cluster.bootstrap_servers, "--checkpoint", str(workspace.root / "checkpoint"),
        "--query", name,
        "--input", topics.input, "--output", topics.events, "--dlq", topics.dlq, "--merchants", topics.merchants,
        "--customers", topics.customers, "--partitions", str(PARTITIONS), "--create-topics",
    ])  # fmt: skip
    assert job.wait() == 0, job.tail()

    codec = SingleObjectCodec(SchemaCatalog.from_dir(workspace.catalog))
    values = [value for _, value in flat(by_partition(cluster, topics.events))]  # read_committed
    assert len(values) == len(DAYS)
    assert {codec.writer_of(value).version for value in values} == {workspace.event_version}
    events = [codec.decode(workspace.event_schema, value) for value in values]
    assert {format_event_time(e["event_time"]): e["is_weekend"] for e in events} == DAYS
    assert flat(by_partition(cluster, topics.dlq)) == []
