"""The infer job's model inside the sink's write task (``RowTransform``), against the two-hop write it replaced.

Real broker, real Spark: the same Kafka input is decided and written once the old way (``decide``
in a ``mapInArrow`` of its own, then the in-place write) and once fused (``decide`` called by the
write task itself); read_committed consumers must see the same bytes, headers and markers. A
fused write that fails after deciding, before its commit, must leave nothing committed, and its
re-run must write every record once.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from spark_jobs.infer.fraud_decisions import ORDER_BY, OUTPUT_SCHEMA, Topics, decide_arrow_batches
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, ModelSource
from spark_jobs.sink.commit_markers import commits_topic_for, read_markers
from spark_jobs.sink.commit_pause import PAUSE_BEFORE_COMMIT
from spark_jobs.sink.config import DEFAULT_TRANSACTIONAL_WRITER
from spark_jobs.sink.shared_partitions import planned_kafka_partitions
from spark_jobs.sink.transactional_sink import (
    RowTransform,
    SinkConfig,
    TransactionalBatchWriter,
)
from stack.kit.topic_io import Partitioned, by_partition, create_topic, produce_payments, unique
from tests.spark_jobs.records import headers_by_value

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
EVENTS = 300
MALFORMED = (b"not avro", b"\xc3\x01 a truncated header")  # dead letters, on their key's input partition
Written = dict[str, Partitioned]


@pytest.fixture(scope="module")
def input_topic(cluster: KafkaContext) -> str:
    topic = create_topic(cluster, unique("events.payments"), PARTITIONS)
    payments = payment_records(simulate(7, payments=EVENTS).payments)
    produce_payments(cluster, topic, payments[: EVENTS // 2], PARTITIONS)
    producer = Producer(cluster.producer_config())
    for n, value in enumerate(MALFORMED):
        producer.produce(topic, key=f"bad-{n}".encode(), value=value, partition=n % PARTITIONS)
    assert producer.flush(30) == 0
    produce_payments(cluster, topic, payments[EVENTS // 2 :], PARTITIONS)
    return topic


def decide_function(topics: Topics) -> Callable[[Iterator[Any]], Iterator[Any]]:
    source, _, _ = ModelSource.of(MODEL_PATH, FEATURES_PATH)
    return functools.partial(decide_arrow_batches, source=source, topics=topics, codec=default_codec())


def outputs(cluster: KafkaContext) -> Topics:
    name = unique("t")
    topics = Topics(f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)
    return topics


def config(
    bootstrap: str,
    input_topic: str,
    topics: Topics,
    query: str,
    writer: str = DEFAULT_TRANSACTIONAL_WRITER,
    app: str = "test",
) -> SinkConfig:
    return SinkConfig(
        app=app, query=query, transactional_writer=writer, cluster=KafkaContext.from_environment(bootstrap),
        output_topics=(topics.decisions, topics.outbox, topics.dlq), partitions=PARTITIONS, order_by=ORDER_BY,
        source_topic=input_topic, retry_deadline_s=20, partition_column="input_partition",
    )  # fmt: skip


def source_rows(spark: Any, bootstrap: str, input_topic: str, **extra: str) -> Any:
    """What the infer job hands its writer: the Kafka source's rows, one Spark task per input partition."""
    source = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", input_topic)
    options = {"kafka.isolation.level": "read_committed", "startingOffsets": "earliest", **extra}
    return source.options(**options).load().select("key", "value", "topic", "partition", "offset")


def written(cluster: KafkaContext, topics: Topics, isolation: str = "read_committed") -> Written:
    return {topic: by_partition(cluster, topic, isolation) for topic in (topics.decisions, topics.outbox, topics.dlq)}


@dataclass(frozen=True)
class Run:
    topics: Topics
    query: str
    seen: Written
    app: str = "test"

    def by_role(self) -> dict[str, Partitioned]:
        """The records by role (decisions, outbox, dlq), so two runs into different topics compare."""
        roles = ("decisions", "outbox", "dlq")
        names = (self.topics.decisions, self.topics.outbox, self.topics.dlq)
        return {role: self.seen[topic] for role, topic in zip(roles, names, strict=True)}

    def source_offsets(self, bootstrap: str) -> dict[int, dict[int, int]]:
        return {
            p: dict(m.source_offsets)
            for p, m in read_markers(
                KafkaContext.from_environment(bootstrap),
                self.app,
                self.query,
                topic=commits_topic_for(self.app, self.query),
            ).items()
        }


