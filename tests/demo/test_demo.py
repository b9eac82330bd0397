"""`ikkai demo` end to end, as a user runs it: a small day with chaos, judged by its JSON report.

The demo starts its own stack (in a temporary home), the receiver and both Spark jobs, kills
the infer job and the Connect worker midway, replays, and stops everything again. This test
reads only what the command prints on stdout and checks that the numbers in it add up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ikkai.settings import jars_dir
from stack.local_stack import LocalStack
from tests.cli.cli_runner import run_ikkai

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


def test_a_small_demo_with_chaos_keeps_every_promise(tmp_path: Path) -> None:
    env = {"IKKAI_HOME": str(tmp_path), "IKKAI_JARS_DIR": str(jars_dir())}
    result = run_ikkai("demo", "--size", "200", "--seed", "11", "-o", "json", env=env, timeout=840)
    assert result.stdout.strip(), result.stderr[-4000:]
    report = json.loads(result.stdout)  # stdout carries the report and nothing else
    failed = [f"{i['name']}: {i['detail']}" for i in report["invariants"] if not i["ok"]]
    assert not failed and result.returncode == 0, "\n".join(failed) + "\n" + result.stderr[-4000:]

    stages = report["stages"]
    ingested = stages["ingested"]["ingest.payments"]
    events, dead = stages["enriched"]["events.payments"], stages["enriched"]["dlq.enrich"]
    assert ingested == report["raw_lines"] == events + dead
    assert (
        events == report["expected"]["events"]
        and report["dead_letters_by_reason"] == report["expected"]["dead_letters"]
    )
    assert stages["decided"]["decisions.fraud"] == events and report["duplicate_decisions"] == 0
    effects = report["side_effects"]
    assert effects["requested"] == stages["decided"]["outbox.requests"] == effects["applied"] > 0
    assert effects["max_applied_per_request"] == 1
    assert report["receipts"]["delivered"] == effects["requested"] and report["receipts"]["dead_lettered"] == 0
    assert report["digests"]["replay"] == report["digests"]["live"]
    assert [e["action"] for e in report["chaos"]] == ["kill -9 infer", "restart connect worker"]
    assert all(e["recovered_seconds"] is not None for e in report["chaos"])
    for name in ("ingest_to_decision", "decision_to_receipt"):
        latency = report["latency_ms"][name]
        assert latency["count"] > 0 and 0 <= latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]

    assert LocalStack(tmp_path / "demo", jars_dir()).status().stopped  # nothing of the demo left running
