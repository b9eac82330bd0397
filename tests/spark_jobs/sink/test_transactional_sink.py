"""The transactional sink on the real broker and real Spark: what read_committed consumers see."""

from __future__ import annotations

import functools
import io
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from ikkai.errors import ConfigError
from spark_jobs.sink import transactional_sink
from spark_jobs.sink.commit_markers import CommitMarkerError, read_markers
from spark_jobs.sink.kafka_errors import ErrorKind, TransactionError, classify
from spark_jobs.sink.transactional_sink import (
    AtLeastOnceBatchWriter,
    SinkConfig,
    TransactionalBatchWriter,
    refuse_speculation,
)
from stack.kit.topic_io import by_partition, create_topic, transactional_producer, unique
from tests.spark_jobs.records import headers_by_value

pytestmark = pytest.mark.integration

PARTITIONS = 3


def sink(bootstrap: str, topic: str, query: str, commits: str) -> SinkConfig:
    return SinkConfig(
        app="test", query=query, cluster=KafkaContext.from_environment(bootstrap), output_topics=(topic,),
        partitions=PARTITIONS,
        order_by=("seq",), source_topic="test.in", commits_topic=commits, retry_deadline_s=20,
    )  # fmt: skip


def batch(spark: Any, topic: str, start: int, count: int) -> Any:
    """Records of input offsets start.. of input partition 0, routed by key to the output partitions."""
    rows = [
        (topic, f"pay-{i % 17}".encode(), f"value-{i}".encode(), None, i, 0, i) for i in range(start, start + count)
    ]
    schema = "topic string, key binary, value binary, timestamp long, seq long, input_partition int, input_offset long"
    return spark.createDataFrame(rows, schema).repartition(4)


@pytest.fixture
def topics(cluster: KafkaContext) -> tuple[str, str]:
    return create_topic(cluster, unique("test.out"), PARTITIONS), unique("_ikkai.commits.test")