def fused_writer(
    bootstrap: str, input_topic: str, topics: Topics, query: str, transform: Any, **setting: str
) -> TransactionalBatchWriter:
    return TransactionalBatchWriter(
        config(bootstrap, input_topic, topics, query, **setting), transform=RowTransform(transform, OUTPUT_SCHEMA)
    )


@pytest.fixture(scope="module")
def two_hop(spark: Any, cluster: KafkaContext, input_topic: str) -> Run:
    """The reference: decide in its own mapInArrow, then the in-place write (the job before the fusion)."""
    topics, query = outputs(cluster), unique("twohop")
    writer = TransactionalBatchWriter(config(cluster.bootstrap_servers, input_topic, topics, query))
    writer.prepare(spark)
    writer(
        source_rows(spark, cluster.bootstrap_servers, input_topic).mapInArrow(decide_function(topics), OUTPUT_SCHEMA), 0
    )
    run = Run(topics, query, written(cluster, topics))
    assert sum(len(records) for records in run.by_role()["decisions"].values()) == EVENTS
    assert sum(len(records) for records in run.by_role()["dlq"].values()) == len(MALFORMED)
    return run


def test_the_fused_write_writes_the_two_hop_writes_bytes_headers_and_markers(
    spark: Any, cluster: KafkaContext, input_topic: str, two_hop: Run
) -> None:
    topics, query = outputs(cluster), unique("fused")
    writer = fused_writer(cluster.bootstrap_servers, input_topic, topics, query, decide_function(topics))
    writer.prepare(spark)
    writer(source_rows(spark, cluster.bootstrap_servers, input_topic), 0)
    fused = Run(topics, query, written(cluster, topics))
    assert fused.by_role() == two_hop.by_role()
    letters = headers_by_value(cluster.bootstrap_servers, topics.dlq, expect=len(MALFORMED))
    assert letters == headers_by_value(cluster.bootstrap_servers, two_hop.topics.dlq, expect=len(MALFORMED))
    assert all(headers["ikkai.dlq.stage"] == b"infer" for headers in letters.values())
    assert fused.source_offsets(cluster.bootstrap_servers) == two_hop.source_offsets(cluster.bootstrap_servers)


def fail_at_commit(how: str) -> None:
    """Arm this Python worker: this task's commit fails instead, once every record of its transaction is on the broker.

    Called by the transform, in the worker that then writes the task's rows, so the failure comes
    after the producer exists, ``begin_transaction`` ran and the records and marker were produced:
    between produce and commit, where a kill -9 or an exception hurts most. One shot, and only for
    the task that armed it (a reused worker's later tasks pass through).
    """
    from pyspark import TaskContext

    from spark_jobs.sink import partition_transactions
    from spark_jobs.sink.producer_pool import process_pool

    def task() -> tuple[int, int, int] | None:
        context = TaskContext.get()
        return None if context is None else (context.stageId(), context.partitionId(), context.attemptNumber())

    armed_for, passed_on = task(), partition_transactions.call_with_retries  # type: ignore[attr-defined]

    def call_with_retries(txn_id: str, operation: str, call: Callable[[], Any], **kw: Any) -> Any:
        if operation != "commit_transaction" or task() != armed_for:
            return passed_on(txn_id, operation, call, **kw)
        partition_transactions.call_with_retries = passed_on  # type: ignore[attr-defined]
        pool = process_pool()
        writer = next(pool.kept(key) for key in pool.oldest_first() if key[1] == txn_id)
        assert writer is not None
        assert writer.producer.flush(10) == 0  # produced, sent, not committed
        if how == "kill -9":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("the write failed after producing, before its commit")

    partition_transactions.call_with_retries = call_with_retries  # type: ignore[attr-defined,assignment]


