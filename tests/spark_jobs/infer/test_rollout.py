"""A model rollout, exactly once: a cutover, a refused second query, a handover, a shadow and its comparison.

Each integration test runs the infer job as its own process on the real stack and judges what an
independent read_committed reader sees: decisions per event, outbox requests per (event, effect),
and the commit markers. The new model is the shipped one with other thresholds: another artifact,
so another version, which decides many payments differently.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.app import cli
from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from spark_jobs.infer.decision_compare import compare
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, FraudModel, deciding_version
from spark_jobs.sink.commit_markers import CommitMarker, Lineage, VersionCut, commits_topic_for, read_markers
from spark_jobs.sink.query_handover import parse_start_offsets
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique

pytestmark = pytest.mark.heavy

PARTITIONS = 2
FIRST, SECOND = 120, 80  # events before the change, and after it
OLD = deciding_version(MODEL_PATH.read_bytes(), FEATURES_PATH.read_bytes())  # what the shipped model's decisions carry
Decisions = list[dict[str, Any]]


@pytest.fixture(scope="module")
def new_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The shipped model with lower thresholds: a new artifact, a new version, other actions."""
    document = json.loads(MODEL_PATH.read_bytes())
    document["thresholds"] = {"hold": 0.3, "review": 0.12}
    path = tmp_path_factory.mktemp("model") / "model.json"
    path.write_bytes(json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    version = deciding_version(path.read_bytes(), FEATURES_PATH.read_bytes())
    assert version != OLD
    return path, version


@pytest.fixture(scope="module")
def events() -> list[dict[str, object]]:
    records = payment_records(simulate(27, payments=FIRST + SECOND).payments)
    assert len({str(r["event_id"]) for r in records}) == FIRST + SECOND
    return records


def pipeline(cluster: KafkaContext) -> InferTopics:
    name = unique("rollout")
    topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.input, topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)
    return topics


def run(cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, *extra: str) -> InferProcess:
    job = InferProcess(cluster, topics, checkpoint, query, *extra)
    job.wait()
    return job


def run_to_end(cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, *extra: str) -> InferProcess:
    job = run(cluster, topics, checkpoint, query, *extra)
    assert job.process.returncode == 0, job.tail()
    return job


def decisions(cluster: KafkaContext, topic: str) -> Decisions:
    codec = default_codec()
    return [codec.decode("fraud_decision", value) for _, value in flat(by_partition(cluster, topic))]


def requests(cluster: KafkaContext, topic: str) -> Decisions:
    codec = default_codec()
    return [codec.decode("outbox_request", value) for _, value in flat(by_partition(cluster, topic))]


def assert_exactly_once(cluster: KafkaContext, topics: InferTopics, events: list[dict[str, object]]) -> Decisions:
    """One decision per event, one outbox request per (event, effect), each belonging to a committed decision."""
    decided = decisions(cluster, topics.decisions)
    assert Counter(d["event_id"] for d in decided) == Counter(str(e["event_id"]) for e in events)
    by_id = {d["decision_id"]: d for d in decided}
    asked = requests(cluster, topics.outbox)
    assert all(r["decision_id"] in by_id for r in asked)
    per_effect = Counter((by_id[r["decision_id"]]["event_id"], r["effect"]) for r in asked)
    assert set(per_effect.values()) <= {1}, per_effect.most_common(3)
    wanted = {"hold": 2, "review": 1, "approve": 0}
    per_decision = Counter(r["decision_id"] for r in asked)
    assert all(per_decision.get(i, 0) == wanted[d["action"]] for i, d in by_id.items())
    return decided


def markers(bootstrap: str, query: str) -> dict[int, CommitMarker]:
    return read_markers(
        KafkaContext.from_environment(bootstrap), "ikkai", query, topic=commits_topic_for("ikkai", query)
    )


def first_offsets(decided: Decisions, version: str) -> dict[int, int]:
    """Per input partition, the first input offset decided by ``version``."""
    found: dict[int, int] = {}
    for d in decided:
        if d["model_version"] == version:
            found[d["input_partition"]] = min(found.get(d["input_partition"], d["input_offset"]), d["input_offset"])
    return found