def test_each_record_once_on_its_key_partition_in_order(
    spark: Any, cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    out, commits = topics
    writer = TransactionalBatchWriter(sink(cluster.bootstrap_servers, out, "q", commits))
    writer.prepare(spark)
    writer(batch(spark, out, 0, 60), 0)
    writer(batch(spark, out, 60, 40), 1)
    seen = by_partition(cluster, out)
    assert sum(len(records) for records in seen.values()) == 100
    for partition, records in seen.items():
        assert all(kafka_partition(key, PARTITIONS) == partition for key, _ in records)
        numbers = [int(value.decode().split("-")[1]) for _, value in records]
        assert numbers == sorted(numbers)
    markers = read_markers(cluster, "test", "q", topic=commits)
    assert {p: m.batch_id for p, m in markers.items()} == {p: 1 for p in range(PARTITIONS)}


@pytest.mark.parametrize("mode", ["exactly-once", "at-least-once"])
def test_a_headers_column_becomes_kafka_record_headers(
    spark: Any, cluster: KafkaContext, topics: tuple[str, str], mode: str
) -> None:
    """How a dead letter carries its reason where any consumer sees it without decoding the value."""
    out, commits = topics
    rows = [(out, b"pay-1", b"bad", None, 0, {"ikkai.dlq.reason": "not JSON", "ikkai.dlq.stage": "enrich"}, 0, 0),
            (out, b"pay-2", b"good", None, 1, None, 0, 1)]  # fmt: skip
    frame = spark.createDataFrame(
        rows,
        "topic string, key binary, value binary, timestamp long, seq long, headers map<string,string>, "
        "input_partition int, input_offset long",
    )
    config = sink(cluster.bootstrap_servers, out, "q", commits)
    writer = TransactionalBatchWriter(config) if mode == "exactly-once" else AtLeastOnceBatchWriter(cluster)
    writer.prepare(spark)
    writer(frame, 0)
    seen = headers_by_value(cluster.bootstrap_servers, out, expect=2)
    assert seen == {b"bad": {"ikkai.dlq.reason": b"not JSON", "ikkai.dlq.stage": b"enrich"}, b"good": {}}


def test_a_rerun_batch_is_skipped(spark: Any, cluster: KafkaContext, topics: tuple[str, str]) -> None:
    out, commits = topics
    writer = TransactionalBatchWriter(sink(cluster.bootstrap_servers, out, "q", commits))
    writer.prepare(spark)
    writer(batch(spark, out, 0, 50), 0)
    first = by_partition(cluster, out)
    writer(batch(spark, out, 0, 50), 0)  # a restart re-running batch 0
    writer(batch(spark, out, 0, 50), 0)
    assert by_partition(cluster, out) == first


def test_an_empty_batch_writes_nothing_and_the_next_one_goes_on(
    spark: Any, cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    out, commits = topics
    writer = TransactionalBatchWriter(sink(cluster.bootstrap_servers, out, "q", commits))
    writer(batch(spark, out, 0, 0), 0)  # Spark optimizes the empty batch's shuffle away: no write task runs
    writer(batch(spark, out, 0, 20), 1)
    assert sum(len(records) for records in by_partition(cluster, out).values()) == 20


def test_a_zombie_is_fenced_and_its_open_transaction_aborted(
    spark: Any, cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    out, commits = topics
    config = sink(cluster.bootstrap_servers, out, "q", commits)
    TransactionalBatchWriter(config).prepare(spark)
    zombie = transactional_producer(cluster, config.transactional_id(0))
    zombie.begin_transaction()
    zombie.produce(out, key=b"zombie", value=b"half-written", partition=0)
    zombie.flush(10)
    TransactionalBatchWriter(config)(batch(spark, out, 0, 30), 0)
    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(10)
    assert classify(caught.value.args[0]) is ErrorKind.FATAL
    seen = by_partition(cluster, out)
    assert sum(len(records) for records in seen.values()) == 30
    assert all(key != b"zombie" for records in seen.values() for key, _ in records)
    assert len(by_partition(cluster, out, "read_uncommitted")[0]) == len(seen[0]) + 1  # it was there, aborted


def test_a_producer_fenced_between_batches_starts_anew(
    spark: Any, cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    out, commits = topics
    config = sink(cluster.bootstrap_servers, out, "q", commits)
    writer = TransactionalBatchWriter(config)
    writer(batch(spark, out, 0, 40), 0)  # the workers now keep a producer per partition
    for partition in range(PARTITIONS):  # another instance takes every transactional.id over, writes nothing
        transactional_producer(cluster, config.transactional_id(partition)).close()
    writer(batch(spark, out, 40, 40), 1)
    writer(batch(spark, out, 40, 40), 1)  # and a re-run is still skipped
    seen = by_partition(cluster, out)
    assert sorted(int(v.decode().split("-")[1]) for records in seen.values() for _, v in records) == list(range(80))
    markers = read_markers(cluster, "test", "q", topic=commits)
    assert {p: m.batch_id for p, m in markers.items()} == {p: 1 for p in range(PARTITIONS)}


def test_a_changed_partition_count_stops_the_job(spark: Any, cluster: KafkaContext, topics: tuple[str, str]) -> None:
    out, commits = topics
    TransactionalBatchWriter(sink(cluster.bootstrap_servers, out, "q", commits))(batch(spark, out, 0, 10), 0)
    wider = create_topic(cluster, unique("test.out.wide"), PARTITIONS + 1)
    with pytest.raises(CommitMarkerError, match="has 4 partitions but the job writes 3"):
        TransactionalBatchWriter(sink(cluster.bootstrap_servers, wider, "q", commits)).prepare(spark)
    moved = SinkConfig(
        **{**sink(cluster.bootstrap_servers, wider, "q", commits).__dict__, "partitions": PARTITIONS + 1}
    )
    # The same query over the grown layout: refused with the new query that starts where this one stopped.
    with pytest.raises(CommitMarkerError, match=r"committed with 3 partitions, the topics now have 4") as grown:
        TransactionalBatchWriter(moved).prepare(spark)
    # No offsets to type: the new query leaves out what this one committed, by its markers (grown_layout).
    text = str(grown.value)
    assert "--query q-p4 --after-query q and a fresh --checkpoint;" in text and "--start-offsets" not in text, text


def test_a_missing_output_topic_is_refused(
    spark: Any, bootstrap: str, topics: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job asks again for up to two minutes (a lagging broker); the test gives it 3 s of the same rule.
    monkeypatch.setattr(
        transactional_sink, "check_topics", functools.partial(transactional_sink.check_topics, deadline_s=3)
    )
    _, commits = topics
    with pytest.raises(CommitMarkerError, match=r"does not exist \(asked for 3s\)"):
        TransactionalBatchWriter(sink(bootstrap, unique("test.missing"), "q", commits)).prepare(spark)


def in_place(bootstrap: str, topic: str, query: str, commits: str) -> SinkConfig:
    return SinkConfig(
        app="test", query=query, cluster=KafkaContext.from_environment(bootstrap), output_topics=(topic,),
        partitions=PARTITIONS,
        order_by=("input_partition", "input_offset"), source_topic="test.in", commits_topic=commits,
        retry_deadline_s=20, partition_column="input_partition",
    )  # fmt: skip


@pytest.fixture
def placed_input(cluster: KafkaContext) -> tuple[str, dict[int, list[bytes]]]:
    """An input topic whose keys sit where a producer put them: pay-i on partition i % 3, not murmur2's choice."""
    topic = create_topic(cluster, unique("test.in"), PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    placed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(90):
        key = f"pay-{i}".encode()
        producer.produce(topic, key=key, value=f"value-{i}".encode(), partition=i % PARTITIONS)
        placed[i % PARTITIONS].append(key)
    assert producer.flush(30) == 0
    return topic, placed


def kafka_batch(spark: Any, input_topic: str, out: str, bootstrap: str) -> Any:
    """What a job without a shuffle hands the sink: one Spark task per input partition (Spark's Kafka source)."""
    from pyspark.sql import functions as F

    source = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", input_topic)
    return source.load().select(
        F.lit(out).alias("topic"), "key", "value", F.lit(None).cast("long").alias("timestamp"),
        F.col("partition").alias("input_partition"), F.col("offset").alias("input_offset"),
    )  # fmt: skip


def test_in_place_each_record_goes_to_its_input_partition_once(
    spark: Any,
    cluster: KafkaContext,
    topics: tuple[str, str],
    placed_input: tuple[str, dict[int, list[bytes]]],
) -> None:
    out, commits = topics
    input_topic, placed = placed_input
    progress = io.StringIO()
    writer = TransactionalBatchWriter(in_place(cluster.bootstrap_servers, out, "q", commits), progress=progress)
    writer.prepare(spark)
    writer(kafka_batch(spark, input_topic, out, cluster.bootstrap_servers), 0)
    writer(kafka_batch(spark, input_topic, out, cluster.bootstrap_servers), 0)  # a re-run of the batch is skipped
    seen = by_partition(cluster, out)
    assert {p: [key for key, _ in records] for p, records in seen.items()} == placed  # in input-offset order
    markers = read_markers(cluster, "test", "q", topic=commits)
    assert {p: m.batch_id for p, m in markers.items()} == {p: 0 for p in range(PARTITIONS)}
    outside = sum(kafka_partition(key, PARTITIONS) != p for p, keys in placed.items() for key in keys)
    assert outside > 0  # the fixture is meant to disagree with the default partitioner
    lines = progress.getvalue().splitlines()
    assert lines[0].startswith("q: batch 0 committed 90 records, slowest partition ")
    assert lines[0].endswith(f" ({outside} in their input's partition, not their key's)")
    assert "committed 0 records, slowest partition " in lines[1]
    assert f"(partitions {list(range(PARTITIONS))} already committed)" in lines[1]


def test_in_place_refuses_a_task_holding_two_partitions(
    spark: Any, cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    out, commits = topics
    rows = [(out, f"pay-{i}".encode(), b"v", None, i % 2, i) for i in range(10)]
    frame = spark.createDataFrame(
        rows, "topic string, key binary, value binary, timestamp long, input_partition int, input_offset long"
    ).coalesce(1)
    writer = TransactionalBatchWriter(in_place(cluster.bootstrap_servers, out, "q", commits))
    with pytest.raises(Exception, match=r"one Spark task holds rows of input_partition \[0, 1\]"):
        writer(frame, 0)
    assert sum(len(records) for records in by_partition(cluster, out).values()) == 0


def test_speculation_on_is_refused() -> None:
    class Conf:
        def get(self, key: str, default: str) -> str:
            return "true" if key == "spark.speculation" else default

    class Session:
        conf = Conf()

    with pytest.raises(ConfigError, match=r"spark\.speculation"):
        refuse_speculation(Session())  # type: ignore[arg-type]


def test_transaction_errors_carry_the_transactional_id() -> None:
    from confluent_kafka import KafkaError

    err = TransactionError("test.q.2", "commit_transaction", KafkaError(KafkaError._FENCED, "x"), ErrorKind.FATAL, "f")
    assert "transactional.id test.q.2: commit_transaction failed" in str(err)