def failing_after_deciding(decide: Callable[[Iterator[Any]], Iterator[Any]], how: str) -> Callable[..., Iterator[Any]]:
    """``decide``, and then the task fails after its transaction began and its records were produced: an exception
    or a kill -9 of its Python worker between produce and commit (``fail_at_commit``), or a record the producer
    refuses in the middle of the transaction (the decided rows, the last one too big)."""

    def transform(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped]

        decided = pa.Table.from_batches(list(decide(batches)))
        if how in ("exception", "kill -9"):
            fail_at_commit(how)
            yield from decided.to_batches()
            return
        ordered = decided.sort_by([(name, "ascending") for name in ORDER_BY])
        values = ordered.column("value").to_pylist()
        values[-1] = b"x" * 2_000_000  # over the producer's message.max.bytes: produce() refuses it
        yield from ordered.set_column(2, "value", pa.array(values, pa.binary())).to_batches()

    return transform


FAILURES = {  # what the failed batch's error says, by case
    "exception": "RuntimeError: the write failed after producing, before its commit",
    "kill -9": "Python worker exited unexpectedly (crashed)",
    "refused mid-transaction": "produce failed (MSG_SIZE_TOO_LARGE",  # begin_transaction done, records produced
}


@pytest.mark.parametrize("how", ["exception", "kill -9", "refused mid-transaction"])
def test_a_fused_write_failing_between_decide_and_commit_commits_nothing_and_the_rerun_writes_once(
    spark: Any, cluster: KafkaContext, input_topic: str, two_hop: Run, how: str
) -> None:
    """The worker's own producers (``--transactional-writer worker``): the fault is built in the worker that commits."""
    topics, query = outputs(cluster), unique("failing")
    decide = decide_function(topics)
    broken = fused_writer(
        cluster.bootstrap_servers, input_topic, topics, query, failing_after_deciding(decide, how), writer="worker"
    )
    broken.prepare(spark)
    with pytest.raises(Exception) as caught:  # Spark wraps the task's failure in its own errors
        broken(source_rows(spark, cluster.bootstrap_servers, input_topic), 0)
    assert FAILURES[how] in str(caught.value)  # it failed where this case means it to, nowhere else
    if how != "refused mid-transaction":  # flushed before the failure (fail_at_commit): on the broker, uncommitted
        produced = written(cluster, topics, "read_uncommitted")
        assert any(records for partitions in produced.values() for records in partitions.values()), "nothing produced"
    # A refusal comes from produce() itself: the records before it may still sit in the client's queue, which the
    # failed write purges, so whether any reached the broker is a race; that nothing is committed is not.
    assert all(not records for partitions in written(cluster, topics).values() for records in partitions.values())
    assert read_markers(cluster, "test", query, topic=commits_topic_for("test", query)) == {}
    fused_writer(cluster.bootstrap_servers, input_topic, topics, query, decide)(
        source_rows(spark, cluster.bootstrap_servers, input_topic), 0
    )
    fused_writer(cluster.bootstrap_servers, input_topic, topics, query, decide)(
        source_rows(spark, cluster.bootstrap_servers, input_topic), 0
    )
    rerun = Run(topics, query, written(cluster, topics))
    assert rerun.by_role() == two_hop.by_role()  # every record once, the bytes of the crash-free write
    assert rerun.source_offsets(cluster.bootstrap_servers) == two_hop.source_offsets(cluster.bootstrap_servers)


def arming_the_writer(decide: Callable[[Iterator[Any]], Iterator[Any]], pause: Path) -> Callable[..., Iterator[Any]]:
    """``decide``, in a worker whose environment names ``pause``: the executor writer this worker starts inherits it,
    and its first write to reach its commit holds the transaction open there (``pause_before_commit``). The test
    gives each case an application of its own, so the writer is a new one, started by these tasks. The variable
    stays in the reused worker; the folder's ``claimed`` file lets every later write there run straight through."""

    def transform(batches: Iterator[Any]) -> Iterator[Any]:
        os.environ[PAUSE_BEFORE_COMMIT] = str(pause)
        yield from decide(batches)

    return transform


