"""The infer job as its own process on the real stack: one decision per event, whatever happens.

One input topic is shared by every scenario; each scenario writes its own output topics. The
crash-free run is the reference: crashed, replayed and concurrent runs must reproduce its
decisions and outbox records byte for byte, as read_committed consumers see them.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.ids import decision_id
from ikkai.contract.kafka import KafkaContext
from spark_jobs.progress import parse_progress
from stack.kit.topic_io import Partitioned, by_partition, create_topic, flat, produce_payments, unique
from tests.spark_jobs.infer.infer_topics import outputs

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
EVENTS = 400
BATCH = 40  # maxOffsetsPerTrigger: about ten micro-batches per run
KILLS = 4  # random kill -9 runs are the second line; the interleavings are built on purpose below
RANDOM_KILLS = "IKKAI_SOAK_RANDOM_KILLS"  # set to 1 to run the random kill -9 runs (a soak, not in make test)


@pytest.fixture(scope="module")
def payments(cluster: KafkaContext) -> tuple[str, list[dict[str, object]]]:
    records = payment_records(simulate(42, payments=EVENTS).payments)
    topic = create_topic(cluster, unique("events.payments"), PARTITIONS)
    produce_payments(cluster, topic, records, PARTITIONS)
    return topic, records


def run_to_end(cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, *extra: str) -> InferProcess:
    job = InferProcess(cluster, topics, checkpoint, query, *extra)
    code = job.wait(1200)  # generous: a loaded 2-core machine starts Spark slowly
    assert code == 0, job.tail()
    return job


@pytest.fixture(scope="module")
def reference(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Partitioned, Partitioned]:
    topics = outputs(cluster, payments[0])
    run_to_end(cluster, topics, tmp_path_factory.mktemp("ref"), unique("ref"), "--max-offsets-per-trigger", str(BATCH))
    return by_partition(cluster, topics.decisions), by_partition(cluster, topics.outbox)


def test_one_decision_per_event_consistent_with_the_outbox(
    payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned]
) -> None:
    codec = default_codec()
    decisions = [codec.decode("fraud_decision", value) for _, value in flat(reference[0])]
    requests = [codec.decode("outbox_request", value) for _, value in flat(reference[1])]
    assert Counter(d["event_id"] for d in decisions) == Counter(str(p["event_id"]) for p in payments[1])
    by_id = {d["decision_id"]: d for d in decisions}
    assert len(by_id) == EVENTS
    for d in decisions:
        assert d["decision_id"] == decision_id(d["payment_id"], d["event_id"], d["model_version"])
        assert d["input_topic"] == payments[0]
    per_decision = Counter(r["decision_id"] for r in requests)
    assert set(per_decision) <= set(by_id)  # every outbox request belongs to a committed decision
    expected = {"hold": 2, "review": 1, "approve": 0}
    assert all(per_decision.get(i, 0) == expected[d["action"]] for i, d in by_id.items())
    assert {d["action"] for d in decisions} == {"hold", "review", "approve"}  # the test data exercises all three


def test_replay_into_fresh_topics_is_byte_identical(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    topics = outputs(cluster, payments[0])
    # one big batch: other batch boundaries, same bytes; --progress prints Spark's progress of that batch
    job = run_to_end(cluster, topics, tmp_path, unique("replay"), "--progress")
    assert by_partition(cluster, topics.decisions) == reference[0]
    assert by_partition(cluster, topics.outbox) == reference[1]
    batches = [p for _, p in parse_progress([(0.0, line) for line in job.log])]
    assert [(p["batchId"], p["numInputRows"]) for p in batches] == [(0, EVENTS)], job.tail()
    assert batches[0]["durationMs"]["addBatch"] > 0  # the sink's write, timed by Spark


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get(RANDOM_KILLS), reason=f"random kills are the second line: set {RANDOM_KILLS}=1")
def test_kill_9_at_random_moments_then_restart(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    seed = random.randrange(1 << 30)  # noqa: S311 - chaos timing, not cryptography
    rng = random.Random(seed)  # noqa: S311
    topics, query, kills = outputs(cluster, payments[0]), unique("chaos"), 0
    for _ in range(KILLS):
        job = InferProcess(cluster, topics, tmp_path, query, "--max-offsets-per-trigger", str(BATCH // 2))
        if not job.wait_for_batches(rng.choice((0, 1, 1, 2))):
            assert job.wait() == 0, job.tail()
            break
        time.sleep(rng.uniform(0.0, 2.0))  # the random moment: mid-batch, mid-transaction, or between batches
        job.kill()
        kills += 1
    run_to_end(cluster, topics, tmp_path, query, "--max-offsets-per-trigger", str(BATCH // 2))
    assert kills == KILLS, f"the job finished after {kills} kills (seed {seed}); feed it more events"
    assert by_partition(cluster, topics.decisions) == reference[0], f"seed {seed}"
    assert by_partition(cluster, topics.outbox) == reference[1], f"seed {seed}"


def crash_between_kafka_commit_and_checkpoint(
    cluster: KafkaContext, topics: InferTopics, checkpoint: Path, mode: str
) -> int:
    """SIGKILL the job right after batches 1 and 5 reached Kafka, before Spark checkpointed them."""
    query, crashes = unique(mode), 0
    points = (1, 5) if mode == "exactly-once" else (1,)
    for batch in points:
        job = InferProcess(cluster, topics, checkpoint, query, "--mode", mode, "--max-offsets-per-trigger",
                           str(BATCH), "--crash-after-batch", str(batch))  # fmt: skip
        job.wait()
        assert f"SIGKILL after batch {batch}" in "".join(job.log), job.tail()
        crashes += 1
    run_to_end(cluster, topics, checkpoint, query, "--mode", mode, "--max-offsets-per-trigger", str(BATCH))
    return crashes


def test_crash_after_the_kafka_commit_changes_nothing(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    topics = outputs(cluster, payments[0])
    assert crash_between_kafka_commit_and_checkpoint(cluster, topics, tmp_path, "exactly-once") == 2
    assert by_partition(cluster, topics.decisions) == reference[0]
    assert by_partition(cluster, topics.outbox) == reference[1]


def test_the_same_crash_duplicates_decisions_at_least_once(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], tmp_path: Path
) -> None:
    """The baseline fails the check the exactly-once sink passes: proof the check can fail."""
    topics = outputs(cluster, payments[0])
    crash_between_kafka_commit_and_checkpoint(cluster, topics, tmp_path, "at-least-once")
    codec = default_codec()
    events = Counter(
        codec.decode("fraud_decision", v)["event_id"] for _, v in flat(by_partition(cluster, topics.decisions))
    )
    assert set(events) == {str(p["event_id"]) for p in payments[1]}
    assert sum(n - 1 for n in events.values()) >= BATCH // 2  # batch 1 was written twice


def decided(records: Partitioned) -> dict[str, list[tuple[str, str]]]:
    """Per event id, every (decision_id, action) among decision ``records`` (what a read_committed reader saw)."""
    codec = default_codec()
    seen: dict[str, list[tuple[str, str]]] = {}
    for _, value in flat(records):
        decision = codec.decode("fraud_decision", value)
        seen.setdefault(decision["event_id"], []).append((decision["decision_id"], decision["action"]))
    return seen


def handled(job: InferProcess) -> int:
    """Output records the job's batch lines account for: committed, or left out as committed before."""
    lines = [line for line in list(job.log) if ": batch " in line]
    committed = sum(int(m.group(1)) for line in lines if (m := re.search(r" committed (\d+) records", line)))
    left_out = sum(int(m.group(1)) for line in lines if (m := re.search(r"\((\d+) records left out", line)))
    return committed + left_out


