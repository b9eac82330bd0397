"""The pure parts of the data source writer trial (spark_jobs/sink/stream_writer.py).

Its run against the real stack is in tests/spark_jobs/infer/test_job.py (it continues a query's markers).
"""

from __future__ import annotations

import pytest

from ikkai.contract.kafka import KafkaContext
from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.partition_transactions import PartitionResult, SinkConfig
from spark_jobs.sink.stream_writer import SINK_OPTION, TransactionalDataSource, WrittenPartitions, batch_results


def result(partition: int, records: int = 3) -> PartitionResult:
    return PartitionResult(partition, 7, records, skipped=False)


def test_every_tasks_results_by_partition() -> None:
    messages = [WrittenPartitions((result(1),)), None, WrittenPartitions(()), WrittenPartitions((result(0, 5),))]
    assert [(r.partition, r.records) for r in batch_results(messages, "_ikkai.commits", 7)] == [(0, 5), (1, 3)]


def test_a_partition_written_by_two_tasks_is_refused() -> None:
    messages = [WrittenPartitions((result(1),)), WrittenPartitions((result(1),))]
    with pytest.raises(CommitMarkerError, match=r"batch 7: partitions \[1\] were written by more than one Spark task"):
        batch_results(messages, "_ikkai.commits", 7)


def test_the_data_source_carries_the_config_and_transform_in_its_option() -> None:
    from spark_jobs.sink.stream_writer import sink_option

    config = SinkConfig(app="ikkai", query="q", cluster=KafkaContext.of("127.0.0.1:1"), output_topics=("out",),
                        partitions=2, order_by=("offset",), source_topic="in")  # fmt: skip
    option = sink_option(config, None)
    assert set(option) == {SINK_OPTION}
    writer = TransactionalDataSource(option).streamWriter(schema=None, overwrite=False)  # type: ignore[arg-type]
    assert writer.config == config
    assert writer.transform is None
