"""No two Spark tasks hold one Kafka partition: the streaming plan checked once when a query starts, the batches of a
stream not checked so checked each (spark_jobs/sink/shared_partitions.py, the writer's ``check_stream``).

No broker: the streams are planned, never started; the write itself is replaced by a recorder.
"""

from __future__ import annotations

from typing import Any

import pytest

from ikkai.contract.kafka import KafkaContext
from spark_jobs.sink import transactional_sink
from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.partition_transactions import PartitionResult
from spark_jobs.sink.transactional_sink import SinkConfig, TransactionalBatchWriter
from spark_jobs.sink.write_tasks import InPlaceWrite
from spark_jobs.streaming_job import kafka_source

CONFIG = SinkConfig(app="ikkai", query="q", cluster=KafkaContext("127.0.0.1:1"), output_topics=("out",),
                    partitions=2, order_by=("offset",), source_topic="in", partition_column="partition")  # fmt: skip


def split_stream(spark: Any) -> Any:
    source = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1")
    return source.option("subscribe", "in").option("minPartitions", "8").load().select("key", "partition")


def test_a_stream_that_splits_a_partition_is_refused_when_the_query_starts(spark: Any) -> None:
    writer = TransactionalBatchWriter(CONFIG)
    with pytest.raises(CommitMarkerError, match=r"read with minpartitions.*nothing was written"):
        writer.check_stream(split_stream(spark))


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch ids whose plan ``refuse_shared_partitions`` read; the write tasks replaced by one result each."""
    checked: list[int] = []
    monkeypatch.setattr(
        transactional_sink, "refuse_shared_partitions", lambda _rows, batch_id, *_: checked.append(batch_id)
    )
    results = [PartitionResult(p, 0, 1, skipped=False) for p in range(CONFIG.partitions)]
    monkeypatch.setattr(InPlaceWrite, "collect", lambda *_: results)
    return checked


def test_a_stream_checked_at_the_start_has_no_plan_walk_per_batch(spark: Any, checks: list[int]) -> None:
    writer = TransactionalBatchWriter(CONFIG)
    stream = kafka_source(spark, KafkaContext("127.0.0.1:1"), "in", 100).select("key", "partition")
    writer.check_stream(stream)  # one topic, row by row: one task per partition in every micro-batch
    for batch_id in range(3):
        writer._write_in_place(stream, batch_id)
    assert checks == []


def test_batches_of_a_stream_not_checked_at_the_start_are_each_checked(spark: Any, checks: list[int]) -> None:
    writer = TransactionalBatchWriter(CONFIG)  # used as a foreachBatch function directly, or behind a batch function
    rows = spark.range(2).selectExpr("CAST(id AS INT) AS partition")
    for batch_id in range(3):
        writer._write_in_place(rows, batch_id)
    assert checks == [0, 1, 2]
