"""What the demo starts (commands, bundle values) and how it tells that the pipeline is drained."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from demo.children import child_env
from demo.facts import Expectation
from demo.lineup import Lineup
from demo.stages import PipelineCounts
from deploy import bundle_ops
from deploy.clusters import kafka_cluster
from ikkai.contract.topics import DECISIONS_FRAUD as DECISIONS
from ikkai.contract.topics import DLQ_ENRICH, DLQ_INFER
from ikkai.contract.topics import EVENTS_PAYMENTS as EVENTS
from ikkai.contract.topics import INGEST_PAYMENTS as INGEST
from ikkai.contract.topics import OUTBOX_RECEIPTS as RECEIPTS
from ikkai.contract.topics import OUTBOX_REQUESTS as OUTBOX

LINEUP = Lineup(Path("/run"), "127.0.0.1:9092", "http://127.0.0.1:8083", partitions=2, batch=150)


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_live_jobs_run_continuously_in_bounded_batches_replays_until_drained() -> None:
    for name, command in (LINEUP.enrich(), LINEUP.infer()):
        assert "--continuous" in command and option(command, "--max-offsets-per-trigger") == "150"
        assert option(command, "--query") == name and option(command, "--checkpoint") == f"/run/checkpoints/{name}"
    for name, command in (LINEUP.enrich(replay=True), LINEUP.infer(replay=True)):
        assert "--continuous" not in command and name.endswith("-replay")
        assert option(command, "--checkpoint") == f"/run/checkpoints/{name}"  # fresh, its own


def test_replays_read_the_same_input_and_write_fresh_topics() -> None:
    _, enrich = LINEUP.enrich(replay=True)
    assert (option(enrich, "--input"), option(enrich, "--output"), option(enrich, "--dlq")) == (
        INGEST, "events.payments.replay", "dlq.enrich.replay",
    )  # fmt: skip
    _, infer = LINEUP.infer(replay=True)
    assert option(infer, "--input") == EVENTS  # a decision names its input topic
    assert option(infer, "--decisions") == "decisions.fraud.replay" and option(infer, "--outbox").endswith(".replay")


def test_bundles_point_at_the_drop_file_the_receiver_and_the_broker() -> None:
    ingest, outbox = LINEUP.bundles("http://127.0.0.1:8099")
    assert "sources.payments.file=/run/drop/payments.jsonl" in ingest.overrides and "partitions=2" in ingest.overrides
    assert ingest.connect_url == outbox.connect_url == "http://127.0.0.1:8083"
    assert "kafka.bootstrap_servers=127.0.0.1:9092" in outbox.overrides
    assert {o for o in outbox.overrides if o.startswith("targets.")} == {
        "targets.payments-api.url=http://127.0.0.1:8099", "targets.notifications-api.url=http://127.0.0.1:8099",
    }  # fmt: skip


def test_the_demos_applies_are_recorded_on_the_demos_kafka(tmp_path: Path) -> None:
    clusters = tmp_path / "page-clusters.yaml"  # as the demo's page writes it
    clusters.write_text(
        yaml.safe_dump({"dev": {"connect_url": "http://127.0.0.1:8083", "bootstrap_servers": "demo:9"}})
    )
    for request in LINEUP.bundles("http://127.0.0.1:8099", clusters):
        target = bundle_ops.cluster_target(request.env, request.connect_url, request.clusters)
        assert kafka_cluster(target).bootstrap_servers == "demo:9"  # where deploy.bundle_ops._record writes


EXPECT = Expectation(lines=10, events=8, dead_letters={"late": 2})
DONE = {INGEST: 10, EVENTS: 8, DLQ_ENRICH: 2, DECISIONS: 8, DLQ_INFER: 0, OUTBOX: 3, RECEIPTS: 3}


def test_drained_only_when_every_stage_caught_up() -> None:
    assert PipelineCounts(EXPECT, DONE).drained()
    for topic, short in ((INGEST, 9), (DLQ_ENRICH, 1), (DECISIONS, 7), (RECEIPTS, 2)):
        assert not PipelineCounts(EXPECT, {**DONE, topic: short}).drained(), topic
    assert not PipelineCounts(EXPECT, {}).drained()


def test_stages_report_done_of_total() -> None:
    stages = PipelineCounts(EXPECT, {**DONE, DECISIONS: 4}).stages()
    assert [(s.done, s.total) for s in stages.values()] == [(10, 10), (10, 10), (4, 8), (3, 3)]
    assert PipelineCounts(EXPECT, {INGEST: 5}).stages()["delivered"].total is None  # unknown before decisions


def test_children_get_the_demo_home_the_callers_jars_and_no_external_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IKKAI_BOOTSTRAP_SERVERS", "elsewhere:9092")
    monkeypatch.setenv("IKKAI_CONNECT_URL", "http://elsewhere:8083")
    env = child_env(Path("/h/demo"), Path("/h/jars"))
    assert (env["IKKAI_HOME"], env["IKKAI_JARS_DIR"]) == ("/h/demo", "/h/jars")
    assert "IKKAI_BOOTSTRAP_SERVERS" not in env and "IKKAI_CONNECT_URL" not in env
