"""What a streaming job runs with, resolved once before Spark starts: ``StreamingOptions``, made by ``opened``.

``opened`` is the run's first step: the cluster resolved and checked (``kafka_cluster``), ``--create-topics``
done (and a job's other topics, ``MoreTopics``), the Spark source's settings computed; every use of the
cluster's settings at the start, in one place. The template (``streaming_job``) then runs with the options,
or a replay's (``replay_options``, pure).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ikkai.contract import kafka
from ikkai.contract.kafka import KafkaContext, resolve_cluster
from ikkai.errors import ConfigError
from spark_jobs.options import DEFAULT_TRIGGER_INTERVAL, JobOptions, default_max_offsets_per_trigger
from spark_jobs.sink.config import DEFAULT_TRANSACTION_TIMEOUT_MS, DEFAULT_TRANSACTIONAL_WRITER

if TYPE_CHECKING:
    from spark_jobs.replay_query import ReplayRequest


@dataclass(frozen=True)
class StreamingOptions:
    """What every streaming job is started with: where it reads and keeps its state, how fast, which writer."""

    cluster: KafkaContext
    checkpoint: Path | str  # a folder of the driver's machine, or a URI (hdfs://, s3a://) kept as written
    input_topic: str
    query: str
    partitions: int | None = None
    mode: str = "exactly-once"
    app: str = "ikkai"
    available_now: bool = True
    trigger_interval: str = DEFAULT_TRIGGER_INTERVAL  # with available_now False
    max_offsets_per_trigger: int | None = None  # None: default_max_offsets_per_trigger(transaction_timeout_ms)
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    master: str = "local[2]"
    crash_after_batch: int | None = None  # fault injection for tests: SIGKILL itself after this batch's write
    input_recreated: str = ""  # --input-recreated: the recreated input topic's id, to start over on it
    shadow: bool = False  # infer's --shadow: the query may claim only *.shadow topics
    after_query: str = ""  # a new query taking over another's output (query_handover)
    start_offsets: dict[int, int] = field(default_factory=dict)  # or told where to start
    progress: bool = False  # --progress: each batch's StreamingQueryProgress on stderr (spark_jobs.progress)
    checkpoint_given: bool = True  # False: the default under $IKKAI_HOME, which only a local master may use
    sink_api: str | None = None  # hidden --sink-api; None: foreachBatch (data-source: spark_jobs.sink.stream_writer)
    transactional_writer: str = DEFAULT_TRANSACTIONAL_WRITER  # --transactional-writer: who keeps the producers
    replay_requests: Path | None = None  # --replay-requests: a folder of replay requests (spark_jobs.replay_query)
    replay_of: str = ""  # a replay's: the live query whose recorded cut it reproduces (replay_options)
    transactions: bool = True  # False: the hidden --benchmark-without-transactions, NOT exactly-once (SinkConfig)
    # The Spark Kafka source's settings for ``cluster``, computed once where it is resolved (``opened``); empty: from
    # ``cluster`` when the source is built
    source_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, given: JobOptions, cluster: KafkaContext, query: str, shadow: bool = False,
        source_options: Mapping[str, str] | None = None,
    ) -> StreamingOptions:  # fmt: skip
        """The options the template runs with: what the command line gave, the cluster resolved (the default
        checkpoint a folder under ``$IKKAI_HOME``)."""
        from ikkai.settings import ikkai_home

        return cls(
            cluster=cluster, source_options=dict(source_options or {}),
            checkpoint=given.checkpoint or ikkai_home() / "checkpoints" / query,
            input_topic=given.input_topic, query=query, partitions=given.partitions, mode=given.mode,
            available_now=not given.continuous, trigger_interval=given.trigger_interval,
            max_offsets_per_trigger=given.max_offsets_per_trigger, transaction_timeout_ms=given.transaction_timeout_ms,
            master=given.master, crash_after_batch=given.crash_after_batch, input_recreated=given.input_recreated,
            after_query=given.after_query, start_offsets=given.start_offsets, progress=given.progress,
            checkpoint_given=given.checkpoint_given, sink_api=given.sink_api,
            transactional_writer=given.transactional_writer, replay_requests=given.replay_requests, shadow=shadow,
            transactions=not given.benchmark_without_transactions,
        )  # fmt: skip

    @property
    def max_offsets(self) -> int:
        """Input records per micro-batch at most: the given bound, else the one the transaction timeout allows."""
        return self.max_offsets_per_trigger or default_max_offsets_per_trigger(self.transaction_timeout_ms)


def kafka_cluster(job: str, given: str | None) -> KafkaContext:
    """The job's Kafka cluster, resolved once (``kafka.resolve_cluster``: --bootstrap, the environment,
    or the embedded stack's record) and checked before Spark starts, so wrong credentials or a wrong
    CA are one line within seconds. The context then travels with the job's configuration, into the
    Spark source, the sink and its Python workers; nothing reads the environment again.
    """
    cluster = resolve_cluster(given)
    if cluster is None:
        raise ConfigError(job, "--bootstrap", "no cluster configured", fix="run `ikkai stack up` or pass --bootstrap")
    kafka.check_access(cluster, timeout=30)
    return cluster


@dataclass(frozen=True)
class MoreTopics:
    """Topics a job creates under ``--create-topics`` besides its partitioned ones (enrich's master data)."""

    names: tuple[str, ...]
    partitions: int
    config: Mapping[str, str]


def opened(
    job: str, given: JobOptions, query: str, output_topics: tuple[str, ...], shadow: bool = False,
    more_topics: MoreTopics | None = None,
) -> StreamingOptions:  # fmt: skip
    """The run's first step, before Spark: the cluster resolved and checked, ``--create-topics`` done, and the Spark
    source's settings for the cluster computed: every use of the cluster's settings at the start, in one place."""
    cluster = kafka_cluster(job, given.bootstrap)
    if given.create_topics and given.partitions:  # JobOptions refuses --create-topics without --partitions
        kafka.ensure_topics(cluster, [given.input_topic, *output_topics], given.partitions)  # never auto-created
        if more_topics is not None:
            kafka.ensure_topics(cluster, more_topics.names, more_topics.partitions, config=dict(more_topics.config))
    return StreamingOptions.of(given, cluster, query, shadow, cluster.spark_options())


def replay_options(live: StreamingOptions, request: ReplayRequest) -> StreamingOptions:
    """The live query's options turned into a replay's (``spark_jobs.replay_query``): its name and checkpoint, from
    the earliest offsets to the end, in default-sized batches, with none of the live query's start or crash
    settings. Pure."""
    return dataclasses.replace(
        live, query=request.query, checkpoint=request.checkpoint, available_now=True, max_offsets_per_trigger=None,
        crash_after_batch=None, input_recreated="", after_query="", start_offsets={}, checkpoint_given=True,
        replay_of=live.query,
        shadow=False,  # a replay's topics are its own (a suffix), never a shadow's
    )  # fmt: skip