@pytest.mark.integration
@pytest.mark.timeout(1800)  # several job processes one after another: slow on a loaded 2-core machine
def test_a_new_model_is_a_cutover_of_the_same_query_recorded_where_it_took_over(
    cluster: KafkaContext, events: list[dict[str, object]], new_model: tuple[Path, str], tmp_path: Path
) -> None:
    """The query goes on from its markers with the new model: every event decided once, the old version before
    the cut and the new one after it, one outbox request per effect, and each marker records the cut at the
    input offsets where the new version took over (so a replay can reproduce it)."""
    topics, query, (model, version) = pipeline(cluster), unique("cutover"), new_model
    produce_payments(cluster, topics.input, events[:FIRST], PARTITIONS)
    run_to_end(cluster, topics, tmp_path, query)
    produce_payments(cluster, topics.input, events[FIRST:], PARTITIONS)
    run_to_end(cluster, topics, tmp_path, query, "--model", str(model))
    decided = assert_exactly_once(cluster, topics, events)
    first = {str(e["event_id"]) for e in events[:FIRST]}
    assert {d["model_version"] for d in decided if d["event_id"] in first} == {OLD}
    assert {d["model_version"] for d in decided if d["event_id"] not in first} == {version}
    cut_at = first_offsets(decided, version)
    assert sorted(cut_at) == list(range(PARTITIONS))
    for d in decided:  # the cut splits each input partition: below it the old version, from it on the new one
        assert (d["model_version"] == version) == (d["input_offset"] >= cut_at[d["input_partition"]])
    for partition, marker in markers(cluster.bootstrap_servers, query).items():
        assert marker.writer_version == version
        assert marker.output_topics == (topics.decisions, topics.outbox, topics.dlq)
        assert [c.version for c in marker.cuts] == [OLD, version]
        assert marker.cuts[0].from_offsets == {}  # the query's first version decided from the start
        assert marker.cuts[1].from_offsets == {partition: cut_at[partition]}


@pytest.mark.integration
def test_a_new_query_over_another_querys_output_is_refused_in_one_line(
    cluster: KafkaContext, events: list[dict[str, object]], new_model: tuple[Path, str], tmp_path: Path
) -> None:
    """What docs/changing-the-model.md used to say (a new --query over the same topics) decided every event a
    second time under a new decision id; now its claim is void (the first query owns the topics in the claim log)
    and it stops before writing, naming the query and the ways forward."""
    topics, query = pipeline(cluster), unique("owner")
    produce_payments(cluster, topics.input, events[:FIRST], PARTITIONS)
    run_to_end(cluster, topics, tmp_path / "owner", query)
    before = by_partition(cluster, topics.decisions), by_partition(cluster, topics.outbox)
    second = unique("second")
    job = run(cluster, topics, tmp_path / "second", second, "--model", str(new_model[0]))
    assert job.process.returncode != 0, job.tail()
    [line] = [line for line in job.log if line.startswith("ikkai: error:")]
    assert f"query {query} (app ikkai) owns {topics.decisions} for input {topics.input}" in line
    assert f"--after-query {query}" in line and f"--query {query}" in line and "--shadow" in line
    assert (by_partition(cluster, topics.decisions), by_partition(cluster, topics.outbox)) == before
    assert markers(cluster.bootstrap_servers, second) == {}


