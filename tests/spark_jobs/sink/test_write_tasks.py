"""The write tasks' batch id (spark_jobs/sink/write_tasks.py): named by the driver per Spark job, checked against
Spark's own name of the micro-batch, refused when missing. No broker: the tasks only read their name."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from ikkai.contract.kafka import KafkaContext
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.write_tasks import BATCH_ID_PROPERTY, SPARK_BATCH_ID_PROPERTY, task_batch_id

CONFIG = SinkConfig(app="ikkai", query="q", cluster=KafkaContext("127.0.0.1:1"), output_topics=("out",),
                    partitions=2, order_by=("offset",), source_topic="in", partition_column="partition")  # fmt: skip


def named_batch(batches: Iterator[Any], config: SinkConfig) -> Iterator[Any]:
    import pyarrow as pa  # type: ignore[import-untyped]

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"batch": [task_batch_id(config)]})


def batch_of_a_job(spark: Any, properties: dict[str, str]) -> int:
    context = spark.sparkContext
    for key, value in properties.items():
        context.setLocalProperty(key, value)
    try:
        rows = spark.range(1).mapInArrow(functools.partial(named_batch, config=CONFIG), "batch long").collect()
    finally:
        for key in properties:
            context.setLocalProperty(key, None)
    return int(rows[0]["batch"])


def test_a_write_task_writes_the_batch_the_driver_named(spark: Any) -> None:
    assert batch_of_a_job(spark, {BATCH_ID_PROPERTY: "7"}) == 7
    assert batch_of_a_job(spark, {BATCH_ID_PROPERTY: "8", SPARK_BATCH_ID_PROPERTY: "8"}) == 8  # a micro-batch's job


@pytest.mark.parametrize(
    "properties", [{}, {BATCH_ID_PROPERTY: "7", SPARK_BATCH_ID_PROPERTY: "8"}], ids=["unnamed", "named twice"]
)
def test_a_write_task_not_named_its_batch_once_is_refused(spark: Any, properties: dict[str, str]) -> None:
    with pytest.raises(Exception, match=r"was named batch .* by the sink and .* by Spark; nothing was written"):
        batch_of_a_job(spark, properties)
