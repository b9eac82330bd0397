"""Operator acts in combination, on the real stack: who writes an output is decided by the claim log, once.

Each test runs the infer job as its own processes (``ikkai jobs run infer``) and judges what an
independent read_committed reader sees: decisions per event on the live decisions topic. Every
test here failed on the code before the claim log (issue 43, cases 1, 2, 3 and 8); the commit
that added them says how.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from demo.infer_process import IKKAI, InferProcess, InferTopics, job_environment
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from ikkai.contract.topics import OWNERS
from spark_jobs.sink.claim_log import PAUSE_CLAIM
from spark_jobs.sink.commit_pause import PAUSE_BEFORE_COMMIT
from spark_jobs.sink.input_identity import input_topic_id
from stack.kit.topic_io import by_partition, create_topic, flat, grow_topics, produce_payments, unique
from tests.spark_jobs.sink.test_input_identity import recreate

pytestmark = pytest.mark.heavy

PARTITIONS = 2
REFUSAL = "ikkai: error: "


def pipeline(cluster: KafkaContext) -> InferTopics:
    name = unique("acts")
    topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.input, topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)
    return topics


def payments(seed: int, count: int) -> list[dict[str, object]]:
    return payment_records(simulate(seed, payments=count).payments)


def decided(cluster: KafkaContext, topic: str) -> list[dict[str, object]]:
    codec = default_codec()
    return [codec.decode("fraud_decision", value) for _, value in flat(by_partition(cluster, topic))]


def per_event(cluster: KafkaContext, topic: str) -> Counter[str]:
    return Counter(str(d["event_id"]) for d in decided(cluster, topic))


def once(events: list[dict[str, object]]) -> Counter[str]:
    return Counter(str(e["event_id"]) for e in events)


def run(
    cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, *extra: str, expect: int
) -> InferProcess:
    job = InferProcess(cluster, topics, checkpoint, query, *extra)
    assert job.wait(900) == expect, job.tail()
    return job


def refusal(job: InferProcess) -> str:
    """The job's one refusal line: exit 1 and exactly one ``ikkai: error:`` line on stderr."""
    lines = [line for line in job.log if line.startswith(REFUSAL)]
    assert len(lines) == 1, job.tail()
    return lines[0]


class HeldInfer(InferProcess):
    """The infer job with the test-only fault points on (``env``: the claim's, the sink's first commit's)."""

    def __init__(
        self, cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, env: dict[str, str]
    ) -> None:
        command = [
            str(IKKAI), "jobs", "run", "infer", "--bootstrap", cluster.bootstrap_servers, "--checkpoint",
            str(checkpoint), "--query", query, "--input", topics.input, "--decisions", topics.decisions,
            "--outbox", topics.outbox, "--dlq", topics.dlq,
        ]  # fmt: skip
        self._start(command, env={**job_environment(cluster), **env})


def until(*done: Callable[[], bool], job: InferProcess, deadline_s: float = 900) -> None:
    """Poll until one of ``done`` holds; fail at the deadline."""
    give_up_at = time.monotonic() + deadline_s
    while not any(check() for check in done):
        assert time.monotonic() < give_up_at, job.tail()
        time.sleep(0.1)


def claimed(cluster: KafkaContext, query: str) -> bool:
    """A claim of ``query`` is on the owners log, committed or not."""
    if OWNERS not in AdminClient(cluster.client_config()).list_topics(timeout=10).topics:
        return False
    records = flat(by_partition(cluster, OWNERS, isolation="read_uncommitted"))
    return any(key == f"ikkai.{query}".encode() for key, _ in records)


