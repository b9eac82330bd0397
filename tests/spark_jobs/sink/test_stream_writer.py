"""The data source stream writer's own parts (spark_jobs/sink/stream_writer.py): the plan check before a query
starts, the layout check and the refusal that reaches the driver as itself, the option that carries the sink.

Its runs against the real stack are the infer job's tests (tests/spark_jobs/infer/test_job.py): it is the default.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.partition_transactions import PartitionResult
from spark_jobs.sink.shared_partitions import refuse_a_split_stream
from spark_jobs.sink.stream_writer import (
    SINK_OPTION,
    StreamSink,
    TransactionalDataSource,
    TransactionalStreamWriter,
    WrittenPartitions,
    batch_results,
    read_refusal,
)
from spark_jobs.streaming_job import kafka_source

CONFIG = SinkConfig(app="ikkai", query="q", cluster=KafkaContext('127.0.0.1:1'), output_topics=("out",),
                    partitions=2, order_by=("offset",), source_topic="in", partition_column="partition")  # fmt: skip


def result(partition: int, records: int = 3) -> PartitionResult:
    return PartitionResult(partition, 7, records, skipped=False)


def test_every_tasks_results_by_partition() -> None:
    messages = [WrittenPartitions((result(1),)), None, WrittenPartitions(()), WrittenPartitions((result(0, 5),))]
    assert [(r.partition, r.records) for r in batch_results(messages, "_ikkai.commits", 7)] == [(0, 5), (1, 3)]


def test_a_partition_written_by_two_tasks_is_refused() -> None:
    messages = [WrittenPartitions((result(1),)), WrittenPartitions((result(1),))]
    with pytest.raises(CommitMarkerError, match=r"batch 7: partitions \[1\] were written by more than one Spark task"):
        batch_results(messages, "_ikkai.commits", 7)


def test_the_data_source_carries_the_sink_in_its_option(tmp_path: Path) -> None:
    sink = StreamSink(CONFIG, None, str(tmp_path / "refusal"), crash_after_batch=3, crash_pids=(1, 2))
    option = sink.option()
    assert set(option) == {SINK_OPTION}
    writer = TransactionalDataSource(option).streamWriter(schema=None, overwrite=False)  # type: ignore[arg-type]
    assert writer.sink == sink


def test_a_tasks_refusal_reaches_the_driver_as_itself(tmp_path: Path) -> None:
    refusal = ConfigError("sink", "key", "a row has no key", fix="every output record needs a key to route it")
    writer = TransactionalStreamWriter(StreamSink(CONFIG, None, str(tmp_path / "refusal")))
    assert read_refusal(tmp_path / "refusal") is None
    messages = [WrittenPartitions((result(0),), None, time.time()), WrittenPartitions((), refusal, time.time())]
    with pytest.raises(ConfigError) as raised:
        writer.commit(messages, 7)  # type: ignore[arg-type]
    assert raised.value is refusal  # the batch fails with it: Spark's commit log does not record the batch
    kept = read_refusal(tmp_path / "refusal")
    assert type(kept) is ConfigError
    assert str(kept) == str(refusal)


def test_a_committed_batch_prints_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = TransactionalStreamWriter(StreamSink(CONFIG, None, str(tmp_path / "refusal")))
    messages = [WrittenPartitions((result(1, 4),), None, time.time()), WrittenPartitions((result(0, 5),))]
    writer.commit(messages, 7)  # type: ignore[arg-type]
    assert capsys.readouterr().err.startswith("q: batch 7 committed 9 records, slowest partition 0.00 s of ")
    assert read_refusal(tmp_path / "refusal") is None


@pytest.fixture
def stream(spark: Any) -> Any:
    return kafka_source(spark, KafkaContext("127.0.0.1:1"), "events.payments", 100).select("key", "partition")


def test_one_kafka_topic_read_row_by_row_is_one_task_per_partition(stream: Any) -> None:
    refuse_a_split_stream(stream.filter("key IS NOT NULL").select("key", "partition"), CONFIG)  # no error


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s.repartition(4), "passes Repartition"),
        (lambda s: s.union(s), "reads Union, not one Kafka source"),
        (lambda s: s.groupBy("partition").count(), "passes Aggregate"),
    ],
    ids=["repartition", "union", "aggregate"],
)
def test_a_stream_that_may_move_rows_between_tasks_is_refused_before_it_runs(
    stream: Any, change: Any, problem: str
) -> None:
    with pytest.raises(CommitMarkerError, match=problem + ".*nothing was written"):
        refuse_a_split_stream(change(stream), CONFIG)


@pytest.mark.parametrize(
    ("option", "problem"),
    [(("minPartitions", "8"), "read with minpartitions"), (("subscribePattern", "events.*"), "exactly one Kafka")],
    ids=["min-partitions", "pattern"],
)
def test_a_kafka_source_that_splits_or_widens_is_refused(spark: Any, option: tuple[str, str], problem: str) -> None:
    source = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").option(*option)
    if option[0] != "subscribePattern":
        source = source.option("subscribe", "events.payments")
    with pytest.raises(CommitMarkerError, match=problem):
        refuse_a_split_stream(source.load().select("key", "partition"), CONFIG)


def test_a_refusal_in_a_write_task_stops_the_query_with_that_error_itself(spark: Any, tmp_path: Path) -> None:
    """A real streaming query through the data source: its one task holds rows of a partition outside the layout
    (5 of 0..1) and refuses before touching Kafka; the driver's await raises that refusal, not Spark's page."""
    from pyspark.sql import functions as F

    from spark_jobs.streaming_job import RunningQuery

    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "part.txt").write_text("one record\n")
    sink = StreamSink(CONFIG, None, str(tmp_path / "refusal"))
    spark.dataSource.register(TransactionalDataSource)
    rows = spark.readStream.text(str(tmp_path / "input")).select(F.lit(5).alias("partition"))
    query = (
        rows.writeStream.format(TransactionalDataSource.name())
        .options(**sink.option())
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(CommitMarkerError, match=r"one Spark task holds rows of partition \[5\], not one of 0\.\.1"):
        RunningQuery(query, lambda: read_refusal(tmp_path / "refusal")).await_termination()
