"""Spark, with the connector jars from stack/pom.xml, reads the stack through read_committed."""

from __future__ import annotations

from typing import Any

import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.session import spark_session
from stack.kit.topic_io import commit_then_abort, create_topic, unique

pytestmark = pytest.mark.integration


def test_spark_kafka_source_honours_read_committed(spark: Any, cluster: KafkaContext) -> None:
    topic = create_topic(cluster, unique("events.test"), partitions=2)
    commit_then_abort(cluster, topic, committed=12, aborted=5)

    def values(isolation: str) -> list[str]:
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
            .option("subscribe", topic)
            .option("kafka.isolation.level", isolation)
            .load()
        )
        return sorted(row.value.decode() for row in frame.select("value").collect())

    assert values("read_committed") == sorted(f"committed-{i}" for i in range(12))
    assert len(values("read_uncommitted")) == 17


def test_speculation_is_off(spark: Any) -> None:
    assert spark.conf.get("spark.speculation") == "false"


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://api:6443"])
def test_a_cluster_master_outside_spark_submit_is_refused_with_the_command_that_ships_the_code(
    master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started by ``python -m spark_jobs.<job> --master spark://...``, executors got none of the jobs' code (an
    editable install on the same machine hid it). Refused before any JVM starts, naming ``ikkai jobs run``."""
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    with pytest.raises(ConfigError, match=r"executors get the jobs' code only through spark-submit") as refused:
        spark_session("refused", master=master)
    assert f"ikkai jobs run <job> --master {master}" in str(refused.value)