def fault_in_the_writer(pause: Path, how: str, settings: SinkConfig) -> dict[str, Any]:
    """Wait until the writer holds a transaction open with its records on the broker; then kill it or fence it."""
    give_up_at = time.monotonic() + 120.0  # bounds a broken test's wait; nothing is timed
    while not (pause / "paused").exists():
        if time.monotonic() > give_up_at:
            raise AssertionError("no write paused before its commit")
        time.sleep(0.05)
    paused: dict[str, Any] = json.loads((pause / "paused").read_text())
    if how == "kill -9 of the writer":
        os.kill(paused["pid"], signal.SIGKILL)
    else:  # another instance of the transactional.id: its init_transactions aborts the open one; the commit is refused
        stranger = Producer(settings.cluster.producer_config() | {"transactional.id": settings.transactional_id(
            paused["partition"])})  # fmt: skip
        stranger.init_transactions(30)
    (pause / "release").touch()
    return paused


WRITER_FAILURES = {  # what the failed batch's error says, by case
    "kill -9 of the writer": "hung up before answering batch 0, partition",
    "fenced before its commit": "fenced",
}


@pytest.mark.parametrize("how", list(WRITER_FAILURES))
def test_an_executor_writer_failing_between_produce_and_commit_commits_nothing_of_it_and_the_rerun_writes_once(
    spark: Any, cluster: KafkaContext, input_topic: str, two_hop: Run, how: str, tmp_path: Path
) -> None:
    """The twin for ``--transactional-writer executor``: there the commit runs in the executor's writer process, so
    the fault is built there, between its produce and its commit. The writer serves both partitions in parallel:
    the paused partition must have nothing committed (records on the broker, uncommitted; no marker), the other
    may have committed; the re-run writes every record once, the bytes of the crash-free write."""
    topics, query, app = outputs(cluster), unique("failing"), unique("writer").replace(".", "-")
    decide, pause = decide_function(topics), tmp_path / "pause"
    pause.mkdir()
    settings = config(cluster.bootstrap_servers, input_topic, topics, query, writer="executor", app=app)
    broken = fused_writer(cluster.bootstrap_servers, input_topic, topics, query, arming_the_writer(decide, pause),
                          writer="executor", app=app)  # fmt: skip
    broken.prepare(spark)
    faults: list[dict[str, Any]] = []
    fault = threading.Thread(target=lambda: faults.append(fault_in_the_writer(pause, how, settings)), daemon=True)
    fault.start()
    with pytest.raises(Exception) as caught:  # Spark wraps the task's failure in its own errors
        broken(source_rows(spark, cluster.bootstrap_servers, input_topic), 0)
    fault.join(130)
    assert faults, "the fault was never built"
    assert WRITER_FAILURES[how] in str(caught.value)  # it failed where this case means it to, nowhere else
    paused = faults[0]["partition"]
    produced = written(cluster, topics, "read_uncommitted")
    assert any(partitions.get(paused) for partitions in produced.values()), "nothing of the paused write on the broker"
    assert all(not partitions.get(paused) for partitions in written(cluster, topics).values())
    markers = read_markers(cluster, app, query, topic=commits_topic_for(app, query))
    assert paused not in markers
    for _ in range(2):
        fused_writer(cluster.bootstrap_servers, input_topic, topics, query, decide, writer="executor", app=app)(
            source_rows(spark, cluster.bootstrap_servers, input_topic), 0
        )
    rerun = Run(topics, query, written(cluster, topics), app)
    assert rerun.by_role() == two_hop.by_role()  # every record once, the bytes of the crash-free write
    assert rerun.source_offsets(cluster.bootstrap_servers) == two_hop.source_offsets(cluster.bootstrap_servers)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "in place"])
