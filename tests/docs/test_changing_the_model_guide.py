"""docs/changing-the-model.md, followed literally: train a new version, run the infer job with it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.payments_simulation import payment_records, simulate
from demo.pipeline_io import by_partition, create_topic, flat, produce_payments, unique
from ikkai.contract.codec import default_codec
from spark_jobs.model.fraud_model import MODEL_PATH, FraudModel
from tests.cli.cli_runner import IKKAI
from tests.docs.guide import read_guide

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
    assert version == "fraud-lr-" + hashlib.sha256(artifact).hexdigest()[:16]
    assert FraudModel.from_bytes(artifact).version == version
    assert (out / "customer_features.csv").stat().st_size > 0
    assert version != FraudModel.from_bytes(MODEL_PATH.read_bytes()).version  # another seed: another model


@pytest.mark.integration
def test_the_infer_job_run_as_the_guide_says_decides_with_the_new_version(
    bootstrap: str, trained: tuple[Path, str], tmp_path: Path
) -> None:
    out, version = trained
    [command] = read_guide(GUIDE).runs["infer"]
    name = unique("guide")
    payments = payment_records(simulate(3, payments=40).payments)
    source = create_topic(bootstrap, f"events.{name}", 2)
    produce_payments(bootstrap, source, payments, 2)
    # The guide's command as written, then this test's own topics and checkpoint (later options win).
    own = ["--input", source, "--decisions", f"decisions.{name}", "--outbox", f"outbox.{name}",
           "--dlq", f"dlq.{name}", "--query", name, "--checkpoint", str(tmp_path / "checkpoint")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")} | {"IKKAI_BOOTSTRAP_SERVERS": bootstrap}
    run = subprocess.run([*as_run(command, out), *own], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    codec = default_codec()
    decisions = [
        codec.decode("fraud_decision", value) for _, value in flat(by_partition(bootstrap, f"decisions.{name}"))
    ]
    assert sorted(d["event_id"] for d in decisions) == sorted(str(p["event_id"]) for p in payments)
    assert {d["model_version"] for d in decisions} == {version}