@pytest.mark.integration
@pytest.mark.timeout(1800)  # several job processes one after another: slow on a loaded 2-core machine
def test_a_handover_from_a_running_query_fences_it_and_continues_with_no_duplicate_and_no_gap(
    cluster: KafkaContext, events: list[dict[str, object]], new_model: tuple[Path, str], tmp_path: Path
) -> None:
    """--after-query Q while Q still runs: the handover fences Q's writers and records itself on Q's commit
    partitions, so Q, given new events, stops at its next write without committing; the new query starts at Q's
    committed offsets. Every event is decided once, Q's before the handover, the new query's after it."""
    topics, old, new, (model, version) = pipeline(cluster), unique("old"), unique("new"), new_model
    produce_payments(cluster, topics.input, events[:FIRST], PARTITIONS)
    running = InferProcess(cluster, topics, tmp_path / "old", old, "--continuous", "--trigger-interval", "500ms")
    try:
        while len(decisions(cluster, topics.decisions)) < FIRST:
            assert running.wait_for_batches(1, timeout=900), running.tail()  # a first batch is slow when loaded
        run_to_end(cluster, topics, tmp_path / "new", new, "--after-query", old, "--model", str(model))
        produce_payments(cluster, topics.input, events[FIRST:], PARTITIONS)
        assert running.wait(600) != 0, running.tail()  # its next write found the handover and stopped it
    finally:
        running.kill()
    assert f"handed its output over to query {new}" in "".join(running.log), running.tail()
    run_to_end(cluster, topics, tmp_path / "new", new, "--model", str(model))  # no --after-query: it is recorded
    decided = assert_exactly_once(cluster, topics, events)
    first = {str(e["event_id"]) for e in events[:FIRST]}
    assert {d["model_version"] for d in decided if d["event_id"] in first} == {OLD}
    assert {d["model_version"] for d in decided if d["event_id"] not in first} == {version}
    cut_at = first_offsets(decided, version)
    for partition, marker in markers(cluster.bootstrap_servers, new).items():
        assert marker.started_after == old
        assert marker.cuts[-1] == VersionCut(version, marker.cuts[-1].batch_id, {partition: cut_at[partition]})
    assert {m.handed_over_to for m in markers(cluster.bootstrap_servers, old).values()} == {new}
    again = run(cluster, topics, tmp_path / "old", old)  # the old query cannot come back
    assert again.process.returncode != 0 and f"handed its output over to query {new}" in again.tail()
    assert_exactly_once(cluster, topics, events)


