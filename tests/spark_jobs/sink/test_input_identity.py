"""A recreated input topic on the real stack: refused in one line, started over only when told, never lost.

Issue 27, item 2: after ``events.payments`` was deleted and recreated (offsets from 0 again), the
infer job restarted with a fresh checkpoint left the new topic's records out as "committed before"
(the markers named the input by name only), and exited 0. Each test decides the first topic's
events, deletes and recreates the topic, produces other events, and counts what a read_committed
reader sees: decisions per event.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import VersionCut, recorded_versions
from ikkai.errors import ConfigError
from spark_jobs.options import checkpoint_location
from spark_jobs.sink.commit_markers import CommitMarker, CommitMarkerError, read_markers
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.input_identity import checkpoint_is_fresh, input_topic_id, rebase_on_recreated_input, rebased
from spark_jobs.sink.partition_transactions import check_markers
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique

pytestmark = pytest.mark.heavy

PARTITIONS = 2
BEFORE, AFTER = 200, 300  # events of the first topic, then of the recreated one


def recreate(cluster: KafkaContext, topic: str) -> None:
    """Delete ``topic`` and create it again with the same name and partition count (offsets from 0)."""
    admin = AdminClient(cluster.client_config())
    admin.delete_topics([topic], operation_timeout=60)[topic].result(90)
    give_up_at = time.monotonic() + 90
    while True:  # the deletion completes in the background: "already exists" (marked for deletion) until then
        try:
            admin.create_topics([NewTopic(topic, PARTITIONS)], operation_timeout=60)[topic].result(90)
            break
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > give_up_at:
                raise
            time.sleep(0.5)
    create_topic(cluster, topic, PARTITIONS)  # waits until every partition has a leader


def decisions_per_event(cluster: KafkaContext, topics: InferTopics) -> Counter[str]:
    codec = default_codec()
    decisions = flat(by_partition(cluster, topics.decisions))
    return Counter(codec.decode("fraud_decision", value)["event_id"] for _, value in decisions)


def event_ids(payments: list[dict[str, object]]) -> Counter[str]:
    return Counter(str(p["event_id"]) for p in payments)


class Recreated:
    """Events decided on the first topic, then the topic deleted and recreated with other events on it."""

    def __init__(self, cluster: KafkaContext, tmp_path: Path) -> None:
        self.cluster, self.tmp_path = cluster, tmp_path
        self.query = unique("recreated")
        name = unique("t")
        self.topics = InferTopics(unique("events.payments"), f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
        for topic in (self.topics.input, self.topics.decisions, self.topics.outbox, self.topics.dlq):
            create_topic(cluster, topic, PARTITIONS)
        self.before = payment_records(simulate(11, payments=BEFORE).payments)
        produce_payments(cluster, self.topics.input, self.before, PARTITIONS)
        self.old_id = input_topic_id("test", cluster, self.topics.input)
        self.run(tmp_path / "first", expect=0)
        assert decisions_per_event(cluster, self.topics) == event_ids(self.before)
        recreate(cluster, self.topics.input)
        self.after = payment_records(simulate(12, payments=AFTER).payments)
        produce_payments(cluster, self.topics.input, self.after, PARTITIONS)
        self.new_id = input_topic_id("test", cluster, self.topics.input)
        assert self.new_id != self.old_id

    def run(self, checkpoint: Path, *extra: str, expect: int) -> InferProcess:
        job = InferProcess(self.cluster, self.topics, checkpoint, self.query, "--max-offsets-per-trigger", "120",
                           *extra)  # fmt: skip
        assert job.wait() == expect, job.tail()
        return job


@pytest.mark.integration
@pytest.mark.timeout(2400)  # three or four job processes one after another: slow on a loaded 2-core machine
def test_a_recreated_input_topic_is_refused_in_one_line_with_the_fix(cluster: KafkaContext, tmp_path: Path) -> None:
    case = Recreated(cluster, tmp_path)
    job = case.run(tmp_path / "fresh", expect=1)  # before: exit 0, "records left out: committed before"
    refusal = job.log[-1]
    assert refusal.startswith("ikkai: error: ") and refusal.count("\n") == 1, job.tail()
    assert "deleted and recreated" in refusal and case.query in refusal and "partition" in refusal
    assert case.old_id in refusal and case.new_id in refusal
    assert f"--input-recreated {case.new_id}" in refusal and "fresh --checkpoint" in refusal
    assert decisions_per_event(cluster, case.topics) == event_ids(case.before)  # nothing of the new topic


@pytest.mark.integration
@pytest.mark.timeout(2400)  # three or four job processes one after another: slow on a loaded 2-core machine
def test_starting_over_on_a_recreated_input_decides_every_new_event_once(cluster: KafkaContext, tmp_path: Path) -> None:
    case = Recreated(cluster, tmp_path)
    flag = ("--input-recreated", case.new_id)
    used = case.run(tmp_path / "first", *flag, expect=1)  # the old checkpoint would start the new topic mid-way
    assert "fresh --checkpoint" in used.log[-1], used.tail()

    case.run(tmp_path / "fresh", *flag, expect=0)
    assert decisions_per_event(cluster, case.topics) == event_ids(case.before) + event_ids(case.after)
    markers = read_markers(cluster, "ikkai", case.query, topic=f"_ikkai.commits.ikkai.{case.query}")
    assert {m.source_topic_id for m in markers.values()} == {case.new_id}

    # The flag names one recreation: left on the command line, it changes nothing more.
    case.run(tmp_path / "fresh", *flag, expect=0)
    assert decisions_per_event(cluster, case.topics) == event_ids(case.before) + event_ids(case.after)


def sink(**changes: str) -> SinkConfig:
    return SinkConfig(
        app="ikkai", query="infer", cluster=KafkaContext('localhost:1'), output_topics=("decisions.fraud",),
        partitions=2, order_by=("input_partition", "input_offset"), source_topic="events.payments", **changes,
    )  # fmt: skip


def marker(topic_id: str) -> CommitMarker:
    return CommitMarker("ikkai", "infer", 1, 7, 2, 10, "events.payments", {1: 120}, source_topic_id=topic_id)


def test_a_marker_of_another_topic_id_is_refused_and_one_without_an_id_is_not() -> None:
    config = sink(source_topic_id="NEW-id")
    check_markers(config, {1: marker("NEW-id")})
    check_markers(config, {1: marker("")})  # written before markers had ids: nothing to compare
    check_markers(sink(), {1: marker("OLD-id")})  # the job did not look its input up: nothing to compare
    with pytest.raises(CommitMarkerError, match="was deleted and recreated") as refused:
        check_markers(config, {1: marker("OLD-id")})
    text = str(refused.value)
    assert "partition 1" in text and "OLD-id" in text and "--input-recreated NEW-id" in text and "\n" not in text


def test_the_flag_names_one_topic_id_and_needs_a_fresh_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"names topic id OLD-id, but events\.payments has id NEW-id"):
        rebase_on_recreated_input(sink(source_topic_id="NEW-id", input_recreated="OLD-id"), tmp_path)
    assert rebase_on_recreated_input(sink(source_topic_id="NEW-id"), tmp_path) == []  # no flag: nothing to do
    assert checkpoint_is_fresh(tmp_path / "none") and checkpoint_is_fresh(tmp_path)
    (tmp_path / "offsets").mkdir()
    assert checkpoint_is_fresh(tmp_path)
    (tmp_path / "offsets" / "0").write_text("v1")
    assert not checkpoint_is_fresh(tmp_path)


def test_a_checkpoint_uri_is_kept_as_written_and_read_through_the_sessions_file_system(
    spark: Any, tmp_path: Path
) -> None:
    assert checkpoint_location("hdfs://nn:8020/ck/infer") == "hdfs://nn:8020/ck/infer"  # a Path makes it hdfs:/nn...
    assert checkpoint_location("s3a://bucket/ck") == "s3a://bucket/ck"
    assert checkpoint_location("ck/infer") == Path("ck/infer") and checkpoint_location(None) is None
    uri = tmp_path.as_uri()  # file:///..., read by Hadoop's local file system like hdfs:// by HDFS
    assert checkpoint_is_fresh(uri, spark) and checkpoint_is_fresh(uri + "/none", spark)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1")
    assert not checkpoint_is_fresh(uri, spark)


def test_a_broker_that_gives_no_topic_id_is_refused_as_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43, case 7: the zero id (Uuid(0, 0), what a broker without topic ids answers) compared equal before and
    after a recreation, so the recreated topic's records up to the old offsets were left out as committed. The real
    stack's brokers (KRaft) always give ids: the answer is built with a stand-in admin client."""
    from types import SimpleNamespace

    from confluent_kafka import Uuid

    from spark_jobs.sink import input_identity

    class Admin:
        def __init__(self, _config: object) -> None:
            pass

        def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Any]:
            answer = SimpleNamespace(topic_id=Uuid(0, 0))
            return {"events.payments": SimpleNamespace(result=lambda timeout: answer)}

    monkeypatch.setattr(input_identity, "AdminClient", Admin)
    with pytest.raises(ConfigError) as refused:
        input_topic_id("infer", KafkaContext("localhost:1"), "events.payments")
    text = str(refused.value)
    assert "the broker gave no topic id (AAAAAAAAAAAAAAAAAAAAAA)" in text and "Kafka 2.8 or newer" in text
    assert "\n" not in text


def test_a_rebased_marker_forgets_the_old_topics_cuts_so_a_replay_decides_the_new_topic_by_its_own() -> None:
    """The old topic's cuts name its offsets: kept, a replay of the new topic would decide offsets 0-99 with v1."""
    old = CommitMarker(
        "app", "q", 0, 7, 1, 5, "events.x", {0: 250}, "OLDID", ("decisions.x",), "v2",
        (VersionCut("v1", 0, {}), VersionCut("v2", 3, {0: 100})),
    )  # fmt: skip
    fresh = rebased(old, "NEWID")
    assert (fresh.source_topic_id, fresh.source_offsets, fresh.cuts, fresh.writer_version) == ("NEWID", {}, (), "")
    assert (fresh.app, fresh.query, fresh.partition, fresh.output_topics) == ("app", "q", 0, ("decisions.x",))
    assert recorded_versions(fresh, 0, "v2") == ((0, "v2"),)
