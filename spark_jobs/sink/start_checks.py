"""The exactly-once writer's checks at its start and while it runs: speculation, the topics' layout and limits.

``TransactionalBatchWriter.start`` runs them before its claim (``start_pass``), in the order it refuses in:
speculation off (two attempts of one partition would write one transaction at once), a grown layout
(``grown_layout``), the commits topic (``commit_markers.ensure_commits_topic``), every written topic's
partition count (``check_topics``), then each written topic's size limit (``with_topic_limits``); then the rest of
what the markers forbid (``grown_layout.refuse_by_own_markers``: every marker's layout and input, a handover done,
other output topics), the last refusal before the claim.
``check_topics`` also runs at most every ``TOPIC_CHECK_INTERVAL_S`` and after any failed write
(``transactional_sink``); ``with_topic_limits`` then follows each written topic's ``max.message.bytes``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from confluent_kafka.admin import AdminClient

from ikkai.contract.kafka import TOPIC_DEADLINE_S
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.grown_layout import REPARTITION_PROCEDURE
from spark_jobs.sink.size_bounds import read_topic_limits

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def refuse_speculation(spark: SparkSession) -> None:
    if str(spark.conf.get("spark.speculation", "false")).lower() == "true":
        raise ConfigError(
            "spark",
            "spark.speculation",
            "is on; two attempts of one partition would write the same transaction at once",
            fix="set spark.speculation=false for jobs that use the transactional sink",
        )


def check_topics(config: SinkConfig, admin: AdminClient | None = None, deadline_s: float = TOPIC_DEADLINE_S) -> None:
    """Fail unless the input, every output topic and the commits topic exist with ``partitions`` partitions.

    Metadata lags: a broker that has not yet learned of a topic created a moment ago answers that it
    does not exist. A topic not shown is asked for again until ``deadline_s``; a partition count
    that differs is final at once (counts only grow). An input that grew stops the job with the
    procedure, before any write of the batch.
    """
    client = admin or AdminClient(config.cluster.client_config())
    give_up_at = time.monotonic() + deadline_s
    written = (*config.output_topics, config.commits_topic)
    while True:
        topics = client.list_topics(timeout=30).topics
        absent = [t for t in written if t not in topics or topics[t].error is not None]
        if not absent:
            break
        if time.monotonic() > give_up_at:
            raise CommitMarkerError(
                absent[0], f"the output topic does not exist (asked for {deadline_s:.0f}s)",
                fix="create it (topics are never auto-created)",
            )  # fmt: skip
        time.sleep(0.5)
    for topic in written:
        count = len(topics[topic].partitions)
        if count != config.partitions:
            raise CommitMarkerError(
                topic,
                f"has {count} partitions but the job writes {config.partitions}",
                fix=f"give every topic of the job the same partition count; to add partitions, {REPARTITION_PROCEDURE}",
            )
    source = topics.get(config.source_topic)
    if source is not None and source.error is None and len(source.partitions) != config.partitions:
        raise CommitMarkerError(
            config.source_topic,
            f"the input has {len(source.partitions)} partitions, query {config.query}'s layout {config.partitions}",
            fix="the input grew while the job ran; stop it, let it drain on the old layout if it can, grow every "
            f"topic of the layout to one count, and start it again: its start says how ({REPARTITION_PROCEDURE})",
        )


def with_topic_limits(config: SinkConfig, admin: AdminClient) -> SinkConfig:
    """``config`` with the ``max.message.bytes`` of every topic it writes, read now (``size_bounds``)."""
    topics = (*config.output_topics, *([config.dlq_topic] if config.dlq_topic else []))
    return dataclasses.replace(config, topic_max_message_bytes=read_topic_limits(admin, topics, TOPIC_DEADLINE_S))
