"""Spark, with the connector jars from stack/pom.xml, reads the stack through read_committed."""

from __future__ import annotations

from typing import Any

import pytest

from demo.pipeline_io import create_topic, unique
from tests.kafka_helpers import commit_then_abort

pytestmark = pytest.mark.integration


def test_spark_kafka_source_honours_read_committed(spark: Any, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("events.test"), partitions=2)
    commit_then_abort(bootstrap, topic, committed=12, aborted=5)

    def values(isolation: str) -> list[str]:
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("kafka.isolation.level", isolation)
            .load()
        )
        return sorted(row.value.decode() for row in frame.select("value").collect())

    assert values("read_committed") == sorted(f"committed-{i}" for i in range(12))
    assert len(values("read_uncommitted")) == 17


def test_speculation_is_off(spark: Any) -> None:
    assert spark.conf.get("spark.speculation") == "false"