def test_two_tasks_holding_one_partition_are_refused_before_any_commit(
    spark: Any, cluster: KafkaContext, input_topic: str, fused: bool
) -> None:
    """issue 27, item 6: the Kafka source read with minPartitions splits each input partition's range over two Spark
    tasks. Each would commit part of the partition under one marker (the second overwriting the first's offsets);
    the check that two tasks wrote one partition ran after both had committed. Now nothing is written."""
    topics, query = outputs(cluster), unique("split")
    rows = source_rows(spark, cluster.bootstrap_servers, input_topic, minPartitions=str(PARTITIONS * 2))
    if fused:
        writer = fused_writer(cluster.bootstrap_servers, input_topic, topics, query, decide_function(topics))
    else:
        writer = TransactionalBatchWriter(config(cluster.bootstrap_servers, input_topic, topics, query))
        rows = rows.mapInArrow(decide_function(topics), OUTPUT_SCHEMA)
    writer.prepare(spark)
    with pytest.raises(Exception, match=r"would be written by more than one Spark task; nothing was written"):
        writer(rows, 0)
    produced = written(cluster, topics, "read_uncommitted")
    assert all(not records for partitions in produced.values() for records in partitions.values())
    assert read_markers(cluster, "test", query, topic=commits_topic_for("test", query)) == {}


def stream_through(
    spark: Any, bootstrap: str, input_topic: str, writer: TransactionalBatchWriter, checkpoint: Path, **extra: str
) -> tuple[list[dict[int, set[int]] | None], Exception | None]:
    """Stream ``input_topic`` into ``writer`` to its end: each batch's layout as read from its plan, and the failure."""
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": input_topic, "startingOffsets": "earliest",
               "kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": "120", **extra}  # fmt: skip
    planned: list[dict[int, set[int]] | None] = []

    def each_batch(batch: Any, batch_id: int) -> None:
        planned.append(planned_kafka_partitions(batch))
        writer(batch, batch_id)

    source = spark.readStream.format("kafka").options(**options).load()
    rows = source.select("key", "value", "topic", "partition", "offset")  # what the infer job hands its writer
    query = rows.writeStream.foreachBatch(each_batch).option("checkpointLocation", str(checkpoint)).start()
    failure: Exception | None = None
    try:
        query.processAllAvailable()
    except Exception as exc:  # noqa: BLE001 - Spark's StreamingQueryException: the test reads its message
        failure = exc
    finally:
        query.stop()
    return planned, failure


def test_a_streaming_batch_is_checked_from_its_plan_and_a_split_partition_is_refused(
    spark: Any, cluster: KafkaContext, input_topic: str, two_hop: Run, tmp_path: Path
) -> None:
    """foreachBatch hands its function an existing RDD over the Kafka source's partitions; which Kafka partition each
    Spark task holds is read from that plan, with no Spark job of its own per batch. On Spark 4.3 the RDD partition's
    field is ``inputPartition`` (an Option, not 3.x's ``inputPartitions``): the read failed on every batch and fell
    back to a distinct() job, two of a batch's three stages. Split by minPartitions, the plan shows two tasks per
    Kafka partition and the query stops before any commit."""
    topics, query = outputs(cluster), unique("stream")
    writer = fused_writer(cluster.bootstrap_servers, input_topic, topics, query, decide_function(topics))
    planned, failure = stream_through(spark, cluster.bootstrap_servers, input_topic, writer, tmp_path / "whole")
    assert failure is None, failure
    assert len(planned) > 1  # several batches
    for layout in planned:
        assert layout is not None  # read from the plan
        held = [partitions for partitions in layout.values() if partitions]
        assert all(len(partitions) == 1 for partitions in held)
        assert len({p for partitions in held for p in partitions}) == len(held)  # one task per Kafka partition
    assert Run(topics, query, written(cluster, topics)).by_role() == two_hop.by_role()  # batches, the same bytes
    markers = read_markers(cluster, "test", query, topic=commits_topic_for("test", query))
    assert max(marker.batch_id for marker in markers.values()) == len(planned) - 1  # each task named its own batch

    topics, query = outputs(cluster), unique("stream-split")
    writer = fused_writer(cluster.bootstrap_servers, input_topic, topics, query, decide_function(topics))
    planned, failure = stream_through(
        spark, cluster.bootstrap_servers, input_topic, writer, tmp_path / "split", minPartitions=str(PARTITIONS * 2)
    )
    assert failure is not None and "would be written by more than one Spark task; nothing was written" in str(failure)
    assert planned[0] is not None and len(planned[0]) == PARTITIONS * 2
    assert all(not records for partitions in written(cluster, topics).values() for records in partitions.values())
    assert read_markers(cluster, "test", query, topic=commits_topic_for("test", query)) == {}
