"""The exactly-once writer's start, in one pass down: the checks over what the start read, then its writes.

``start_writing`` takes the query's markers as the start read them once (``query_start.prepare_sink``, or
``TransactionalBatchWriter.prepare``) and goes, in this order:

1. the checks that need no more than those markers (``grown_layout.refuse_unfit_markers``, pure): a grown
   layout, a marker of another layout or input, a query that handed its output over or writes other topics;
   and Spark's speculation, which would run two writers of one partition;
2. the topics: the commits topic created or checked (``commit_markers.ensure_commits_topic``), every written
   topic's partition count and size limit read (``topic_checks``);
3. the writes: the outputs claimed (``claim_log``, whose verdict gives the recorded start); a handover's
   fencing and the origin's markers, read once when final (``query_handover.handed_over_markers``); each
   output partition's start as a marker of its own (``partition_transactions.record_start``).

Nothing below reads what the start read already: each step takes the markers, the config and the admin
client it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka.admin import AdminClient

from ikkai.contract.partitioning import spark_partition_routes
from ikkai.errors import ConfigError
from spark_jobs.sink.claim_log import claim_outputs
from spark_jobs.sink.commit_markers import CommitMarker, ensure_commits_topic
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.grown_layout import refuse_unfit_markers
from spark_jobs.sink.partition_transactions import record_start
from spark_jobs.sink.query_handover import handed_over_markers, with_origin_layout
from spark_jobs.sink.topic_checks import check_topics, with_topic_limits

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class StartedWriter:
    """What the writer runs with once started: the config with its recorded start and limits, its admin client,
    and the Spark partition of each Kafka partition."""

    config: SinkConfig
    admin: AdminClient
    routes: tuple[int, ...]


def start_writing(spark: SparkSession, config: SinkConfig, markers: Mapping[int, CommitMarker]) -> StartedWriter:
    """The writer's start (module docstring), over the query's ``markers`` as the start read them."""
    refuse_speculation(spark)
    admin = AdminClient(config.cluster.client_config())
    refuse_unfit_markers(config, markers)  # before anything is written: what the markers forbid, a grown layout first
    ensure_commits_topic(config.cluster, config.commits_topic, config.partitions)
    check_topics(config, admin)
    config = with_topic_limits(config, admin)  # each written topic's max.message.bytes
    config = start_as_owner(config, markers)  # claimed; the recorded start; a handover's fencing
    return StartedWriter(config, admin, spark_partition_routes(config.partitions))


def start_as_owner(config: SinkConfig, markers: Mapping[int, CommitMarker]) -> SinkConfig:
    """Claim the outputs (refused in one line unless the claim log makes this query their owner), with the start
    parameters the claim that made it owner recorded; a handover fences its origin while a partition has no marker
    of this query's own yet (idempotent: a restart after a crash in between does it again), and the origin's markers,
    final then, are read once: an origin of another partition count is followed (``grown_layout``). Then each output
    partition without a marker of its own gets its start as one (``record_start``), so a later handover from this
    query starts after it."""
    config = claim_outputs(config, markers)
    origin = handed_over_markers(config, fence=len(markers) < config.partitions)
    config = with_origin_layout(config, origin)
    if config.after_query or config.start_offsets:  # each start durable where it is not 0 (record_start)
        for partition in range(config.partitions):
            if partition not in markers:
                record_start(config, partition, origin)
    return config


def refuse_speculation(spark: SparkSession) -> None:
    if str(spark.conf.get("spark.speculation", "false")).lower() == "true":
        raise ConfigError(
            "spark",
            "spark.speculation",
            "is on; two attempts of one partition would write the same transaction at once",
            fix="set spark.speculation=false for jobs that use the transactional sink",
        )
