"""docs/changing-the-model.md, followed literally: train a new version, run the infer job with it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, FraudModel, deciding_version
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique
from tests.cli.cli_runner import IKKAI
from tests.docs.guide import read_guide

pytestmark = pytest.mark.heavy

GUIDE = "changing-the-model.md"
WRITTEN_TO = "/tmp/fraud-v2"  # where the guide writes the new model; the test uses a temporary folder


def as_run(command: list[str], out: Path) -> list[str]:
    """The guide's command with its output folder moved into the test's, run by this interpreter and venv."""
    args = [arg.replace(WRITTEN_TO, str(out)) for arg in command]
    if args[0] == "python":
        return [sys.executable, *args[1:]]
    assert args[0] == "ikkai", f"the guide runs {args[0]!r}"
    return [str(IKKAI), *args[1:]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("model")
    [command] = read_guide(GUIDE).runs["train"]
    result = subprocess.run(as_run(command, out), capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    return out, result.stdout.strip()


def test_training_prints_the_version_of_the_artifact_it_wrote(trained: tuple[Path, str]) -> None:
    out, version = trained
    artifact = (out / "model.json").read_bytes()
    snapshots = (out / "customer_features.csv").read_bytes()
    assert version.startswith("fraud-lr-" + hashlib.sha256(artifact).hexdigest()[:16] + "-")
    assert FraudModel.from_bytes(artifact).version + "-" == version[: -len("0123456789ab")]
    assert version == deciding_version(artifact, snapshots) and snapshots
    assert version != deciding_version(MODEL_PATH.read_bytes(), FEATURES_PATH.read_bytes())  # another seed


def read_decisions(cluster: KafkaContext, topic: str) -> list[dict[str, Any]]:
    codec = default_codec()
    return [codec.decode("fraud_decision", value) for _, value in flat(by_partition(cluster, topic)) if value]


def run_ok(command: list[str], bootstrap: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")} | {"IKKAI_BOOTSTRAP_SERVERS": bootstrap}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.integration
def test_the_guides_shadow_compare_and_cutover_decide_every_event_once(
    cluster: KafkaContext, trained: tuple[Path, str], tmp_path: Path
) -> None:
    """The live query runs with the shipped model; then the guide's shadow run, its comparison and its cutover,
    each as written followed by this test's own topics, query and checkpoint (later options win)."""
    out, version = trained
    runs = read_guide(GUIDE).runs
    name = unique("guide")
    payments = payment_records(simulate(3, payments=60).payments)
    first = {str(p["event_id"]) for p in payments[:40]}
    source = create_topic(cluster, f"events.{name}", 2)
    decisions, outbox = f"decisions.{name}", f"outbox.{name}"
    for topic in (decisions, outbox, f"dlq.{name}"):
        create_topic(cluster, topic, 2)
    produce_payments(cluster, source, payments[:40], 2)
    topics = ["--input", source, "--decisions", decisions, "--outbox", outbox, "--dlq", f"dlq.{name}"]
    live = [*topics, "--query", name, "--checkpoint", str(tmp_path / "live")]
    run_ok([str(IKKAI), "jobs", "run", "infer", *live], cluster.bootstrap_servers)  # the live query, shipped model
    old = deciding_version(MODEL_PATH.read_bytes(), FEATURES_PATH.read_bytes())
    asked = by_partition(cluster, outbox)

    [shadow] = runs["shadow"]
    run_ok(
        [*as_run(shadow, out), *topics, "--query", f"{name}.shadow", "--checkpoint", str(tmp_path / "shadow")],
        cluster.bootstrap_servers,
    )
    assert by_partition(cluster, outbox) == asked  # a shadow asks for no side effect
    shadowed = read_decisions(cluster, f"{decisions}.shadow")
    assert sorted(d["event_id"] for d in shadowed) == sorted(first)
    assert {d["model_version"] for d in shadowed} == {version}

    [compare] = runs["compare"]
    report = run_ok([*as_run(compare, out), "--live", decisions], cluster.bootstrap_servers).stdout.splitlines()
    rows = [line.split() for line in report if line.startswith(old)]
    assert [row[:3] for row in rows] == [[old, version, "40"]], report

    produce_payments(cluster, source, payments[40:], 2)
    [cutover] = runs["cutover"]
    run_ok([*as_run(cutover, out), *live], cluster.bootstrap_servers)
    decided = read_decisions(cluster, decisions)
    assert sorted(d["event_id"] for d in decided) == sorted(str(p["event_id"]) for p in payments)
    assert {d["event_id"] for d in decided if d["model_version"] == old} == first
    assert {d["model_version"] for d in decided if d["event_id"] not in first} == {version}