@pytest.mark.timeout(1800)  # two job processes beside the reference run: slow on a loaded 2-core machine
def test_two_instances_at_once_write_each_decision_once(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    """Two instances of one query, each with its own checkpoint (so each decides every event), both running while
    the events arrive: every chunk of input is written by both, in lockstep, so their writers fence each other
    batch after batch. An instance stops, loudly, when its own fresh writer is fenced (another instance is running);
    with one writer per partition both may stop, each fenced on a different partition (CI saw it), so the operator's
    step follows: one instance started again from its checkpoint finishes, leaving out what the markers cover. A
    read_committed reader must find one decision per event, the crash-free run's. Without fencing (mutation: a
    transactional.id of its own per process) this test fails: 240 of the 400 events were decided twice."""
    records = payments[1]
    topic = create_topic(cluster, unique("events.twins"), PARTITIONS)
    topics, query = outputs(cluster, topic), unique("twins")
    twins = [
        InferProcess(cluster, topics, tmp_path / name, query, "--continuous", "--trigger-interval", "100ms")
        for name in ("a", "b")
    ]  # fmt: skip
    try:
        for job in twins:  # both are up before the first event: neither can finish before the other starts
            while not any(f"{query}: model " in line for line in job.log):
                assert job.process.poll() is None, job.tail()
                time.sleep(0.2)
        chunk = len(records) // 5
        for start in range(0, len(records), chunk):
            produce_payments(cluster, topic, records[start : start + chunk], PARTITIONS)
            for job in [job for job in twins if job.process.poll() is None]:  # each running one writes this chunk
                job.wait_for_batches(1)
        outputs_per_pass = len(flat(reference[0])) + len(flat(reference[1]))  # decisions and outbox requests
        give_up_at = time.monotonic() + 600  # a bound for a stuck instance, not a speed claim
        for job in twins:  # each instance that still runs has gone through every event: written or left out
            while job.process.poll() is None and handled(job) < outputs_per_pass:
                assert time.monotonic() < give_up_at, job.tail()
                time.sleep(0.5)
        fenced = [job for job in twins if job.process.poll() not in (None, 0)]
        assert all("fenced" in "".join(job.log).lower() for job in fenced), [job.tail() for job in fenced]
        if len(fenced) == len(twins):  # both fenced: the successor finishes from a's checkpoint and the markers
            run_to_end(cluster, topics, tmp_path / "a", query)
    finally:
        for job in twins:
            job.kill()
    seen = decided(by_partition(cluster, topics.decisions))
    assert {event: len(ids) for event, ids in seen.items() if len(ids) != 1} == {}  # no event decided twice
    assert seen == decided(reference[0])  # every event once, with the crash-free run's decision
    codec = default_codec()
    requests = Counter(codec.decode("outbox_request", v)["decision_id"] for _, v in flat(by_partition(cluster,
                       topics.outbox)))  # fmt: skip
    expected = Counter(codec.decode("outbox_request", v)["decision_id"] for _, v in flat(reference[1]))
    assert requests == expected  # every outbox request once


def crash_after(
    cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, batch: int, size: int, *args: str
) -> InferProcess:
    """Run with batches of ``size`` events until the job SIGKILLs itself right after batch ``batch`` reached Kafka."""
    job = InferProcess(cluster, topics, checkpoint, query, "--max-offsets-per-trigger", str(size),
                       "--crash-after-batch", str(batch), *args)  # fmt: skip
    job.wait()
    assert f"SIGKILL after batch {batch}" in "".join(job.log), job.tail()
    return job


def test_a_lost_checkpoint_loses_nothing_and_duplicates_nothing(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    """Spark starts again at batch 0 from the earliest offset, with other batch boundaries: the markers' source
    offsets, not batch numbers, say what is committed (batch numbers said "committed" and dropped events)."""
    topics, query = outputs(cluster, payments[0]), unique("lost")
    crash_after(cluster, topics, tmp_path / "checkpoint", query, batch=2, size=BATCH)  # 3 batches of 40 committed
    shutil.rmtree(tmp_path / "checkpoint")
    job = run_to_end(cluster, topics, tmp_path / "checkpoint", query, "--max-offsets-per-trigger", str(BATCH * 3))
    assert "records left out: committed before" in "".join(job.log) or "already committed" in "".join(job.log)
    assert by_partition(cluster, topics.decisions) == reference[0]
    assert by_partition(cluster, topics.outbox) == reference[1]


def test_the_data_source_writer_and_foreach_batch_continue_each_others_markers(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    """The data source stream writer (``--sink-api data-source``, #31) runs a query until its crash hook kills the
    driver inside ``commit`` after batch 2; the checkpoint is lost; the default ``foreachBatch`` path continues from
    the same markers, leaves out what they cover and writes the rest, byte-identical to the reference."""
    topics, query = outputs(cluster, payments[0]), unique("trial")
    first = crash_after(cluster, topics, tmp_path / "checkpoint", query, 2, BATCH, "--sink-api", "data-source")
    assert "attached as data-source" in "".join(first.log), first.tail()
    shutil.rmtree(tmp_path / "checkpoint")
    job = run_to_end(cluster, topics, tmp_path / "checkpoint", query, "--max-offsets-per-trigger", str(BATCH * 3))
    assert "attached as foreach-batch" in "".join(job.log), job.tail()
    assert "records left out: committed before" in "".join(job.log) or "already committed" in "".join(job.log)
    assert by_partition(cluster, topics.decisions) == reference[0]
    assert by_partition(cluster, topics.outbox) == reference[1]


def test_an_older_checkpoint_restored_with_other_batch_sizes_changes_nothing(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    topics, query, checkpoint = outputs(cluster, payments[0]), unique("restored"), tmp_path / "checkpoint"
    crash_after(cluster, topics, checkpoint, query, batch=1, size=BATCH)
    shutil.copytree(checkpoint, tmp_path / "older")
    crash_after(cluster, topics, checkpoint, query, batch=5, size=BATCH)
    shutil.rmtree(checkpoint)
    shutil.copytree(tmp_path / "older", checkpoint)  # back to the copy, four committed batches behind Kafka
    run_to_end(cluster, topics, checkpoint, query, "--max-offsets-per-trigger", str(BATCH * 3 // 2))
    assert by_partition(cluster, topics.decisions) == reference[0]
    assert by_partition(cluster, topics.outbox) == reference[1]


def test_a_restart_with_another_max_offsets_per_trigger_changes_nothing(
    cluster: KafkaContext, payments: tuple[str, list[dict[str, object]]], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    topics, query = outputs(cluster, payments[0]), unique("resized")
    crash_after(cluster, topics, tmp_path, query, batch=3, size=BATCH)
    run_to_end(cluster, topics, tmp_path, query, "--max-offsets-per-trigger", str(BATCH * 3 // 2))
    assert by_partition(cluster, topics.decisions) == reference[0]
    assert by_partition(cluster, topics.outbox) == reference[1]


def test_a_backlog_drains_in_bounded_batches_by_default_exactly_once(cluster: KafkaContext, tmp_path: Path) -> None:
    """No --max-offsets-per-trigger: the bound derived from the transaction timeout splits a backlog of several
    bounds into several transactions (one unbounded transaction could outlive transaction.timeout.ms forever)."""
    from spark_jobs.options import default_max_offsets_per_trigger

    timeout_ms = 2000
    bound = default_max_offsets_per_trigger(timeout_ms)
    backlog = payment_records(simulate(11, payments=bound * 3 + 50).payments)
    topic = create_topic(cluster, unique("events.backlog"), PARTITIONS)
    produce_payments(cluster, topic, backlog, PARTITIONS)
    topics = outputs(cluster, topic)
    job = run_to_end(cluster, topics, tmp_path, unique("backlog"), "--transaction-timeout-ms", str(timeout_ms))
    batches = [line for line in job.log if ": batch " in line and " committed " in line]
    assert len(batches) >= 4, job.tail()
    codec = default_codec()
    decided = Counter(
        codec.decode("fraud_decision", v)["event_id"] for _, v in flat(by_partition(cluster, topics.decisions))
    )
    assert decided == Counter(str(p["event_id"]) for p in backlog)