@pytest.mark.integration
@pytest.mark.timeout(1800)  # several job processes one after another: slow on a loaded 2-core machine
def test_a_shadow_model_asks_for_no_side_effect_and_compare_counts_each_version_pair(
    cluster: KafkaContext, events: list[dict[str, object]], new_model: tuple[Path, str], tmp_path: Path
) -> None:
    """--shadow decides into <decisions>.shadow and writes no outbox request; `ikkai jobs compare` matches the
    two topics by event and counts, per (live, shadow) version pair, the events both decided and those whose
    action differs, checked here against a join of the two topics done by the test. With a shadow that keeps the
    live outbox (mutation: ``Topics.shadow`` passing ``self.outbox`` on) this test fails: the shadow query is
    refused for writing the live query's outbox topic, and would otherwise change what a reader of it sees."""
    topics, live, (model, version) = pipeline(cluster), unique("live"), new_model
    produce_payments(cluster, topics.input, events[:FIRST], PARTITIONS)
    run_to_end(cluster, topics, tmp_path / "live", live)
    produce_payments(cluster, topics.input, events[FIRST:], PARTITIONS)
    run_to_end(cluster, topics, tmp_path / "live", live, "--model", str(model))  # live: old, then new after a cut
    asked = by_partition(cluster, topics.outbox)
    run_to_end(cluster, topics, tmp_path / "shadow", unique("shadow"), "--shadow", "--model", str(model),
               "--create-topics", "--partitions", str(PARTITIONS))  # fmt: skip
    assert by_partition(cluster, topics.outbox) == asked
    shadow = decisions(cluster, f"{topics.decisions}.shadow")
    assert Counter(d["event_id"] for d in shadow) == Counter(str(e["event_id"]) for e in events)
    assert {d["model_version"] for d in shadow} == {version}
    live_decisions = {d["event_id"]: d for d in decisions(cluster, topics.decisions)}
    differ = sum(live_decisions[d["event_id"]]["action"] != d["action"] for d in shadow)
    assert differ > 0
    result = CliRunner().invoke(
        cli, ["jobs", "compare", "--bootstrap", cluster.bootstrap_servers, "--live", topics.decisions, "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    pairs = {(p["live_version"], p["shadow_version"]): (p["both"], p["differ"]) for p in report["pairs"]}
    assert pairs == {(OLD, version): (FIRST, differ), (version, version): (SECOND, 0)}
    assert (report["live_only"], report["shadow_only"]) == (0, 0)
    [old_pair] = [p for p in report["pairs"] if p["live_version"] == OLD]
    assert len(old_pair["sample"]) == min(5, differ)
    assert all(s["live_action"] != s["shadow_action"] for s in old_pair["sample"])


def test_a_new_writer_version_is_a_cut_at_the_offsets_committed_so_far() -> None:
    first = Lineage().written_by("v1", 0, {})
    assert first.cuts == (VersionCut("v1", 0, {}),)
    assert first.written_by("v1", 5, {0: 9}) is first
    second = first.written_by("v2", 6, {0: 9, 1: 4})
    assert second.version == "v2" and second.cuts[-1] == VersionCut("v2", 6, {0: 9, 1: 4})
    assert parse_start_offsets("0:120, 1:80") == {0: 120, 1: 80}


def test_compare_counts_per_version_pair_and_samples_the_differences() -> None:
    def d(event: str, version: str, action: str) -> dict[str, Any]:
        return {"event_id": event, "payment_id": f"p{event}", "model_version": version, "action": action, "score": 0.5}

    live = [d("1", "a", "hold"), d("2", "a", "approve"), d("3", "b", "review"), d("4", "b", "approve")]
    shadow = [d("1", "s", "hold"), d("2", "s", "review"), d("3", "s", "review"), d("5", "s", "hold")]
    result = compare(live, shadow, sample=1)
    assert [(p.live_version, p.shadow_version, p.both, p.differ) for p in result.pairs] == [
        ("a", "s", 2, 1),
        ("b", "s", 1, 0),
    ]
    assert result.pairs[0].sample[0].event_id == "2" and (result.live_only, result.shadow_only) == (1, 1)


def test_enrichs_writer_version_changes_with_each_setting_that_decides_its_output(tmp_path: Path) -> None:
    from spark_jobs.enrich.job import TRANSFORMS_SPEC, writer_version

    spec = Path(str(TRANSFORMS_SPEC))
    base = writer_version(10_000, {"EUR": 2}, spec)
    assert base.startswith("enrich-lateness10000-") and base == writer_version(10_000, {"EUR": 2}, spec)
    edited = tmp_path / "spec.yaml"
    edited.write_bytes(spec.read_bytes() + b"\n# edited\n")
    others = {writer_version(20_000, {"EUR": 2}, spec), writer_version(10_000, {"EUR": 3}, spec),
              writer_version(10_000, {"EUR": 2}, edited)}  # fmt: skip
    assert base not in others and len(others) == 3


def test_a_shadow_decides_like_the_live_model_but_asks_for_no_side_effect() -> None:
    import pandas as pd

    from spark_jobs.infer.fraud_decisions import Topics, decide
    from spark_jobs.model.fraud_model import load_snapshots

    codec = default_codec()
    payments = payment_records(simulate(27, payments=300).payments)
    rows = pd.DataFrame({
        "key": [str(p["payment_id"]).encode() for p in payments],
        "value": [codec.encode("payment_event", p, version=1) for p in payments],
        "topic": "events.payments", "partition": 0, "offset": range(len(payments)),
    })  # fmt: skip
    live = decide(rows, FraudModel.load(), load_snapshots(), codec, Topics())
    shadow = decide(rows, FraudModel.load(), load_snapshots(), codec, Topics().shadow())
    assert (live["topic"] == "outbox.requests").sum() > 0  # the data asks for side effects
    assert set(shadow["topic"]) == {"decisions.fraud.shadow"}
    decided = live[live["topic"] == "decisions.fraud"]
    assert list(shadow["value"]) == list(decided["value"])  # the same decisions, byte for byte
    assert Topics().shadow().written == ("decisions.fraud.shadow", "dlq.infer.shadow")