@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_two_new_queries_started_before_either_commits_decide_each_event_once(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """Case 1, the worst interleaving built on purpose: query A holds its claim's transaction open on the owners log
    (and, before the claim log, its first output transaction), query B claims the same fresh topics behind it, then A
    goes on. Before the claim log both passed (neither had a marker) and every event was decided twice. Now B reads
    the log back to its own claim, which it can do only once A's claim is resolved, and is refused in one line naming
    A. (Deciding on the log as read before writing the claim lets B own the topics too: this test then fails.) Every
    event is on input partition 0, so A's first output transaction is its only write."""
    topics = pipeline(cluster)
    events = [e for e in payments(31, 240) if kafka_partition(str(e["payment_id"]).encode(), PARTITIONS) == 0]
    produce_payments(cluster, topics.input, events, PARTITIONS)
    held_a, held_b, commit_a = (tmp_path / name for name in ("claim-a", "claim-b", "commit-a"))
    for folder in (held_a, held_b, commit_a):
        folder.mkdir()
    (held_b / "release").touch()  # B's claim commits at once; only its start waits
    first, second = unique("a"), unique("b")
    a_env = {PAUSE_CLAIM: str(held_a), PAUSE_BEFORE_COMMIT: str(commit_a)}
    a = HeldInfer(cluster, topics, tmp_path / "a", first, a_env)
    b = HeldInfer(cluster, topics, tmp_path / "b", second, {PAUSE_CLAIM: str(held_b)})
    try:
        # Both past their start, up to the claim (before the claim log: A up to its first commit, B anywhere).
        until(lambda: (held_a / "ready").exists(), lambda: (commit_a / "paused").exists(), job=a)
        until(lambda: (held_b / "ready").exists(), lambda: b.process.poll() is not None, job=b)
        (held_a / "go").touch()  # A's claim goes on the log and stays open
        until(lambda: (held_a / "paused").exists(), lambda: (commit_a / "paused").exists(), job=a)
        (held_b / "go").touch()  # B's claim lands behind A's open one
        until(lambda: claimed(cluster, second), lambda: b.process.poll() is not None, job=b)
    finally:
        (held_a / "release").touch()
        (commit_a / "release").touch()
        (held_b / "go").touch()
    assert b.wait(900) == 1, b.tail()
    assert a.wait(900) == 0, a.tail()
    line = refusal(b)
    assert f"query {first} (app ikkai) owns" in line and f"--after-query {first}" in line, line
    assert per_event(cluster, topics.decisions) == once(events)


@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_start_offsets_are_kept_by_the_claim_and_a_restart_without_them_starts_there(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """Case 2: a query started with --start-offsets where output partition 1 has nothing to write (so no marker of
    its own), restarted with its usual arguments and a fresh checkpoint. Before, partition 1 then started at offset 0
    and decided every event below its start offset; now the recorded offsets apply. The same flag again is
    accepted; another one is refused naming the recorded offsets."""
    topics, events = pipeline(cluster), payments(32, 140)
    produce_payments(cluster, topics.input, events, PARTITIONS)
    ends = {p: len(records) for p, records in by_partition(cluster, topics.input).items()}
    start = {0: ends[0] // 2, 1: ends[1]}  # input partition 1: everything is before the start
    flag = ("--start-offsets", ",".join(f"{p}:{o}" for p, o in sorted(start.items())))
    query = unique("offsets")
    run(cluster, topics, tmp_path / "first", query, *flag, expect=0)
    wanted = decided(cluster, topics.decisions)
    assert {(d["input_partition"], d["input_offset"]) for d in wanted} == {(0, o) for o in range(start[0], ends[0])}
    first = Counter(str(d["event_id"]) for d in wanted)

    later = payments(33, 40)
    produce_payments(cluster, topics.input, later, PARTITIONS)
    run(cluster, topics, tmp_path / "fresh", query, expect=0)  # the usual arguments, a fresh checkpoint
    decisions = decided(cluster, topics.decisions)
    assert Counter(str(d["event_id"]) for d in decisions) == first + once(later)
    assert all(d["input_offset"] >= start[d["input_partition"]] for d in decisions)

    run(cluster, topics, tmp_path / "again", query, *flag, expect=0)  # the same flag again: nothing to do
    other = run(cluster, topics, tmp_path / "other", query, "--start-offsets", "0:0,1:0", expect=1)
    line = refusal(other)
    assert f"--start-offsets {flag[1]}" in line, line
    assert Counter(str(d["event_id"]) for d in decided(cluster, topics.decisions)) == Counter(
        str(d["event_id"]) for d in decisions
    )


@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_a_shadow_cannot_take_the_live_querys_output_over(cluster: KafkaContext, tmp_path: Path) -> None:
    """Case 3: --shadow --after-query <live>. Before, the handover never compared output topics: the live query was
    fenced and refused for good, and new events got no live decision. Now the shadow is refused in one line (a
    shadow takes nothing over), so is a query of other topics (a handover names exactly the owner's topics), and
    the live query goes on."""
    topics, first, later = pipeline(cluster), payments(34, 80), payments(35, 60)
    produce_payments(cluster, topics.input, first, PARTITIONS)
    live = unique("live")
    run(cluster, topics, tmp_path / "live", live, expect=0)
    shadow = run(cluster, topics, tmp_path / "shadow", unique("shadow"), "--shadow", "--after-query", live,
                 "--create-topics", "--partitions", str(PARTITIONS), expect=1)  # fmt: skip
    line = refusal(shadow)
    assert "shadow" in line and live in line, line
    name = unique("other")  # a query of other topics (not a shadow's) cannot take the live output over either
    other = InferTopics(topics.input, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (other.decisions, other.outbox, other.dlq):
        create_topic(cluster, topic, PARTITIONS)
    elsewhere = run(cluster, other, tmp_path / "other", name, "--after-query", live, expect=1)
    line = refusal(elsewhere)
    assert f"a handover takes over exactly the topics query {live} writes" in line, line
    produce_payments(cluster, topics.input, later, PARTITIONS)
    run(cluster, topics, tmp_path / "live", live, expect=0)
    assert per_event(cluster, topics.decisions) == once([*first, *later])
    assert per_event(cluster, f"{topics.decisions}.shadow") == Counter()


@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_a_recreated_input_after_a_handover_starts_over_with_the_flag_the_refusal_names(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """Case 8: query N took over from Q and has no marker of its own yet; the input is recreated. N is refused
    naming --input-recreated <id>; before, N with exactly that flag was refused again with the same fix (the
    origin's markers, of the old topic, were checked against the new id). Now every new event is decided once."""
    topics, before, after = pipeline(cluster), payments(36, 80), payments(37, 60)
    produce_payments(cluster, topics.input, before, PARTITIONS)
    old, new = unique("old"), unique("new")
    run(cluster, topics, tmp_path / "old", old, expect=0)
    run(cluster, topics, tmp_path / "new", new, "--after-query", old, expect=0)  # nothing new to decide
    recreate(cluster, topics.input)
    produce_payments(cluster, topics.input, after, PARTITIONS)
    topic_id = input_topic_id("test", cluster, topics.input)
    refused = run(cluster, topics, tmp_path / "new2", new, expect=1)
    line = refusal(refused)
    assert f"--input-recreated {topic_id}" in line and "fresh --checkpoint" in line, line
    run(cluster, topics, tmp_path / "new3", new, "--input-recreated", topic_id, expect=0)
    assert per_event(cluster, topics.decisions) == once([*before, *after])
    run(cluster, topics, tmp_path / "new4", new, expect=0)  # the usual arguments again: nothing more
    assert per_event(cluster, topics.decisions) == once([*before, *after])


@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_a_query_that_committed_nothing_is_refused_after_growth_with_the_command_that_continues_it(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """Found by the explorer's soak (IKKAI_EXPLORE_SEED=1129): a query that ran over an empty input has a claim and a
    commits topic but no marker; after the topics grew, its start said "keep the partition count its markers were
    written with" and named no command to run. Now it is refused as a grown layout with the query that continues it,
    and that query, run as the refusal says, decides every event once."""
    topics, query = pipeline(cluster), unique("empty")
    run(cluster, topics, tmp_path / "first", query, expect=0)  # nothing to decide: a claim, a commits topic, no marker
    layout = (topics.input, topics.decisions, topics.outbox, topics.dlq)
    grow_topics(cluster, layout, PARTITIONS + 1)
    events = payments(11, 30)
    produce_payments(cluster, topics.input, events, PARTITIONS + 1)
    line = refusal(run(cluster, topics, tmp_path / "first", query, expect=1))
    assert f"query {query} committed nothing yet and its commits topic has {PARTITIONS} partitions" in line, line
    continued = f"{query}-p{PARTITIONS + 1}"
    assert f"--query {continued} --after-query {query} and a fresh --checkpoint" in line, line
    run(cluster, topics, tmp_path / "continued", continued, "--after-query", query, expect=0)
    assert per_event(cluster, topics.decisions) == once(events)
