"""A replay as a second query of the running infer job (``--replay-requests``), on the real stack.

The reference is a separate process that drains the same input into fresh topics (what the demo ran
before); the replay asked of the live job must write the same bytes, as read_committed readers see
them, while the live query goes on committing its own output, whole and unfenced.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.kafka import KafkaContext
from spark_jobs.replay_query import read_outcome, request_replay
from stack.kit.topic_io import Partitioned, by_partition, create_topic, flat, produce_payments, unique
from tests.spark_jobs.infer.infer_topics import outputs

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
EVENTS = 400
LIVE_BATCH = 10  # the live query's batches: forty of them, so it is still draining while the replay runs
SUFFIX = ".replay"
GIVE_UP_S = 900  # a bound for a stuck job on a loaded 2-core machine, not a speed claim


def replayed(topics: InferTopics) -> InferTopics:
    return InferTopics(topics.input, topics.decisions + SUFFIX, topics.outbox + SUFFIX, topics.dlq + SUFFIX)


def read(cluster: KafkaContext, topics: InferTopics) -> tuple[Partitioned, Partitioned, Partitioned]:
    return tuple(by_partition(cluster, t) for t in (topics.decisions, topics.outbox, topics.dlq))  # type: ignore[return-value]


@pytest.fixture(scope="module")
def scene(cluster: KafkaContext, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The reference (a separate process draining the input) and a live job asked for a replay after its first
    batch, left running until the replay ended; the live job's log and the topics both wrote."""
    folder = tmp_path_factory.mktemp("replay")
    input_topic = create_topic(cluster, unique("events.payments"), PARTITIONS)
    produce_payments(cluster, input_topic, payment_records(simulate(42, payments=EVENTS).payments), PARTITIONS)
    reference_topics = outputs(cluster, input_topic)
    separate = InferProcess(cluster, reference_topics, folder / "reference", unique("separate"))
    assert separate.wait(1200) == 0, separate.tail()

    live_topics, live_query = outputs(cluster, input_topic), unique("live")
    for topic in (live_topics.decisions, live_topics.outbox, live_topics.dlq):
        create_topic(cluster, topic + SUFFIX, PARTITIONS)  # the replay's: the job never creates topics
    requests = folder / "requests"
    live = InferProcess(
        cluster, live_topics, folder / "live", live_query, "--continuous", "--max-offsets-per-trigger",
        str(LIVE_BATCH), "--replay-requests", str(requests),
    )  # fmt: skip
    try:
        assert live.wait_for_batches(1), live.tail()
        done = request_replay(requests, f"{live_query}-replay", str(folder / "replay"), SUFFIX)
        give_up_at = time.monotonic() + GIVE_UP_S
        while (outcome := read_outcome(done)) is None and live.process.poll() is None:
            assert time.monotonic() < give_up_at, live.tail()
            time.sleep(0.5)
        reference = read(cluster, reference_topics)
        expected = sum(len(flat(records)) for records in reference)
        while live.process.poll() is None and sum(len(flat(r)) for r in read(cluster, live_topics)) < expected:
            assert time.monotonic() < give_up_at, live.tail()
            time.sleep(1)
        alive = live.process.poll() is None
    finally:
        live.kill()
    return {
        "reference": reference, "replay": read(cluster, replayed(live_topics)), "live": read(cluster, live_topics),
        "outcome": outcome, "log": list(live.log), "query": live_query, "alive": alive,
    }  # fmt: skip


def test_the_second_query_writes_what_a_separate_run_writes_byte_for_byte(scene: dict[str, object]) -> None:
    """Mutations: the replay under the live query's name (its writers would share the live query's transactional.ids
    and markers: the sink refuses it); the replay on the live query's checkpoint instead of a fresh one of its own
    (not from the earliest offsets)."""
    assert scene["outcome"] == {"ok": True}, "".join(scene["log"][-30:])  # type: ignore[index]
    assert scene["replay"] == scene["reference"]
    decisions = scene["replay"][0]  # type: ignore[index]
    assert len(flat(decisions)) == EVENTS


def test_the_live_query_keeps_committing_while_the_replay_runs(scene: dict[str, object]) -> None:
    """The live query commits batches between the replay's start and its end, is still running after it, and its
    own output is whole, the separate run's bytes. Mutation: the live query stopped for the replay (one query per
    session at a time)."""
    log, query = scene["log"], scene["query"]
    assert isinstance(log, list) and isinstance(query, str)
    started = next(i for i, line in enumerate(log) if f"{query}: replay {query}-replay of " in line)
    ended = next((i for i, line in enumerate(log) if f"{query}: replay {query}-replay ended" in line), len(log))
    live_batches = [line for line in log[started:ended] if line.startswith(f"{query}: batch ")]
    assert live_batches, "".join(log[started : ended + 1])
    assert scene["alive"]
    assert scene["live"] == scene["reference"]


def test_a_replay_cut_short_by_a_kill_is_taken_up_again_on_restart(cluster: KafkaContext, tmp_path: Path) -> None:
    """The live job is SIGKILLed once its replay started; started again with the same command, it finds the request
    without its ``.done``, runs the replay again on its checkpoint and markers, and the replay's output is still the
    separate run's, once. Mutation: a request marked taken when it starts (not when it ends) is lost with the kill."""
    input_topic = create_topic(cluster, unique("events.payments"), PARTITIONS)
    produce_payments(cluster, input_topic, payment_records(simulate(7, payments=EVENTS).payments), PARTITIONS)
    reference_topics = outputs(cluster, input_topic)
    separate = InferProcess(cluster, reference_topics, tmp_path / "reference", unique("separate"))
    assert separate.wait(1200) == 0, separate.tail()
    live_topics, live_query = outputs(cluster, input_topic), unique("live")
    for topic in (live_topics.decisions, live_topics.outbox, live_topics.dlq):
        create_topic(cluster, topic + SUFFIX, PARTITIONS)
    args = ("--continuous", "--max-offsets-per-trigger", str(LIVE_BATCH), "--replay-requests", str(tmp_path / "rq"))
    done = request_replay(tmp_path / "rq", f"{live_query}-replay", str(tmp_path / "replay"), SUFFIX)
    first = InferProcess(cluster, live_topics, tmp_path / "live", live_query, *args)
    give_up_at = time.monotonic() + GIVE_UP_S
    try:
        while not any(f"{live_query}-replay: " in line for line in first.log):  # the replay's query is starting
            assert first.process.poll() is None and time.monotonic() < give_up_at, first.tail()
            time.sleep(0.2)
    finally:
        first.kill()
    assert read_outcome(done) is None, first.tail()  # killed before it could end
    second = InferProcess(cluster, live_topics, tmp_path / "live", live_query, *args)
    try:
        while (outcome := read_outcome(done)) is None:
            assert second.process.poll() is None and time.monotonic() < give_up_at, second.tail()
            time.sleep(0.5)
    finally:
        second.kill()
    assert outcome == {"ok": True}, second.tail()
    assert read(cluster, replayed(live_topics)) == read(cluster, reference_topics)
